"""What acting did: one frozen value per outcome, returned by the act handlers and folded into status once per cycle.

Handlers never edit status. The cycle folds these effects (:func:`controller.act.fold.fold`) into the decided status
exactly once, after every action ran. Each carries the reason code of the action that produced it (``code``; a
trial's is its action's): the operator counts effects by type and code (``shiftlight_effects_total``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from controller.domain.actions import RunTrial
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.trial import TrialResult
from controller.ports import TrialHandle


@dataclass(frozen=True)
class TrialRecorded:
    """A trial finished; its result goes into status (and the tuning round's bookkeeping)."""

    action: RunTrial
    result: TrialResult

    @property
    def code(self) -> Code | None:
        return self.action.code


@dataclass(frozen=True)
class TrialStarted:
    """A trial was started and is still running: poll ``handle`` in a later cycle for its :class:`TrialRecorded`."""

    action: RunTrial
    handle: TrialHandle

    @property
    def code(self) -> Code | None:
        return self.action.code


@dataclass(frozen=True)
class WeightsSet:
    """The router now sends ``candidate_weight`` percent to the candidate."""

    candidate_weight: int
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class CandidateDeployed:
    config: EngineConfig
    replicas: int
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class Scaled:
    variant: str
    replicas: int
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class Promoted:
    config: EngineConfig
    already: bool = False
    """The candidate had been promoted already (a promote applied before a lost status write)."""
    running: EngineConfig | None = None
    """The config the promoted variant runs, as read back from the cluster (None: the backend cannot say)."""
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class RolledBack:
    """All traffic went back to stable and the candidate was retired."""

    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class Notified:
    title: str
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class ApprovalRequested:
    """Nothing to do on the cluster: the accompanying Notify tells people, the phase records the wait."""

    rollout_id: str
    step: int
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class EventRecorded:
    reason: str
    warning: bool
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class EventFailed:
    """Events are best effort: recording one failed with ``error`` and the cycle went on."""

    reason: str
    error: str
    code: Code | None = None
    """The reason code of the action that produced it."""


@dataclass(frozen=True)
class Withheld:
    """A production change the guard (:mod:`controller.act.guard`) did not make: dry run, a paused or rejected
    rollout, or an approval not given. ``would`` says what it would have done; ``code`` why it was withheld
    (``dry-run-withheld``, ``paused-withheld``, ``rejected-withheld``, ``approval-withheld``)."""

    action: str
    """The withheld action's type (``SetWeights``, ``Promote``, ...)."""
    would: str
    code: Code


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
    | Withheld
)


def with_code(effect: Effect, code: Code | None) -> Effect:
    """``effect`` under ``code``, the reason code of the action that produced it (a trial's effects already carry
    their action's)."""
    if isinstance(effect, TrialRecorded | TrialStarted | Withheld) or not code or effect.code:
        return effect
    return replace(effect, code=code)


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
    "Withheld",
    "with_code",
]
