"""The clients' scores of a round, read so that no single client decides them.

A client scores itself (the ``evaluate`` verb): over MQTT, a device's accuracy is its own claim, and a
device that reports 1.0 every round moves the mean over three devices by a third of its lie. So
beside the mean the loop records the median over the clients (one liar among three or more cannot
move it past the honest scores), and flags a score that does not fit (`suspect_scores`):

- against the others: it sits more than `SUSPECT_DEVIATIONS` robust deviations (1.4826 x the median
  absolute deviation, MAD, of the others' scores) *and* more than `SUSPECT_FLOOR` from the others'
  median (the floor keeps personalised accuracies on non-IID splits, which differ honestly, unflagged
  when the others happen to agree closely); needs at least two others;
- against its own history: it moved more than `SUSPECT_JUMP` since the client's previous score beyond
  what the others' median moved over the same rounds; needs a previous score and one other.

A flag is a note in the round's record (``suspect_scores``), not a refusal: the score still counts in
the mean, which stays the figure that simulations compare with the papers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

SUSPECT_DEVIATIONS = 5.0
"""How many robust deviations of the others' scores a score may sit from their median."""
SUSPECT_FLOOR = 0.3
"""The least distance (accuracy, 0-1) from the others' median that is flagged, however closely they agree."""
SUSPECT_JUMP = 0.3
"""The most a client's score may move between two evaluations beyond the others' median move."""
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
    """How far ``cid``'s score sits from the others' median, and the distance that is flagged
    (`SUSPECT_DEVIATIONS` robust deviations of the others, at least `SUSPECT_FLOOR`); None with
    fewer than two others."""
    others = np.array([value for other, value in scores.items() if other != cid])
    if len(others) < 2:
        return None
    centre = float(np.median(others))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(others - centre)))
    return abs(scores[cid] - centre), max(SUSPECT_DEVIATIONS * spread, SUSPECT_FLOOR)


def jump_beyond_others(cid: str, scores: Mapping[str, float], previous: Mapping[str, float]) -> float | None:
    """How much ``cid``'s score moved since its previous one beyond the others' median move (signed);
    None without a previous score of its own or of another."""
    moves = {other: scores[other] - previous[other] for other in scores if other in previous}
    if cid not in moves or len(moves) < 2:
        return None
    return moves[cid] - float(np.median([move for other, move in moves.items() if other != cid]))


def suspect_scores(scores: Mapping[str, float], previous: Mapping[str, float]) -> dict[str, str]:
    """The clients whose score does not fit the others' or its own history (the module's rule),
    and why; ``previous``: each client's last finite score before this evaluation."""
    scores = finite(scores)
    suspect: dict[str, str] = {}
    for cid in sorted(scores):
        reasons = []
        away = away_from_others(cid, scores)
        if away is not None and away[0] > away[1]:
            reasons.append(f"{away[0]:.3f} from the others' median (flagged past {away[1]:.3f})")
        jump = jump_beyond_others(cid, scores, previous)
        if jump is not None and abs(jump) > SUSPECT_JUMP:
            reasons.append(f"moved {jump:+.3f} beyond the others' median move since its last score")
        if reasons:
            suspect[cid] = "; ".join(reasons)
    return suspect
