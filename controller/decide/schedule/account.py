"""The schedule's running account: each cycle's GPU time in production against what the best static config
Shiftlight measured would have needed for the same load, and the fall-back to that static config after a week the
schedule lost (code ``schedule-not-paying``). Pure.

A per-window schedule is worth its switches only while it runs on fewer GPU-hours than never switching would. The
account counts, for every observed cycle, the replicas production ran (the stable fleet and the rollout's
candidates, each at its tensor-parallel size) and the replicas the *static reference* would have run for the load
observed: the config, among those the schedule serves, whose probed capacity on every window's traffic needs the
fewest GPU-hours a day at the rates the windows were tuned at. Until such a config is measured on every window,
a cycle counts the same on both sides (nothing is known against it). After a week the account is settled: behind,
the schedule is set aside for a week and the static reference serves every window; even or ahead, a new week
starts.
"""

from __future__ import annotations

from datetime import timedelta

from controller.decide.capacity.sizing import replicas_for
from controller.decide.context import Intent, PlanContext
from controller.decide.rollout.sizing import candidate_replicas_for
from controller.decide.schedule.worth import probed_capacity
from controller.domain.actions import Notify, Severity
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.status import ScheduleAccount, TargetStatus

WEEK_S = 7 * 86400.0
#: A gap between two cycles longer than this (an operator down) is not counted: nothing is known of it.
MAX_CYCLE_GAP_S = 3600.0


def static_reference(ctx: PlanContext) -> tuple[EngineConfig, float] | None:
    """The best static config measured and its GPU-hours a day: among the configs the schedule serves and the active
    one, the one whose probed capacity on every scheduled window's traffic, at the rate the window was tuned at,
    needs the fewest GPU-hours over the day. None without managed replicas, or when no config was probed on every
    window's traffic."""
    rules = ctx.rules.scaling
    entries = [e for e in ctx.status.schedule if e.fleet_rate_rps is not None]
    if rules is None or not entries:
        return None
    hours = {w.name: w.hours for w in ctx.rules.windows}
    candidates: dict[str, EngineConfig] = {c.key(): c for c in (ctx.status.active_config, *(e.config for e in entries))}
    best: tuple[EngineConfig, float] | None = None
    for config in candidates.values():
        total = 0.0
        for entry in entries:
            capacity = probed_capacity(ctx, config, entry.shape)
            if not capacity:
                break
            need = _bounded(
                replicas_for(entry.fleet_rate_rps or 0.0, capacity, rules), rules.min_replicas, rules.max_replicas
            )
            total += need * config.tensor_parallel_size * hours.get(entry.window, 0.0)
        else:
            if best is None or total < best[1]:
                best = (config, total)
    return best


def _bounded(replicas: int, lo: int, hi: int) -> int:
    return min(max(replicas, lo, 1), max(hi, 1))


def production_gpus(status: TargetStatus, candidate_ready_replicas: int | None) -> int:
    """GPUs production holds now: the stable fleet and, while a rollout runs, its candidates."""
    gpus = status.replicas * status.active_config.tensor_parallel_size
    rollout = status.rollout
    if rollout is not None:
        candidates = candidate_ready_replicas
        if candidates is None:
            candidates = candidate_replicas_for(status.replicas, rollout.weight) if rollout.weight > 0 else 0
        gpus += candidates * rollout.to_config.tensor_parallel_size
    return gpus


def tally(ctx: PlanContext) -> Intent | None:
    """This cycle counted into the account, and the week settled when it is over (code ``schedule-not-paying``
    when the schedule ran on more GPU-hours than the static reference would have: it is set aside for a week;
    ``schedule-account`` otherwise). None without managed replicas or an observation."""
    rules = ctx.rules.scaling
    if rules is None or ctx.external_autoscaler or ctx.observation is None:
        return None
    status = ctx.status
    account = status.schedule_account or ScheduleAccount(since=ctx.now, updated_at=ctx.now)
    gap = (ctx.now - account.updated_at).total_seconds()
    dt = gap if 0 < gap <= MAX_CYCLE_GAP_S else 0.0
    realised = production_gpus(status, ctx.candidate_ready_replicas) * dt
    reference = static_reference(ctx)
    static = realised
    config = account.static_config
    if reference is not None and not account.falls_back(ctx.now):
        config = reference[0]
        entry = status.schedule_for(ctx.window.name)
        capacity = probed_capacity(ctx, config, entry.shape) if entry is not None else None
        if capacity:
            need = replicas_for(ctx.observation.shape.arrival_rate_rps, capacity, rules)
            static = _bounded(need, rules.min_replicas, rules.max_replicas) * config.tensor_parallel_size * dt
    account = account.model_copy(
        update={
            "updated_at": ctx.now,
            "realised_gpu_s": account.realised_gpu_s + realised,
            "static_gpu_s": account.static_gpu_s + static,
            "static_config": config,
        }
    )
    if (ctx.now - account.since).total_seconds() < WEEK_S:
        return Intent(Code.SCHEDULE_ACCOUNT, status.model_copy(update={"schedule_account": account}))
    return settle(ctx, account)


def settle(ctx: PlanContext, account: ScheduleAccount) -> Intent:
    """The week's verdict: behind the static reference, the schedule is set aside for a week and the static
    reference serves every window (code ``schedule-not-paying``); otherwise a new week starts (code
    ``schedule-account``)."""
    fresh = ScheduleAccount(since=ctx.now, updated_at=ctx.now, static_config=account.static_config)
    realised_h, static_h = account.realised_gpu_s / 3600, account.static_gpu_s / 3600
    behind = account.static_config is not None and realised_h > static_h and not account.falls_back(ctx.now)
    if not behind:
        kept = fresh.model_copy(
            update={
                "fallback_config": account.fallback_config if account.falls_back(ctx.now) else None,
                "fallback_until": account.fallback_until if account.falls_back(ctx.now) else None,
                "fallback_reason": account.fallback_reason if account.falls_back(ctx.now) else None,
            }
        )
        return Intent(Code.SCHEDULE_ACCOUNT, ctx.status.model_copy(update={"schedule_account": kept}))
    assert account.static_config is not None
    until = ctx.now + timedelta(seconds=WEEK_S)
    why = (
        f"the schedule is not paying: it ran {realised_h:.1f} GPU-hours this week where the best static config "
        f"measured, {account.static_config.label()}, would have run {static_h:.1f} for the same load; serving "
        f"{account.static_config.label()} in every window until {until:%Y-%m-%d %H:%M} UTC"
    )
    fallen = fresh.model_copy(
        update={"fallback_config": account.static_config, "fallback_until": until, "fallback_reason": why}
    )
    status = ctx.status.model_copy(update={"schedule_account": fallen})
    return Intent(
        Code.SCHEDULE_NOT_PAYING,
        status,
        (Notify(Severity.WARNING, "Schedule not paying", why, code=Code.SCHEDULE_NOT_PAYING),),
        (why,),
    )


def describe(account: ScheduleAccount | None) -> str:
    """One line for the digest and ``shiftctl explain``."""
    if account is None:
        return "no schedule account yet"
    realised_h, static_h = account.realised_gpu_s / 3600, account.static_gpu_s / 3600
    reference = account.static_config.label() if account.static_config is not None else "none measured yet"
    line = (
        f"since {account.since:%Y-%m-%d %H:%M}: the schedule ran {realised_h:.1f} GPU-hours, the best static config "
        f"measured ({reference}) {static_h:.1f} for the same load ({static_h - realised_h:+.1f} saved)"
    )
    if account.fallback_config is not None and account.fallback_reason:
        line += f"; schedule-not-paying: {account.fallback_reason}"
    return line


__all__ = ["describe", "production_gpus", "settle", "static_reference", "tally"]
