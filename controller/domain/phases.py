"""The lifecycle of a tuned service, as an explicit transition table. Invalid transitions raise."""

from __future__ import annotations

from enum import StrEnum

from controller.errors import InvalidTransition


class Phase(StrEnum):
    OBSERVING = "Observing"
    TRIALLING = "Trialling"
    AWAITING_APPROVAL = "AwaitingApproval"
    ROLLING_OUT = "RollingOut"
    PAUSED = "Paused"
    ROLLED_BACK = "RolledBack"
    FROZEN = "Frozen"


VALID_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.OBSERVING: frozenset(
        {
            Phase.TRIALLING,  # drift, a new window without a tuned config, or a first run
            Phase.FROZEN,  # metrics missing or untrustworthy: take no action
            Phase.ROLLING_OUT,  # a new window starts whose scheduled config differs from the active one
            Phase.AWAITING_APPROVAL,  # the same, when policy wants a human first
        }
    ),
    Phase.TRIALLING: frozenset(
        {
            Phase.OBSERVING,  # no candidate beats the active config by enough
            Phase.AWAITING_APPROVAL,  # a better candidate, and policy wants a human first
            Phase.ROLLING_OUT,  # a better candidate, and policy allows an automatic rollout
            Phase.FROZEN,  # observation failed mid-tuning
        }
    ),
    Phase.AWAITING_APPROVAL: frozenset(
        {
            Phase.ROLLING_OUT,  # approved
            Phase.OBSERVING,  # rejected: stay on stable
            Phase.ROLLED_BACK,  # aborted while waiting at a gate mid-rollout
        }
    ),
    Phase.ROLLING_OUT: frozenset(
        {
            Phase.ROLLING_OUT,  # next weight step
            Phase.AWAITING_APPROVAL,  # a manual gate or an inconclusive analysis
            Phase.PAUSED,  # paused by a user
            Phase.ROLLED_BACK,  # analysis failed or a user aborted
            Phase.OBSERVING,  # promoted: the candidate is the new stable
        }
    ),
    Phase.PAUSED: frozenset(
        {
            Phase.ROLLING_OUT,  # resumed
            Phase.ROLLED_BACK,  # aborted
        }
    ),
    Phase.ROLLED_BACK: frozenset(
        {
            Phase.OBSERVING,  # stable serves everything again
        }
    ),
    Phase.FROZEN: frozenset(
        {
            Phase.OBSERVING,  # metrics are back
        }
    ),
}


def transition(current: Phase, target: Phase) -> Phase:
    """Return ``target`` if ``current -> target`` is allowed, else raise :class:`InvalidTransition`."""
    if target not in VALID_TRANSITIONS[current]:
        raise InvalidTransition(f"invalid phase transition {current.value} -> {target.value}")
    return target
