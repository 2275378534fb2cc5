"""The promises a TunedService's users rely on, kept where effects happen: whatever decided an action, the executor
asks :func:`guard` before any handler that changes production runs it.

- dry run: every production change is withheld (``dry-run-withheld``);
- a rejected rollout: deploying or growing its candidate, shifting traffic to it, promoting it
  (``rejected-withheld``); its rollback and the stable variant's replicas go ahead;
- a paused rollout: deploying a candidate, shifting more traffic to it, promoting it (``paused-withheld``); a
  rollback and scaling go ahead;
- an approval not given (the step the rollout waits on, or any approval of a config the approval mode makes wait):
  shifting more traffic to the candidate, promoting it (``approval-withheld``); the candidate's warm-up and a
  rollback go ahead.

A trial runs on the dedicated canary pool, never on production: it is not withheld, not even in dry run (dry run
measures what Shiftlight would choose). Notifications and approval requests change nothing either. Any other action
type is a production change: a new one is withheld in dry run until it is listed here as harmless. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller.act.effects import Withheld
from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Promote,
    RequestApproval,
    Rollback,
    RunTrial,
    Scale,
    SetWeights,
)
from controller.domain.approval import ApprovalMode, needs_approval
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.phases import Phase
from controller.domain.status import TargetStatus

#: Actions that change nothing in production: a trial runs on the canary pool; a notice or an approval request only
#: tells people.
HARMLESS: tuple[type[object], ...] = (RunTrial, Notify, RequestApproval)

#: What a notice that went with a withheld change is prefixed with, per code.
LABELS: dict[str, str] = {
    Code.DRY_RUN_WITHHELD: "Dry run",
    Code.REJECTED_WITHHELD: "Rejected",
    Code.PAUSED_WITHHELD: "Paused",
    Code.APPROVAL_WITHHELD: "Awaiting approval",
}


@dataclass(frozen=True)
class Promises:
    """What production may not do this cycle, from the TunedService's rules and the rollout as its users left it."""

    dry_run: bool = False
    paused: bool = False
    rejected: bool = False
    weight: int = 0
    """The candidate's share of traffic now: a weight above it is a move forward."""
    awaiting_step: int | None = None
    """The step the rollout waits for a human to approve (None: it waits for none)."""
    approval_needed: bool = False
    """The rollout's config needs a human's approval under the approval mode (it may change outputs, or every
    rollout does)."""
    approved_steps: frozenset[int] = frozenset()

    @classmethod
    def of(
        cls,
        before: TargetStatus,
        decided: TargetStatus | None = None,
        *,
        dry_run: bool,
        approval: ApprovalMode,
        is_lossy: Callable[[EngineConfig], bool] = lambda _c: False,
    ) -> Promises:
        """The promises of a cycle: ``before`` is the status read at its start (where ``shiftctl`` writes pauses,
        approvals and rejections), ``decided`` the decision's (its rollout, when a rollout starts this cycle)."""
        rollout = before.rollout if before.rollout is not None else decided.rollout if decided is not None else None
        if rollout is None:
            return cls(dry_run=dry_run, approval_needed=approval == "manual")
        awaiting = None
        if before.phase is Phase.AWAITING_APPROVAL and before.rollout is not None:
            awaiting = rollout.step_index if rollout.weight == 0 else rollout.step_index + 1
        return cls(
            dry_run=dry_run,
            paused=rollout.paused or before.phase is Phase.PAUSED,
            rejected=rollout.rejected(),
            weight=rollout.weight if before.rollout is not None else 0,
            awaiting_step=awaiting,
            approval_needed=needs_approval(approval, lossy=is_lossy(rollout.to_config)),
            approved_steps=frozenset(
                a.step for a in rollout.approvals if a.decision == "approved" and rollout.binds(a)
            ),
        )


def guard(action: Action, promises: Promises) -> Action | Withheld:
    """``action`` when it may run under ``promises``, else the :class:`Withheld` effect that says what it would
    have done and why not."""
    if isinstance(action, HARMLESS):
        return action
    kind = type(action).__name__
    forward = isinstance(action, Promote) or (
        isinstance(action, SetWeights) and action.candidate_weight > promises.weight
    )
    grows_candidate = isinstance(action, DeployCandidate) or (
        isinstance(action, Scale) and action.variant == "candidate" and action.replicas > 0
    )
    code: Code | None = None
    if promises.dry_run:
        code = Code.DRY_RUN_WITHHELD
    elif promises.rejected and (forward or grows_candidate):
        code = Code.REJECTED_WITHHELD
    elif promises.paused and (forward or isinstance(action, DeployCandidate)):
        code = Code.PAUSED_WITHHELD
    elif forward and not approved(promises):
        code = Code.APPROVAL_WITHHELD
    if code is None:
        return action
    return Withheld(kind, f"{LABELS[code].lower()}: would {would(action)}", code)


def approved(promises: Promises) -> bool:
    """Whether a move forward has the approval it needs: the step the rollout waits on is approved, and a rollout
    whose config needs a human's approval has one."""
    if promises.awaiting_step is not None and promises.awaiting_step not in promises.approved_steps:
        return False
    return not promises.approval_needed or bool(promises.approved_steps)


def would(action: Action) -> str:
    """What ``action`` does in production, as the end of a sentence after "would"."""
    if isinstance(action, SetWeights):
        return f"send {action.candidate_weight}% of traffic to the candidate ({action.reason})"
    if isinstance(action, Scale):
        return f"scale the {action.variant} variant to {action.replicas} replica(s) ({action.reason})"
    if isinstance(action, DeployCandidate):
        return f"deploy {action.replicas} replica(s) of {action.config.label()} as the candidate ({action.reason})"
    if isinstance(action, Promote):
        return f"promote {action.config.label()} to stable ({action.reason})"
    if isinstance(action, Rollback):
        return f"send all traffic back to stable and retire the candidate ({action.reason})"
    return f"{type(action).__name__}: {action.reason}"


def notice(action: Notify, withheld: Withheld) -> Notify:
    """A notification that went with a withheld change, said as such: its title marked, its sentence prefixed with
    why it was not done, under the withheld change's code."""
    label = LABELS.get(withheld.code, "Withheld")
    return Notify(
        action.severity,
        f"{label}: {action.title}",
        f"not done ({label.lower()}): {action.reason}",
        action.fields,
        code=withheld.code,
    )


__all__ = ["HARMLESS", "Promises", "approved", "guard", "notice", "would"]
