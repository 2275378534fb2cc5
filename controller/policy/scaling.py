"""The policy's ``scaling`` section: how Shiftlight sizes the replicas it manages (a TunedService's
``spec.replicas`` bounds them) and how its capacity probes load a replica. The defaults live here only: the decide
layer's :class:`~controller.decide.rules.ScalingRules` and :class:`~controller.decide.rules.Rules` take theirs from
these constants."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, Field

from controller.policy.space import _STRICT

ProbeLoop = Literal["open", "closed"]
"""``open``: capacity probes replay Poisson arrivals at the probed rate (as production's arrivals test a replica);
``closed``: a closed loop at the probed concurrency (as a router that holds each replica at its streams does)."""

HEADROOM: Final = 0.2
SCALE_DOWN_STABILISATION_SECONDS: Final = 900.0
CAPACITY_PROBE_LOOP: Final[ProbeLoop] = "open"


class ScalingPolicy(BaseModel):
    model_config = _STRICT

    headroom: float = Field(
        default=HEADROOM,
        ge=0,
        le=10,
        description="spare capacity kept above the forecast load (0.2: replicas for 120% of it)",
    )
    scale_down_stabilisation_seconds: float = Field(
        default=SCALE_DOWN_STABILISATION_SECONDS,
        ge=0,
        le=86400,
        description="the desired replicas must stay below the current count this long before replicas are removed",
    )
    capacity_probe_loop: ProbeLoop = Field(
        default=CAPACITY_PROBE_LOOP,
        description="capacity probes replay open-loop arrivals at the probed rate, or a closed loop at the probed "
        "concurrency",
    )


__all__ = ["CAPACITY_PROBE_LOOP", "HEADROOM", "SCALE_DOWN_STABILISATION_SECONDS", "ProbeLoop", "ScalingPolicy"]
