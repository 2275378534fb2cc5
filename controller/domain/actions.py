"""Decisions as data: every action the decide layer can ask for, each with a human-readable reason.

The act layer executes these through ports; status, Kubernetes Events, `shiftctl explain` and Slack all
show the same ``reason`` strings, and each action's ``code`` (:mod:`controller.domain.codes`) next to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

from controller.domain.codes import Code
from controller.domain.codes import Severity as Severity  # each notification has one
from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape


@dataclass(frozen=True)
class RunTrial:
    """Measure ``config`` on the canary pool under ``shape``."""

    config: EngineConfig
    shape: TrafficShape
    reason: str
    proposed_by: str = "optimizer"
    loop: Literal["open", "closed"] | None = None
    """How the load is replayed (see ``TrialRequest.loop``); capacity probes use open-loop arrivals."""
    repeat: bool = False
    """A second measurement of a config already measured on this shape (to measure the noise): run it again,
    never answer it from a result cache."""
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class SetWeights:
    """Route ``candidate_weight`` percent of production traffic to the candidate, the rest to stable."""

    candidate_weight: int
    reason: str
    step: int = 0
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class Scale:
    """Set the replica count of one variant (``stable`` or ``candidate``)."""

    variant: str
    replicas: int
    reason: str
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class DeployCandidate:
    """Start (or update) the candidate variant with ``config``."""

    config: EngineConfig
    replicas: int
    reason: str
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class Promote:
    """Make the candidate the new stable config and retire the old stable variant."""

    config: EngineConfig
    reason: str
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class RequestApproval:
    """Wait for a human to approve (``shiftctl approve``) before going on."""

    rollout_id: str
    step: int
    reason: str
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class Rollback:
    """Send all traffic back to stable and retire the candidate."""

    reason: str
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


@dataclass(frozen=True)
class Notify:
    """Tell people (Slack, Events) about something that happened."""

    severity: Severity
    title: str
    reason: str
    fields: tuple[tuple[str, str], ...] = ()
    code: Code | None = None
    """Machine-readable reason (:class:`~controller.domain.codes.Code`); the decision's code when not set here."""


Action = RunTrial | SetWeights | Scale | DeployCandidate | Promote | RequestApproval | Rollback | Notify


_A = TypeVar("_A")


@dataclass(frozen=True)
class Plan:
    """What the decide layer wants done this cycle, in order, and when to look again."""

    actions: tuple[Action, ...] = ()
    requeue_after_s: float = 60.0
    notes: tuple[str, ...] = field(default=())
    codes: tuple[Code, ...] = ()
    """The reason code of each step of the decision that led to it (machine-readable; the notes are sentences)."""

    def reasons(self) -> list[str]:
        return [a.reason for a in self.actions]

    def of_type(self, kind: type[_A]) -> list[_A]:
        return [a for a in self.actions if isinstance(a, kind)]
