"""What an advisor is asked and what it answers: the context of one tuning round and the candidate configs it
suggests. Plain values; the :class:`~controller.ports.Advisor` port is defined over them."""

from __future__ import annotations

from dataclasses import dataclass

from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult


@dataclass(frozen=True)
class Proposal:
    """A candidate config someone (agent or optimizer) suggests, with why."""

    config: EngineConfig
    rationale: str
    proposed_by: str
    expected_gain: float | None = None
    """What the proposer expects this config to gain over the best goodput measured on the shape so far (0.1 is
    10 % more; negative: it expects less); None when it does not say. A search stops when the gain expected of
    its next trial does not pay for the trial's GPU time."""
    gain_uncertainty: float | None = None
    """How uncertain ``expected_gain`` is: the standard deviation of ``log(1 + gain)`` the proposer's model gives
    (0.2 is about x1.22 either way); None when it does not say (``expected_gain`` is then taken as it is)."""
    success_chance: float = 1.0
    """The proposer's chance that the config runs at all within the SLO (a model of earlier failed trials)."""


@dataclass(frozen=True)
class AdvisorContext:
    target: TargetRef
    shape: TrafficShape
    slo: SLO
    active: EngineConfig
    history: tuple[TrialResult, ...]
    max_proposals: int
