"""Pure patch builders for shiftctl's write verbs (Argo ``getPatches`` style): status in, JSON patch out.

Every patch starts with a ``test`` of the resourceVersion that was read, so a concurrent write (the operator's
cycle, another user) fails with 422 instead of being overwritten; shiftctl then re-reads and rebuilds.
Each builder first checks that the verb makes sense for the current status and raises :class:`VerbRefused`
with a one-line reason when it does not.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from controller.domain.phases import Phase
from controller.domain.rollout import Approval, RolloutState
from controller.domain.status import TargetStatus

JSONPatch = list[dict[str, Any]]


class VerbRefused(Exception):
    """The verb does not apply to the object's current state (nothing was written)."""


class AlreadyDone(Exception):
    """The requested change is already in place (nothing to write)."""


def _guard(resource_version: str) -> dict[str, Any]:
    return {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}


def pending_step(rollout: RolloutState) -> int:
    """The step index an approval would unlock: the current step before any traffic moved, else the next one."""
    return rollout.step_index if rollout.weight == 0 else rollout.step_index + 1


def _active_rollout(status: TargetStatus, verb: str) -> RolloutState:
    rollout = status.rollout
    if rollout is None or status.phase in (Phase.OBSERVING, Phase.TRIALLING, Phase.FROZEN, Phase.ROLLED_BACK):
        raise VerbRefused(f"nothing to {verb}: no rollout in progress (phase {status.phase.value})")
    return rollout


def build_approval_patch(
    status: TargetStatus,
    *,
    resource_version: str,
    by: str,
    at: datetime,
    decision: Literal["approved", "rejected"] = "approved",
    step: int | None = None,
    comment: str = "",
    raw_status: dict[str, Any] | None = None,
) -> JSONPatch:
    """Append ``Approval(by, at, step, decision)`` to ``status.rollout.approvals``, guarded by resourceVersion; the
    approval names the rollout (``rollout_id``) and the key of the ``to_config`` it decides on (``config_key``)."""
    rollout = _active_rollout(status, "approve" if decision == "approved" else "reject")
    if decision == "approved" and status.phase is not Phase.AWAITING_APPROVAL:
        raise VerbRefused(
            f"rollout {rollout.id} is not waiting for an approval "
            f"(phase {status.phase.value}, weight {rollout.weight}%)"
        )
    target_step = pending_step(rollout) if step is None else step
    if target_step >= len(rollout.steps):
        raise VerbRefused(f"rollout {rollout.id} has {len(rollout.steps)} steps; step {target_step + 1} does not exist")
    if decision == "approved" and rollout.approved_step(target_step):
        who = next(a.by for a in rollout.approvals if a.step == target_step and a.decision == "approved")
        raise AlreadyDone(f"step {target_step + 1} of rollout {rollout.id} is already approved by {who}")
    if decision == "rejected" and rollout.rejected():
        raise AlreadyDone(f"rollout {rollout.id} is already rejected")
    # bound to what it decides: this rollout and its to_config (the operator ignores a decision on another)
    approval = Approval(
        by=by,
        at=at,
        step=target_step,
        decision=decision,
        comment=comment,
        rollout_id=rollout.id,
        config_key=rollout.to_config.key(),
    )
    value = approval.model_dump(mode="json")
    has_list = raw_status is None or "approvals" in (raw_status.get("rollout") or {})
    op: dict[str, Any] = (
        {"op": "add", "path": "/status/rollout/approvals/-", "value": value}
        if has_list
        else {"op": "add", "path": "/status/rollout/approvals", "value": [value]}
    )
    return [_guard(resource_version), op]


def build_pause_patch(status: TargetStatus, *, resource_version: str, paused: bool) -> JSONPatch:
    """Pause (or resume) the rollout in progress."""
    rollout = _active_rollout(status, "pause" if paused else "resume")
    if rollout.paused == paused:
        raise AlreadyDone(f"rollout {rollout.id} is already {'paused' if paused else 'running'}")
    return [_guard(resource_version), {"op": "add", "path": "/status/rollout/paused", "value": paused}]


def build_abort_patch(status: TargetStatus, *, resource_version: str, reason: str, verb: str = "abort") -> JSONPatch:
    """Ask the operator to roll the rollout back (all traffic to stable, candidate retired) on its next cycle."""
    rollout = _active_rollout(status, verb)
    if rollout.abort_requested:
        raise AlreadyDone(f"rollout {rollout.id} is already being aborted ({rollout.abort_reason or 'no reason'})")
    return [
        _guard(resource_version),
        {"op": "add", "path": "/status/rollout/abort_requested", "value": True},
        {"op": "add", "path": "/status/rollout/abort_reason", "value": reason},
    ]


__all__ = [
    "AlreadyDone",
    "VerbRefused",
    "build_abort_patch",
    "build_approval_patch",
    "build_pause_patch",
    "pending_step",
]
