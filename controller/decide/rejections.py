"""A rejection is a decision with memory: a config a human rejected (``shiftctl reject``) for a window is recorded in
status (:class:`~controller.domain.status.Rejection`) and not proposed for that window again until the window's
traffic drifts from the shape it had then (the drift detector's distance reaches its ``enter`` threshold) or the
policy's ``rollout.rejection_memory_seconds`` has passed. Pure."""

from __future__ import annotations

from datetime import datetime, timedelta

from controller.decide.context import PlanContext
from controller.decide.signals import drift as drifts
from controller.domain.rollout import Approval, RolloutState
from controller.domain.status import Rejection, TargetStatus
from controller.domain.traffic import TrafficShape

#: Rejections kept in status (the latest).
KEEP = 20


def record(status: TargetStatus, state: RolloutState, approval: Approval, *, window: str) -> Rejection:
    """The rejection of ``state``'s config for ``window``, with the window's traffic shape at the time (its
    schedule entry's, else the shape the active config was tuned on)."""
    entry = status.schedule_for(window)
    shape = entry.shape if entry is not None and entry.config.key() == state.to_config.key() else status.tuned_shape
    return Rejection(
        by=approval.by,
        at=approval.at,
        config_key=state.to_config.key(),
        config_label=state.to_config.label(),
        window=window,
        shape=shape,
        comment=approval.comment,
        rollout_id=state.id,
    )


def remembered(status: TargetStatus, rejection: Rejection) -> tuple[Rejection, ...]:
    """``status.rejections`` with ``rejection`` added (one per config and window: the latest), the latest kept."""
    same = (rejection.config_key, rejection.window)
    others = tuple(r for r in status.rejections if (r.config_key, r.window) != same)
    return (*others, rejection)[-KEEP:]


def standing(ctx: PlanContext, config_key: str, window: str, shape: TrafficShape | None) -> Rejection | None:
    """The rejection of the config keyed ``config_key`` for ``window`` that still holds at ``ctx.now`` with the
    window's traffic at ``shape``: not older than the rules' ``rejection_memory_s``, and ``shape`` not drifted from
    the shape it was rejected on (None: the traffic is not known, the rejection holds). None when it is free."""
    for rejection in reversed(ctx.status.rejections):
        if rejection.config_key != config_key or rejection.window != window:
            continue
        if expired(rejection, ctx.now, ctx.rules.rollout.rejection_memory_s):
            return None
        if drifted(rejection, shape, ctx.rules.drift):
            return None
        return rejection
    return None


def expired(rejection: Rejection, now: datetime, memory_s: float) -> bool:
    return (now - rejection.at).total_seconds() >= memory_s


def drifted(rejection: Rejection, shape: TrafficShape | None, params: drifts.DriftParams) -> bool:
    """Whether ``shape`` is as far from the shape the config was rejected on as the drift detector's ``enter``."""
    if shape is None or rejection.shape is None:
        return False
    return drifts.distance(shape, rejection.shape, params) >= params.enter


def rejected_keys(ctx: PlanContext, window: str, shape: TrafficShape | None) -> frozenset[str]:
    """Keys of the configs whose rejection for ``window`` still holds with its traffic at ``shape``."""
    keys = {r.config_key for r in ctx.status.rejections if r.window == window}
    return frozenset(k for k in keys if standing(ctx, k, window, shape) is not None)


def describe(rejection: Rejection, memory_s: float) -> str:
    """Why a config is not proposed: who rejected it, when, and until when at the latest."""
    when = rejection.at + timedelta(seconds=memory_s)
    why = f": {rejection.comment}" if rejection.comment else ""
    return (
        f"{rejection.config_label or rejection.config_key} was rejected for window '{rejection.window}' by "
        f"{rejection.by} at {rejection.at:%Y-%m-%d %H:%M}{why}; not proposed again until the traffic drifts or "
        f"{when:%Y-%m-%d %H:%M}"
    )


__all__ = ["KEEP", "describe", "drifted", "expired", "record", "rejected_keys", "remembered", "standing"]
