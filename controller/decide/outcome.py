"""What a finished tuning round leads to: keep the active config, schedule the winner for its window, roll it out
now, or pause trials when nothing met the SLO; with managed replicas, a winner must also save replicas. Pure."""

from __future__ import annotations

from datetime import timedelta

from controller.decide.capacity.scaling import short_of_replicas
from controller.decide.context import Intent, PlanContext, move, observing, remaining_s, round_trials, with_schedule
from controller.decide.rollout import lifecycle as rolling
from controller.decide.tuning import probe, selection
from controller.decide.tuning import rounds as tuning
from controller.domain.actions import Notify, Severity
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.status import ScheduledConfig, TargetStatus, TuningRound
from controller.domain.trial import TrialResult, TrialStatus


def select(ctx: PlanContext, round_: TuningRound) -> Intent:
    """The round's verdict. Codes: ``retry-lighter``, ``trials-paused`` (nothing met the SLO), ``keep-active``
    (no gain beyond the threshold and the noise), ``no-replicas-saved``, ``scheduled-for-window`` (another
    window's config), ``not-worth-switching``, ``too-few-replicas``, ``schedule-not-paying`` (the schedule is set
    aside for a static config after a losing week), ``dry-run``, ``rollout-started`` /
    ``approval-required``."""
    trials = round_trials(ctx.status)
    active = ctx.status.active_config
    baseline = selection.find(trials, active)
    stock = selection.find(trials, STOCK) or baseline
    best = selection.best(ctx, trials)
    status = ctx.status.model_copy(update={"tuning": None, "tuned_shape": round_.shape})
    stock_goodput = stock.objective() if stock else 0.0
    base_goodput = baseline.objective() if baseline else 0.0
    lighter = best is None and ctx.rules.scaling is not None and round_.shape.concurrency >= 2
    if lighter and any(measured(t) for t in trials):
        return tuning.retry_lighter(ctx, round_)
    if best is None:
        return _pause_trials(ctx, round_, trials, status)
    by_capacity = ""
    if ctx.rules.scaling is not None and best.config.key() != active.key():
        best, by_capacity = probe.fewest_replicas(ctx, round_, best)
    gain = best.objective() / base_goodput if base_goodput else float("inf")
    evidence = selection.evidence(best, stock)
    no_saving = probe.replicas_saved(ctx, round_, best, baseline)
    # a finalist chosen for its capacity saves replicas: the gain that matters when they are managed
    min_gain = selection.min_gain(ctx)
    enough = gain >= min_gain or bool(by_capacity)
    if best.config.key() == active.key() or not enough or no_saving:
        return _keep(ctx, round_, best, baseline, gain=gain, min_gain=min_gain, no_saving=no_saving, stock=stock)
    proposer = round_.proposer_of(best.config.key())
    capacity = probe.capacity(ctx, round_, best)
    why = (
        f"{best.config.label()} delivers {best.objective():,.0f} goodput tok/s vs {base_goodput:,.0f} for "
        f"{active.label()} ({gain:.2f}x) on {round_.shape.describe()}; proposed by {proposer}"
    )
    if by_capacity:
        why += f"; chosen for capacity: {by_capacity}"
    entry = _entry(ctx, round_, best.config, best.objective(), why, capacity, stock_goodput)
    status = with_schedule(status, entry)
    if round_.window != ctx.window.name:
        note = f"scheduled {best.config.label()} for window '{round_.window}' ({gain:.2f}x): {why}"
        notify = Notify(Severity.INFO, f"Config scheduled for '{round_.window}'", note, evidence)
        return Intent(Code.SCHEDULED_FOR_WINDOW, observing(status), (notify,), (note,))
    benefit_s = (gain - 1) * remaining_s(ctx.now, ctx.window)
    if benefit_s < ctx.rules.schedule.switch_cost_s:
        note = (
            f"scheduled {best.config.label()} for window '{round_.window}' but not switching now: "
            f"{gain:.2f}x over the {remaining_s(ctx.now, ctx.window) / 3600:.1f} h left in the window is worth "
            f"{benefit_s:.0f} s of traffic, less than a switch costs ({ctx.rules.schedule.switch_cost_s:.0f} s)"
        )
        return Intent(Code.NOT_WORTH_SWITCHING, observing(status), notes=(note,))
    short = short_of_replicas(ctx, capacity[0])
    if short:
        note = f"scheduled {best.config.label()} for window '{round_.window}' but not rolling it out: {short}"
        notify = Notify(Severity.WARNING, "Too few replicas", note, evidence)
        return Intent(Code.TOO_FEW_REPLICAS, observing(status), (notify,), (note,))
    account = ctx.status.schedule_account
    if account is not None and account.falls_back(ctx.now) and best.config != account.fallback_config:
        note = (
            f"scheduled {best.config.label()} for window '{round_.window}' but not rolling it out: "
            f"{account.fallback_reason}"
        )
        return Intent(Code.SCHEDULE_NOT_PAYING, observing(status), notes=(note,))
    if ctx.rules.tuning.dry_run:
        return rolling.dry_run(ctx.with_status(status), best.config, why, window=round_.window, fields=evidence)
    started = rolling.begin(ctx.with_status(status), best.config, why, proposed_by=proposer, gain=gain)
    actions = (Notify(Severity.INFO, "New config chosen", why, evidence), *started.actions)
    return Intent(started.code, started.status, actions, started.notes)


def _pause_trials(ctx: PlanContext, round_: TuningRound, trials: list[TrialResult], status: TargetStatus) -> Intent:
    """Nothing met the SLO: keep the active config and pause trials (code ``trials-paused``)."""
    unmeasured = [t for t in trials if not measured(t)]
    if trials and len(unmeasured) == len(trials):
        cause = f"the canary could not measure anything ({unmeasured[-1].reason})"
    else:
        cause = "no trial met the SLO"
    pause = ctx.rules.schedule.retune_min_interval_s
    why = (
        f"round {round_.id}: {cause}; keeping {ctx.status.active_config.label()} and pausing trials for "
        f"{pause / 60:.0f} min"
    )
    status = status.model_copy(
        update={
            "phase": move(status.phase, Phase.OBSERVING),
            "tuning_paused_until": ctx.now + timedelta(seconds=pause),
            "tuning_paused_reason": why,
        }
    )
    return Intent(Code.TRIALS_PAUSED, status, (Notify(Severity.WARNING, "Trials paused", why),), (why,))


def _keep(
    ctx: PlanContext,
    round_: TuningRound,
    best: TrialResult,
    baseline: TrialResult | None,
    *,
    gain: float,
    min_gain: float,
    no_saving: str,
    stock: TrialResult | None,
) -> Intent:
    """Keep the active config for the window (codes ``keep-active`` and ``no-replicas-saved``)."""
    active = ctx.status.active_config
    why = (
        f"round {round_.id}: keeping {active.label()} (best candidate {best.config.label()} gains "
        f"{gain:.2f}x < {min_gain:.2f}x)"
    )
    if min_gain > ctx.rules.tuning.min_gain:
        why += f" (the measurement noise is {ctx.status.noise.relative if ctx.status.noise else 0:.1%})"
    code = Code.KEEP_ACTIVE
    if no_saving and gain >= min_gain:
        why, code = f"round {round_.id}: keeping {active.label()}: {no_saving}", Code.NO_REPLICAS_SAVED
    capacity = probe.capacity(ctx, round_, baseline) if baseline else (None, None)
    base_goodput = baseline.objective() if baseline else 0.0
    entry = _entry(ctx, round_, active, base_goodput, why, capacity, stock.objective() if stock else 0.0)
    status = ctx.status.model_copy(update={"tuning": None, "tuned_shape": round_.shape})
    return Intent(code, observing(with_schedule(status, entry)), notes=(why,))


def _entry(
    ctx: PlanContext,
    round_: TuningRound,
    config: EngineConfig,
    goodput: float,
    why: str,
    capacity: tuple[float | None, float | None],
    stock_goodput: float,
) -> ScheduledConfig:
    return ScheduledConfig(
        window=round_.window,
        config=config,
        shape=round_.shape,
        goodput_tokens_per_s=goodput,
        stock_goodput_tokens_per_s=stock_goodput,
        reason=why,
        tuned_at=ctx.now,
        capacity_rps=capacity[0],
        capacity_concurrency=capacity[1],
        fleet_rate_rps=probe.fleet_rate(ctx, round_),
        replicas=max(1, ctx.status.replicas),
    )


__all__ = ["select"]


def measured(trial: TrialResult) -> bool:
    """Whether the canary measured the engine: a trial that ``failed`` (the canary could not run it) or is
    ``invalid`` (the load generator did not keep its plan) measured nothing about the config, an ``infeasible``
    or ``rejected`` one did."""
    return trial.status not in (TrialStatus.FAILED, TrialStatus.INVALID)
