"""Tuning rounds: start one (its baseline, the stock reference and a repeat of the baseline that measures the
noise), run the proposals that passed the guardrails within the round's budget, and search again at a lighter
load when nothing met the SLO. Pure."""

from __future__ import annotations

import math
from datetime import datetime

from controller.decide.capacity import scaling
from controller.decide.context import Intent, PlanContext, move, per_replica, round_trials, scaled, with_schedule
from controller.decide.signals import drift as drifts
from controller.decide.signals import noise as noises
from controller.decide.tuning import economics, selection
from controller.domain.actions import Action, RunTrial
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.proposal import Proposal
from controller.domain.status import DriftState, MeasuredNoise, ScheduledConfig, TargetStatus, TuningRound
from controller.domain.traffic import TimeWindow, TrafficShape


def start(ctx: PlanContext, reason: str, window: TimeWindow, *, code: Code, observed: bool = False) -> Intent:
    """A tuning round for ``window`` (``code`` says what triggered it): on its forecast busy-hour shape when there
    is one (and the round is not a reaction to what is observed right now), else on the observed shape; per
    replica in both cases. While trials are paused: code ``tuning-paused``, replicas still follow the load."""
    assert ctx.observation is not None
    paused = ctx.status.tuning_paused_until
    if paused is not None and ctx.now < paused:
        note = f"not tuning ({reason}): {ctx.status.tuning_paused_reason}"
        sized = scaling.scale(ctx)
        return Intent(Code.TUNING_PAUSED, sized.status, sized.actions, (*sized.notes, note))
    fleet_shape = ctx.observation.shape
    source = "observed"
    if not observed and window.name in ctx.forecast:
        fleet_shape, source = ctx.forecast[window.name], "forecast busy-hour"
    shape = per_replica(fleet_shape, design_replicas(ctx, fleet_shape)).model_copy(update={"window": window})
    if not ctx.drifted:  # a re-tune the operator asked for searches whatever was searched before
        reused = reuse(ctx, reason, window, shape, fleet_shape.arrival_rate_rps)
        if reused is not None:
            return reused
    round_ = TuningRound(
        id=f"{window.name}-{ctx.now:%Y%m%d%H%M}",
        window=window.name,
        shape=shape,
        started_at=ctx.now,
        reason=reason,
        fleet_rate_rps=fleet_shape.arrival_rate_rps,
        fleet_concurrency=fleet_shape.concurrency,
    )
    status = ctx.status.model_copy(
        update={
            "phase": move(ctx.status.phase, Phase.TRIALLING),
            "tuning": round_,
            "drift": DriftState(),
            "searches": archived(ctx, window.name),
        }
    )
    active = status.active_config
    first = RunTrial(active, shape, f"tuning ({reason}): baseline, the active config {active.label()}", "baseline")
    actions = opening_trials(ctx, first, round_)
    note = f"started tuning round {round_.id} on the {source} shape: {shape.describe()}"
    return Intent(code, status, actions, (note,), no_repeat(ctx, round_))


#: Earlier searches kept per window (the oldest is dropped first).
SEARCHES_PER_WINDOW = 4


def same_shape(ctx: PlanContext, shape: TrafficShape, fleet_rate: float | None, searched: ScheduledConfig) -> bool:
    """Whether traffic of ``shape`` (per replica, with the whole fleet's ``fleet_rate``) is the shape ``searched``
    was searched on: closer than the drift distance at which the traffic counts as drifted. The load compares the
    fleets' arrival rates where both are known (a search that went on at a lighter per-replica load is still the
    search of that fleet load), else the per-replica concurrency; as for drift, less load than searched for is no
    difference (a window searched for its busy hour also serves its quieter minutes)."""
    params = ctx.rules.drift
    parts = drifts.components(shape, searched.shape, params)
    if fleet_rate is not None and searched.fleet_rate_rps is not None:
        parts["concurrency"] = params.weight_concurrency * (
            math.log2(1 + fleet_rate) - math.log2(1 + searched.fleet_rate_rps)
        )
    parts["concurrency"] = max(0.0, parts["concurrency"])
    return math.sqrt(sum(v * v for v in parts.values())) < params.enter


def archived(ctx: PlanContext, window: str) -> tuple[ScheduledConfig, ...]:
    """``status.searches`` with the window's current entry added (it is about to be replaced by a new search):
    one per shape, the newest first replacing an older one on the same shape, at most
    :data:`SEARCHES_PER_WINDOW` per window."""
    entry = ctx.status.schedule_for(window)
    searches = ctx.status.searches
    if entry is None:
        return searches
    kept = [s for s in searches if not (s.window == window and same_shape(ctx, entry.shape, entry.fleet_rate_rps, s))]
    own = [s for s in kept if s.window == window]
    drop = {id(s) for s in own[: max(0, len(own) + 1 - SEARCHES_PER_WINDOW)]}
    return (*(s for s in kept if id(s) not in drop), entry)


def knows_active(ctx: PlanContext, searched: ScheduledConfig) -> bool:
    """Whether ``searched`` says how the active config does on its shape: it is the search's config, or the active
    config was measured on that shape (as a search measures its baseline). A search that never measured the active
    config cannot tell whether switching from it pays, nor why it breaches."""
    active = ctx.status.active_config.key()
    return searched.config.key() == active or any(
        t.config.key() == active and t.shape == searched.shape and t.ok for t in ctx.status.trials
    )


def reuse(
    ctx: PlanContext, reason: str, window: TimeWindow, shape: TrafficShape, fleet_rate: float | None = None
) -> Intent | None:
    """Instead of a search: the window's earlier search on the same shape (its current entry or one kept in
    ``status.searches``), when its config is not blocked and it measured the active config (:func:`knows_active`).
    The measurements behind it were made on this shape; a new search would repeat them. Code ``search-reused``:
    the entry becomes the window's again, re-dated (so a breach or a drift on it waits the usual interval before
    the next re-tune), replicas follow at once."""
    blocked = ctx.status.blocked_for(window.name)
    current = ctx.status.schedule_for(window.name)
    kept = [s for s in reversed(ctx.status.searches) if s.window == window.name]
    found = next(
        (
            s
            for s in ([current] if current is not None else []) + kept
            if s.config.key() not in blocked and knows_active(ctx, s) and same_shape(ctx, shape, fleet_rate, s)
        ),
        None,
    )
    if found is None:
        return None
    age = f"searched {found.tuned_at:%a %H:%M}" if found.tuned_at else "searched earlier"
    note = (
        f"not searching window '{window.name}' again ({reason}): its traffic is the shape it was {age} on "
        f"({shape.describe()}); keeping that search's {found.config.label()}"
    )
    status = ctx.status
    if current is not None and found is not current:
        status = status.model_copy(update={"searches": archived(ctx, window.name)})
    entry = found.model_copy(update={"tuned_at": ctx.now})
    status = with_schedule(status, entry).model_copy(
        update={"drift": DriftState(), "searches": tuple(s for s in status.searches if s is not found)}
    )
    sized = scaling.scale(ctx.with_status(status))
    return Intent(Code.SEARCH_REUSED, sized.status, sized.actions, (*sized.notes, note))


def opening_trials(ctx: PlanContext, baseline: RunTrial, round_: TuningRound | None = None) -> tuple[Action, ...]:
    """A round's first trials: the baseline, the stock reference (unless the baseline is stock), and the baseline
    again (the two measurements of one config on one shape tell the noise of the measurement), unless no find of
    ``round_``'s search could save a GPU (:func:`search_can_pay`): the noise only judges a find's gain, and the
    search of such a window stops at its first proposal."""
    actions: list[Action] = [baseline]
    if ctx.rules.tuning.measure_stock and baseline.config.key() != STOCK.key():
        actions.append(RunTrial(STOCK, baseline.shape, "tuning: stock vLLM config as the reference", "baseline"))
    if round_ is None or search_can_pay(ctx, round_):
        actions.append(repeat(baseline.config, baseline.shape))
    return tuple(actions)


def search_can_pay(ctx: PlanContext, round_: TuningRound) -> bool:
    """Whether any config the round's search finds could save GPUs: with managed replicas, only when the window
    runs more replicas at its busy hour (:func:`fleet_replicas`, as :func:`worth` counts them) than the fewest it
    may run; one replica of the stock config serving a window's busy hour is one replica of any config. Without
    managed replicas a faster config's gain is counted in GPU time, so a search can always pay."""
    rules = ctx.rules.scaling
    if rules is None:
        return True
    design = 1.0
    if round_.fleet_concurrency and round_.shape.concurrency > 0:
        design = max(1.0, round_.fleet_concurrency / round_.shape.concurrency)
    return fleet_replicas(ctx, round_, design) > max(1, rules.min_replicas)


def no_repeat(ctx: PlanContext, round_: TuningRound) -> tuple[tuple[Code, str], ...]:
    """Why a round opens without the repeat of its baseline (code ``trial-not-worth-it``; none when it has one)."""
    if search_can_pay(ctx, round_):
        return ()
    floor = max(1, ctx.rules.scaling.min_replicas if ctx.rules.scaling is not None else 1)
    why = (
        f"round {round_.id}: not measuring the noise: window '{round_.window}' runs {floor} replica(s) at its busy "
        f"hour, the fewest it may, so no config a search finds saves a GPU there"
    )
    return ((Code.TRIAL_NOT_WORTH_IT, why),)


def repeat(config: EngineConfig, shape: TrafficShape) -> RunTrial:
    """The round's second measurement of its baseline: the two differ only by the noise of the measurement."""
    why = f"tuning: {config.label()} again, to measure the noise of the measurement"
    return RunTrial(config, shape, why, "repeat", repeat=True)


def with_noise(status: TargetStatus, round_: TuningRound, now: datetime) -> TargetStatus:
    """Status with the noise the round's repeats measured (unchanged while the round holds no repeat)."""
    found = noises.measured(round_trials(status))
    if found is None:
        return status
    relative, repeats = found
    noise = MeasuredNoise(relative=relative, repeats=repeats, round_id=round_.id, measured_at=now)
    if status.noise is not None and status.noise.model_copy(update={"measured_at": now}) == noise:
        return status
    return status.model_copy(update={"noise": noise})


def design_replicas(ctx: PlanContext, fleet_shape: TrafficShape) -> int:
    """The replica count a round's per-replica shape assumes.

    Without managed replicas, the replicas there are. With them, the fewest replicas whose sequence slots hold
    the load: a load near what one replica can carry, where configs differ in capacity and not only in speed.
    Tuning at the current count instead would favour configs that are fast at a light per-replica load and
    then need more replicas (a loop that only ever adds GPUs)."""
    rules = ctx.rules.scaling
    if rules is None:
        return max(1, ctx.status.replicas)
    n = math.ceil(fleet_shape.concurrency / max(ctx.rules.design_slots, 1) - 1e-9)
    return min(max(n, rules.min_replicas, 1), max(rules.max_replicas, 1))


def next_trials(ctx: PlanContext, round_: TuningRound) -> Intent | None:
    """The proposals not yet trialled in the round, within its budget and the per-cycle cap, while each is
    expected to pay for its GPU time (code ``trials``); None when there are none, or when the search has stopped
    (:func:`search_stop` says why)."""
    if round_.stop_code is not None:
        return None
    done = len(round_.trial_keys)
    remaining = ctx.rules.tuning.max_trials - done
    batch: list[Proposal] = []
    for p in fresh_proposals(ctx, round_)[: max(0, min(remaining, ctx.rules.tuning.trials_per_cycle))]:
        if not worth(ctx, round_, p).pays:
            break  # the advisor ranks its proposals: one that does not pay stops the batch
        batch.append(p)
    if not batch:
        return None
    actions = tuple(
        RunTrial(
            p.config, round_.shape, f"trial {done + i + 1}/{ctx.rules.tuning.max_trials}: {p.rationale}", p.proposed_by
        )
        for i, p in enumerate(batch)
    )
    return Intent(Code.TRIALS, ctx.status, actions)


def fresh_proposals(ctx: PlanContext, round_: TuningRound) -> list[Proposal]:
    """The screened proposals the round has not trialled yet, once each, in the advisor's order."""
    tried = set(round_.trial_keys)
    fresh: list[Proposal] = []
    for p in ctx.proposals:
        if p.config.key() not in tried and all(p.config.key() != f.config.key() for f in fresh):
            fresh.append(p)
    return fresh


def worth(ctx: PlanContext, round_: TuningRound, proposal: Proposal) -> economics.TrialWorth:
    """Whether trialling ``proposal`` pays: the gain its proposer expects over the round's best measured goodput,
    on the window's GPU-hours over the payback horizon (the round's replicas for the window's hours each day),
    against the GPU time one of the round's trials holds (its measurement plus the engine's start)."""
    trials = round_trials(ctx.status)
    measured = [t for t in trials if t.ok and t.objective() > 0]
    best = max(measured, key=lambda t: t.objective(), default=None)
    rules = ctx.rules.tuning
    tp = proposal.config.tensor_parallel_size
    held = [t.duration_s + (t.startup_s or rules.trial_startup_s) for t in trials if t.duration_s > 0]
    cost_s = sum(held) / len(held) if held else rules.trial_startup_s
    window = next((w for w in ctx.rules.windows if w.name == round_.window), ctx.window)
    replicas = 1.0
    if round_.fleet_concurrency and round_.shape.concurrency > 0:
        replicas = max(1.0, round_.fleet_concurrency / round_.shape.concurrency)
    elif ctx.rules.scaling is None:
        replicas = float(max(1, ctx.status.replicas))
    busy = None
    if ctx.rules.scaling is not None:
        busy = fleet_replicas(ctx, round_, replicas)
        replicas = float(busy)
    window_gpu_hours = window.hours * replicas * tp * rules.payback_horizon_s / 86400
    needed = 0.0
    baseline = selection.find(trials, ctx.status.active_config)
    if best is not None and baseline is not None and baseline.objective() > 0:
        needed = selection.min_gain(ctx) * baseline.objective() / best.objective() - 1
    return economics.trial_worth(
        expected_gain=proposal.expected_gain if best is not None else None,
        window_gpu_hours=window_gpu_hours,
        trial_gpu_hours=cost_s * tp / 3600,
        needed_gain=max(0.0, needed),
        gain_uncertainty=proposal.gain_uncertainty if best is not None else None,
        success_chance=proposal.success_chance,
        replicas=busy,
        min_replicas=ctx.rules.scaling.min_replicas if ctx.rules.scaling is not None else 1,
    )


def fleet_replicas(ctx: PlanContext, round_: TuningRound, design: float) -> int:
    """The replicas the round's window runs at its busy hour, as far as anything says: the round's design count
    (its fleet load over one replica's slots), the window's schedule entry's replicas, and the replicas running
    now when the round is the current window's; the most of them (a search is not stopped on a fleet it
    underestimates)."""
    counts = [math.ceil(design - 1e-9)]
    entry = ctx.status.schedule_for(round_.window)
    if entry is not None and entry.replicas > 0:
        counts.append(entry.replicas)
    if round_.window == ctx.window.name:
        counts.append(ctx.status.replicas)
    return max(1, *counts)


def search_stop(ctx: PlanContext, round_: TuningRound) -> Intent | None:
    """The round's search stops asking for trials, the stop's own code and sentence kept on the round for status
    and explain: code ``search-stopped`` when its best next proposal does not pay for its GPU time (:func:`worth`;
    the round keeps the verdict's code, e.g. ``trial-not-worth-it``), ``search-ended`` when the budget is spent
    (``search-budget-spent``) or nothing is left to propose (``search-no-proposals``). None while the search goes
    on, and once it has stopped."""
    if round_.stop_code is not None:
        return None
    fresh = fresh_proposals(ctx, round_)
    if len(round_.trial_keys) >= ctx.rules.tuning.max_trials:
        code, why = Code.SEARCH_BUDGET_SPENT, f"the round's {ctx.rules.tuning.max_trials} trials are spent"
    elif not fresh:
        code, why = Code.SEARCH_NO_PROPOSALS, "no untried proposal passed the guardrails"
    else:
        verdict = worth(ctx, round_, fresh[0])
        if verdict.pays:
            return None
        code, why = verdict.code, f"{verdict.describe()} ({fresh[0].config.label()})"
    stopped = round_.model_copy(update={"stop_code": code, "stop_reason": why})
    status = ctx.status.model_copy(update={"tuning": stopped})
    if code in (Code.SEARCH_BUDGET_SPENT, Code.SEARCH_NO_PROPOSALS):
        return Intent(Code.SEARCH_ENDED, status)  # the search's ordinary end: kept on the round, no news
    return Intent(Code.SEARCH_STOPPED, status, notes=(f"round {round_.id}: search stopped: {why}",))


def retry_lighter(ctx: PlanContext, round_: TuningRound) -> Intent:
    """No config met the SLO at the round's per-replica load (one replica's slots hold it, its cache or prefill
    do not): the same search at half the load per replica, i.e. twice the replicas (code ``retry-lighter``)."""
    shape = scaled(round_.shape, 0.5)
    why = (
        f"round {round_.id}: no config met the SLO at {round_.shape.concurrency:.0f} requests in flight per "
        f"replica; searching again at {shape.concurrency:.0f}"
    )
    lighter = round_.model_copy(
        update={
            "id": f"{round_.id}-{shape.concurrency:.0f}",
            "shape": shape,
            "reason": f"{round_.reason}; {why}",
            "trial_keys": (),
            "trial_proposers": (),
            "trial_reasons": (),
            "probe_key": None,
            "probe_factors": (),
            "stop_code": None,
            "stop_reason": None,
        }
    )
    status = ctx.status.model_copy(update={"tuning": lighter})
    active = status.active_config
    actions = opening_trials(ctx, RunTrial(active, shape, f"{why}: baseline, the active config", "baseline"), lighter)
    return Intent(Code.RETRY_LIGHTER, status, actions, (why,), no_repeat(ctx, lighter))


__all__ = [
    "SEARCHES_PER_WINDOW",
    "archived",
    "design_replicas",
    "fleet_replicas",
    "fresh_proposals",
    "knows_active",
    "next_trials",
    "no_repeat",
    "opening_trials",
    "repeat",
    "retry_lighter",
    "reuse",
    "same_shape",
    "search_can_pay",
    "search_stop",
    "start",
    "with_noise",
    "worth",
]
