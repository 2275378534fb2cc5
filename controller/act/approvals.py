"""Approvals: nothing to do on the cluster. The Notify that accompanies the request tells people, and the phase
(``AwaitingApproval``) records the wait until ``shiftctl approve``."""

from __future__ import annotations

from controller.act.context import ActContext
from controller.act.effects import ApprovalRequested, Effect
from controller.domain.actions import RequestApproval


def request_approval(action: RequestApproval, ctx: ActContext) -> tuple[Effect, ...]:
    return (ApprovalRequested(action.rollout_id, action.step),)
