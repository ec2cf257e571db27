"""The clients' scores of a round, read so that no single client decides them.

A client scores itself (the ``evaluate`` verb): over MQTT, a device's accuracy is its own claim, and a
device that reports 1.0 every round moves the mean over three devices by a third of its lie. So
beside the mean the loop records the median over the clients (one liar among three or more cannot
move it past the honest scores), and flags a client whose score keeps away from the others'
(`ScoreWatch`): in each of its last `SUSPECT_EVALUATIONS` evaluations, its score sat on the same side
of the others' median, farther than `SUSPECT_DEVIATIONS` robust deviations of the others' scores
(1.4826 x their median absolute deviation, MAD) and than `SUSPECT_FLOOR`; it needs two others.

Why so wide: personalised accuracies on label-skewed splits differ honestly, and swing. On digits
with 3 clients split ``shards:2`` (two classes each), the global model of FedAvg and DFL scored one
client 0.79 above the others' median in one round and another client far above in the next; a
client's move between two rounds beyond the others' reached 1.5. One round far away, or a jump, is
what honest clients do; staying far away on one side, round after round, is what a device that
reports a fixed score does (docs/DEPLOYMENT.md#self-reported-scores: the measurements, and what
the rule misses).

A flag is a note in the round's record (``suspect_scores``), not a refusal: the score still counts in
the mean, which stays the figure that simulations compare with the papers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

SUSPECT_DEVIATIONS = 3.0
"""How many robust deviations of the others' scores a score may sit from their median."""
SUSPECT_FLOOR = 0.5
"""The least distance (accuracy, 0-1) from the others' median that counts, however closely they agree:
an honest device on a label-skewed split stayed 0.32 or more above it for three evaluations in a row
(FedICT on digits, ``shards:2``, 5 clients)."""
SUSPECT_EVALUATIONS = 3
"""In how many of a client's evaluations in a row its score must sit that far, on one side."""
MAD_TO_SIGMA = 1.4826
"""The MAD times this estimates a normal spread's standard deviation."""


def finite(scores: Mapping[str, float]) -> dict[str, float]:
    """The scores that are numbers (a client without test samples answers NaN)."""
    return {cid: value for cid, value in scores.items() if not math.isnan(value)}


def median_of(scores: Mapping[str, float]) -> float:
    """The median of the finite scores (NaN if none): one liar among three or more cannot move it
    past the honest scores."""
    values = list(finite(scores).values())
    return float(np.median(values)) if values else float("nan")


def away_from_others(cid: str, scores: Mapping[str, float]) -> tuple[float, float] | None:
    """How far ``cid``'s score sits from the others' median (signed: above is positive), and the
    distance that counts (`SUSPECT_DEVIATIONS` robust deviations of the others, at least
    `SUSPECT_FLOOR`); None with fewer than two others."""
    others = np.array([value for other, value in scores.items() if other != cid])
    if len(others) < 2:
        return None
    centre = float(np.median(others))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(others - centre)))
    return scores[cid] - centre, max(SUSPECT_DEVIATIONS * spread, SUSPECT_FLOOR)


@dataclass
class ScoreWatch:
    """Each client's distances from the others' median over its last evaluations, to flag one
    that stays far away on one side (the module's rule)."""

    recent: dict[str, list[float]] = field(default_factory=dict)
    """Per client, its last `SUSPECT_EVALUATIONS` distances, each over the distance that counted."""

    def suspects(self, scores: Mapping[str, float]) -> dict[str, str]:
        """The clients of this evaluation whose score does not fit, and why (``scores``: the
        evaluation's; NaN and clients without two others scored are left out)."""
        scores = finite(scores)
        suspect: dict[str, str] = {}
        for cid in sorted(scores):
            away = away_from_others(cid, scores)
            if away is None:
                continue
            distance, counts = away
            past = self.recent.setdefault(cid, [])
            past.append(distance / counts)
            del past[:-SUSPECT_EVALUATIONS]
            if len(past) == SUSPECT_EVALUATIONS and (min(past) > 1 or max(past) < -1):
                suspect[cid] = (
                    f"{distance:+.3f} from the others' median (counts past {counts:.3f}), "
                    f"as far on the same side in each of its last {SUSPECT_EVALUATIONS} evaluations"
                )
        return suspect
