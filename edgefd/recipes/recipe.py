"""What a recipe is: a shared simulation setting, the arms it compares, the papers' claims about
them, and the checks that keep a recipe sound (arms with their own folders, arms that move only a
point of the setting, claims that name arms of the recipe). The recipes themselves are data, one
module per paper beside this one (`edgefd.recipes`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, cast

from edgefd.claims import Claim, Direction
from edgefd.runtime.config import SimulationConfig


@dataclass
class Arm:
    """One compared method: a label, an algorithm and its params."""

    label: str
    algo: str
    params: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None
    """Run-folder prefix (default: the algo); set it when two arms share an algo (ablations)."""
    config: dict[str, Any] = field(default_factory=dict)
    """Settings this arm runs with instead of the recipe's (a sweep's point: `partition`,
    `samples_per_client`, `participation`); the table lists them as differences between arms, and a
    claim compares two arms at the same point."""


NOT_SHARED = (
    "algo",
    "params",
    "seed",
    "out",
    "data_root",
    "threads",
    "kernels",
    "device",
    "backend",
    "workers",
    "ray_address",
    "gpus_per_worker",
)
"""Config fields that are not part of a comparison's setting: the method itself, and where it runs."""

_SWEEPABLE = {f.name for f in fields(SimulationConfig)} - {"params", "rounds", *NOT_SHARED}
"""What an arm may set for itself: anything of the setting but its method, seed, folder, threads and
length (a table's rounds and threads are one for all arms)."""


@dataclass
class Recipe:
    name: str
    source: str
    """Where the recipe comes from: the paper's setting and how it is scaled down (the method's page)."""
    base: SimulationConfig
    arms: list[Arm]
    target_from: list[str]
    """Labels whose lowest mean best-accuracy, minus one point, is the common target accuracy."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    isolated: bool = False
    """Run every (arm, seed) in a process of its own, so that its peak memory is its own (the table
    then has a peak-memory column), and print the mean accuracy of every round."""
    claims: list[Claim] = field(default_factory=list)
    """The papers' own comparisons between these arms; the table ends with each one's verdict."""
    choices: tuple[str, ...] = ()
    """edgefd's choices where the paper is ambiguous that the verdicts rest on, one sentence each
    with the method page that argues it: printed under the claims."""

    def __post_init__(self) -> None:
        folders = [arm.folder or arm.algo for arm in self.arms]
        repeated = sorted({name for name in folders if folders.count(name) > 1})
        if repeated:
            raise ValueError(f"recipe {self.name}: arms share the run folder(s) {repeated}; give them Arm.folder")
        for arm in self.arms:
            unknown = sorted(set(arm.config) - _SWEEPABLE)
            if unknown:
                raise ValueError(
                    f"recipe {self.name}: arm {arm.label!r} sets {unknown}, which an arm cannot move "
                    f"(it may set {', '.join(sorted(_SWEEPABLE))})"
                )
        labels = {arm.label for arm in self.arms}
        for claim in self.claims:
            unknown = sorted({claim.method, claim.baseline} - labels)
            if unknown:
                raise ValueError(f"recipe {self.name}: claim {claim.text!r} names no arm {unknown}")


def claims_of(*claims: tuple[str, str, str, str, str]) -> list[Claim]:
    """Claims from (method, "above" | "below", baseline, metric, source); `Claim` checks each."""
    return [
        Claim(method, cast(Direction, way), baseline, metric, source)
        for method, way, baseline, metric, source in claims
    ]
