"""Telling people: notifications through the notifier, and one Kubernetes Event per action (best effort)."""

from __future__ import annotations

import logging

from controller.act.context import ActContext
from controller.act.effects import Effect, EventFailed, EventRecorded, Notified, Withheld
from controller.domain.actions import Action, Notify, Rollback
from controller.errors import ShiftlightError

log = logging.getLogger(__name__)


def notify(action: Notify, ctx: ActContext) -> tuple[Effect, ...]:
    ctx.ports.notifier.post(ctx.target, action)
    return (Notified(action.title),)


def record_event(action: Action, ctx: ActContext) -> Effect:
    """The Event every action leaves (reason: the action's code in CamelCase, as Kubernetes Event reasons are
    written, e.g. ``SloBreach``; the action's type when it has no code; message: its reason). A failure to record
    one is an effect, not an error: the cycle goes on."""
    kind = type(action).__name__
    reason = action.code.event_reason if action.code else kind
    warning = isinstance(action, Rollback) or (isinstance(action, Notify) and action.severity != "info")
    try:
        ctx.ports.cluster.record_event(ctx.target, reason, action.reason, warning=warning, action=kind)
    except ShiftlightError as exc:
        log.warning("%s: could not record an Event (%s)", ctx.target, exc)
        return EventFailed(kind, str(exc))
    return EventRecorded(kind, warning)


def record_withheld(withheld: Withheld, ctx: ActContext) -> Effect:
    """The Event a withheld production change leaves (reason: its code in CamelCase, e.g. ``DryRunWithheld``;
    message: what it would have done). Best effort, as every Event."""
    reason = withheld.code.event_reason
    try:
        ctx.ports.cluster.record_event(ctx.target, reason, withheld.would, warning=False, action=withheld.action)
    except ShiftlightError as exc:
        log.warning("%s: could not record an Event (%s)", ctx.target, exc)
        return EventFailed(withheld.action, str(exc))
    return EventRecorded(withheld.action, False)
