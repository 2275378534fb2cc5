"""Tuning rounds: start one (its baseline, the stock reference and a repeat of the baseline that measures the
noise), run the proposals that passed the guardrails within the round's budget, and search again at a lighter
load when nothing met the SLO. Pure."""

from __future__ import annotations

import math
from datetime import datetime

from controller.decide import noise as noises
from controller.decide import scaling
from controller.decide.context import Intent, PlanContext, move, per_replica, round_trials, scaled
from controller.domain.actions import Action, RunTrial
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.proposal import Proposal
from controller.domain.status import DriftState, MeasuredNoise, TargetStatus, TuningRound
from controller.domain.traffic import TimeWindow, TrafficShape


def start(ctx: PlanContext, reason: str, window: TimeWindow, *, code: str, observed: bool = False) -> Intent:
    """A tuning round for ``window`` (``code`` says what triggered it): on its forecast busy-hour shape when there
    is one (and the round is not a reaction to what is observed right now), else on the observed shape; per
    replica in both cases. While trials are paused: code ``tuning-paused``, replicas still follow the load."""
    assert ctx.observation is not None
    paused = ctx.status.tuning_paused_until
    if paused is not None and ctx.now < paused:
        note = f"not tuning ({reason}): {ctx.status.tuning_paused_reason}"
        sized = scaling.scale(ctx)
        return Intent("tuning-paused", sized.status, sized.actions, (*sized.notes, note))
    fleet_shape = ctx.observation.shape
    source = "observed"
    if not observed and window.name in ctx.forecast:
        fleet_shape, source = ctx.forecast[window.name], "forecast busy-hour"
    shape = per_replica(fleet_shape, design_replicas(ctx, fleet_shape)).model_copy(update={"window": window})
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
        update={"phase": move(ctx.status.phase, Phase.TRIALLING), "tuning": round_, "drift": DriftState()}
    )
    active = status.active_config
    first = RunTrial(active, shape, f"tuning ({reason}): baseline, the active config {active.label()}", "baseline")
    actions = opening_trials(ctx, first)
    return Intent(
        code, status, actions, (f"started tuning round {round_.id} on the {source} shape: {shape.describe()}",)
    )


def opening_trials(ctx: PlanContext, baseline: RunTrial) -> tuple[Action, ...]:
    """A round's first trials: the baseline, the stock reference (unless the baseline is stock), and the baseline
    again (the two measurements of one config on one shape tell the noise of the measurement)."""
    actions: list[Action] = [baseline]
    if ctx.rules.tuning.measure_stock and baseline.config.key() != STOCK.key():
        actions.append(RunTrial(STOCK, baseline.shape, "tuning: stock vLLM config as the reference", "baseline"))
    actions.append(repeat(baseline.config, baseline.shape))
    return tuple(actions)


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
    """The proposals not yet trialled in the round, within its budget and the per-cycle cap (code ``trials``);
    None when there are none."""
    done = len(round_.trial_keys)
    remaining = ctx.rules.tuning.max_trials - done
    tried = set(round_.trial_keys)
    fresh: list[Proposal] = []
    for p in ctx.proposals:
        if p.config.key() not in tried and all(p.config.key() != f.config.key() for f in fresh):
            fresh.append(p)
    batch = fresh[: max(0, min(remaining, ctx.rules.tuning.trials_per_cycle))]
    if not batch:
        return None
    actions = tuple(
        RunTrial(
            p.config, round_.shape, f"trial {done + i + 1}/{ctx.rules.tuning.max_trials}: {p.rationale}", p.proposed_by
        )
        for i, p in enumerate(batch)
    )
    return Intent("trials", ctx.status, actions)


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
        }
    )
    status = ctx.status.model_copy(update={"tuning": lighter})
    active = status.active_config
    actions = opening_trials(ctx, RunTrial(active, shape, f"{why}: baseline, the active config", "baseline"))
    return Intent("retry-lighter", status, actions, (why,))


__all__ = ["design_replicas", "next_trials", "opening_trials", "repeat", "retry_lighter", "start", "with_noise"]
