"""Drift: does the live traffic still look like the traffic the active config was tuned for?

Pure: no I/O, no clock reads; ``now`` and the previous :class:`DriftState` are passed in, the next state is returned
(it is serialisable and lives in the target's status).

The distance is a weighted Euclidean norm over features on scales where "one unit" means "a change that can flip
the best config":

- ``log2(1 + concurrency)``: a doubling of concurrency is 1 unit;
- ``log2(prompt mean)`` and ``log2(output mean)``: a doubling of the mean length is 1 unit;
- ``repetitiveness / 0.25``: a 25-point change in the copyable share is 1 unit.

Hysteresis: the verdict turns *drifted* only after the distance stayed at or above ``enter`` for ``dwell_s``, and turns
back only after it stayed at or below ``exit`` for ``dwell_s``; in between nothing changes, so noise around one
threshold cannot make the loop flap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DriftParams", "DriftState", "DriftVerdict", "assess", "components", "distance"]

from controller.domain.status import DriftState
from controller.domain.traffic import TrafficShape


class DriftParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enter: float = Field(default=1.0, gt=0, description="distance at/above which drift may start")
    exit: float = Field(default=0.5, ge=0, description="distance at/below which drift may end")
    dwell_s: float = Field(default=600.0, ge=0, description="how long a condition must hold before the verdict flips")
    weight_concurrency: float = Field(default=1.0, ge=0)
    weight_prompt: float = Field(default=1.0, ge=0)
    weight_output: float = Field(default=1.0, ge=0)
    weight_repetitiveness: float = Field(default=1.0, ge=0)
    repetitiveness_unit: float = Field(default=0.25, gt=0)

    @model_validator(mode="after")
    def _exit_below_enter(self) -> DriftParams:
        if self.exit >= self.enter:
            raise ValueError(f"exit ({self.exit}) must be below enter ({self.enter})")
        return self


@dataclass(frozen=True)
class DriftVerdict:
    drifted: bool
    changed: bool
    distance: float
    components: dict[str, float]
    reason: str


def components(live: TrafficShape, tuned: TrafficShape, params: DriftParams) -> dict[str, float]:
    """Signed, weighted per-feature differences (live minus tuned) in drift units."""
    return {
        "concurrency": params.weight_concurrency * (math.log2(1 + live.concurrency) - math.log2(1 + tuned.concurrency)),
        "prompt": params.weight_prompt * (math.log2(live.prompt_tokens.mean) - math.log2(tuned.prompt_tokens.mean)),
        "output": params.weight_output * (math.log2(live.output_tokens.mean) - math.log2(tuned.output_tokens.mean)),
        "repetitiveness": params.weight_repetitiveness
        * (live.repetitiveness - tuned.repetitiveness)
        / params.repetitiveness_unit,
    }


def distance(live: TrafficShape, tuned: TrafficShape, params: DriftParams | None = None) -> float:
    parts = components(live, tuned, params or DriftParams())
    return math.sqrt(sum(v * v for v in parts.values()))


def assess(
    live: TrafficShape,
    tuned: TrafficShape | None,
    state: DriftState,
    *,
    now: datetime,
    params: DriftParams | None = None,
) -> tuple[DriftVerdict, DriftState]:
    """One drift step. With no tuned shape yet there is nothing to drift from: not drifted, state unchanged."""
    params = params or DriftParams()
    if tuned is None:
        return DriftVerdict(False, False, 0.0, {}, "no tuned shape yet"), state
    parts = components(live, tuned, params)
    d = math.sqrt(sum(v * v for v in parts.values()))
    largest = max(parts, key=lambda k: abs(parts[k]))
    detail = f"distance {d:.2f} (largest: {largest} {parts[largest]:+.2f})"

    wants_flip = d >= params.enter if not state.drifted else d <= params.exit
    if not wants_flip:
        # nothing to flip: status keeps the distance to a tenth, so traffic moving a little between cycles leaves
        # the stored status as it is (no write); the verdict itself carries the exact distance
        steady = round(d, 1)
        new_state = state.model_copy(update={"pending_since": None, "last_distance": steady})
        where = "drifted" if state.drifted else "in tune"
        return DriftVerdict(state.drifted, False, d, parts, f"{where}: distance {steady:.1f}"), new_state

    since = state.pending_since or now
    held = (now - since).total_seconds()
    if held >= params.dwell_s:
        flipped = not state.drifted
        new_state = DriftState(drifted=flipped, pending_since=None, changed_at=now, last_distance=d)
        what = (
            f"traffic drifted from the tuned shape: {detail} >= {params.enter} for {held:.0f}s"
            if flipped
            else f"traffic back near the tuned shape: {detail} <= {params.exit} for {held:.0f}s"
        )
        return DriftVerdict(flipped, True, d, parts, what), new_state
    new_state = state.model_copy(update={"pending_since": since, "last_distance": d})
    threshold = f">= {params.enter}" if not state.drifted else f"<= {params.exit}"
    reason = f"{detail} {threshold} for {held:.0f}s of {params.dwell_s:.0f}s dwell"
    return DriftVerdict(state.drifted, False, d, parts, reason), new_state
