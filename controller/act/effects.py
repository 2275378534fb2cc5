"""What acting did: one frozen value per outcome, returned by the act handlers and folded into status once per cycle.

Handlers never edit status. The cycle folds these effects (:func:`controller.act.fold.fold`) into the decided status
exactly once, after every action ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.domain.actions import RunTrial
from controller.domain.config import EngineConfig
from controller.domain.trial import TrialResult
from controller.ports import TrialHandle


@dataclass(frozen=True)
class TrialRecorded:
    """A trial finished; its result goes into status (and the tuning round's bookkeeping)."""

    action: RunTrial
    result: TrialResult


@dataclass(frozen=True)
class TrialStarted:
    """A trial was started and is still running: poll ``handle`` in a later cycle for its :class:`TrialRecorded`."""

    action: RunTrial
    handle: TrialHandle


@dataclass(frozen=True)
class WeightsSet:
    """The router now sends ``candidate_weight`` percent to the candidate."""

    candidate_weight: int


@dataclass(frozen=True)
class CandidateDeployed:
    config: EngineConfig
    replicas: int


@dataclass(frozen=True)
class Scaled:
    variant: str
    replicas: int


@dataclass(frozen=True)
class Promoted:
    config: EngineConfig
    already: bool = False
    """The candidate had been promoted already (a promote applied before a lost status write)."""


@dataclass(frozen=True)
class RolledBack:
    """All traffic went back to stable and the candidate was retired."""


@dataclass(frozen=True)
class Notified:
    title: str


@dataclass(frozen=True)
class ApprovalRequested:
    """Nothing to do on the cluster: the accompanying Notify tells people, the phase records the wait."""

    rollout_id: str
    step: int


@dataclass(frozen=True)
class EventRecorded:
    reason: str
    warning: bool


@dataclass(frozen=True)
class EventFailed:
    """Events are best effort: recording one failed with ``error`` and the cycle went on."""

    reason: str
    error: str


Effect = (
    TrialRecorded
    | TrialStarted
    | WeightsSet
    | CandidateDeployed
    | Scaled
    | Promoted
    | RolledBack
    | Notified
    | ApprovalRequested
    | EventRecorded
    | EventFailed
)

__all__ = [
    "ApprovalRequested",
    "CandidateDeployed",
    "Effect",
    "EventFailed",
    "EventRecorded",
    "Notified",
    "Promoted",
    "RolledBack",
    "Scaled",
    "TrialRecorded",
    "TrialStarted",
    "WeightsSet",
]
