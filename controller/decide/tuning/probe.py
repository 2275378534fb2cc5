"""Capacity probing: how far one replica of a round's choice (and of its finalists and the active config) stretches
within the SLO, by replaying the round's shape at growing multiples of its load, and what that means in
replicas. Pure; the bracket search itself is in :mod:`controller.decide.capacity.sizing`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from controller.decide.capacity.sizing import holds, length_distance, next_probe_factor, probe_bracket, replicas_for
from controller.decide.context import Intent, PlanContext, round_trials, scaled
from controller.decide.tuning import selection
from controller.domain.actions import RunTrial
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.status import TuningRound
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus


def capacity_probe(ctx: PlanContext, round_: TuningRound) -> Intent | None:
    """The next step of the capacity search for the config the round will choose (code ``capacity-probe``): replay
    its shape at growing multiples of the per-replica load until the SLO breaks, then narrow the bracket, while
    another probe could still change the replicas the window's load needs (:func:`replicas_decided`). Its result
    (how far one replica stretches within the SLO) sizes the fleet. None when the search is done."""
    chosen = selection.choice(ctx)
    if chosen is None:
        return None
    switching = chosen.config.key() != ctx.status.active_config.key()
    step = next_probe(ctx, round_, chosen)
    for finalist in capacity_finalists(ctx, chosen) if switching else ():
        if step is not None:
            break
        step = next_probe(ctx, round_, finalist)
    if step is None and switching:
        # the active config's capacity too: a switch must save replicas to be worth its rollout
        baseline = selection.find(round_trials(ctx.status), ctx.status.active_config)
        if baseline is not None and baseline.ok and baseline.objective() > 0:
            step = next_probe(ctx, round_, baseline)
    return step


def capacity_finalists(ctx: PlanContext, leader: TrialResult) -> list[TrialResult]:
    """The runners-up whose capacity is probed beside the leader's: the near-goodput finalists
    (:func:`controller.decide.tuning.selection.finalists`) and the best of the round's configs with more sequence slots
    than the leader (:func:`more_slots`). A round runs at the load the space's largest ``max_num_seqs`` holds, so
    a config with more slots (one that leaves ``max_num_seqs`` at the engine's default, which the space does not
    bound) shows no advantage there, yet carries more streams per replica before the SLO breaks."""
    out = selection.finalists(ctx, leader)
    wider = more_slots(ctx, leader, skip={t.config.key() for t in out})
    return [*out, wider] if wider is not None else out


def slots(config: EngineConfig) -> float:
    """Sequence slots of one replica of ``config``: its ``max_num_seqs``, unbounded when left to the engine."""
    return float(config.max_num_seqs) if config.max_num_seqs is not None else math.inf


def more_slots(ctx: PlanContext, leader: TrialResult, *, skip: set[str]) -> TrialResult | None:
    """With managed replicas, the round's best-goodput trial that met the SLO with more sequence slots than
    ``leader``'s config (neither ``leader``, the active config, blocked nor in ``skip``; lossless when the leader
    is). None when there is none."""
    if ctx.rules.scaling is None or ctx.rules.capacity_finalists <= 0:
        return None
    skipped = {leader.config.key(), ctx.status.active_config.key(), *selection.blocked(ctx), *skip}
    wider = [
        t
        for t in round_trials(ctx.status)
        if t.config.key() not in skipped
        and t.ok
        and t.meets_slo()
        and t.objective() > 0
        and slots(t.config) > slots(leader.config)
        and not (ctx.is_lossy(t.config) and not ctx.is_lossy(leader.config))
    ]
    return max(wider, key=lambda t: t.objective(), default=None)


def next_probe(ctx: PlanContext, round_: TuningRound, chosen: TrialResult) -> Intent | None:
    key = chosen.config.key()
    done = probe_results(ctx, round_, key)
    low, high = bracket(ctx, round_, key)
    if done and replicas_decided(ctx, round_, key, low, high):
        return None
    factor = next_probe_factor(
        low, high, base_concurrency=round_.shape.concurrency, tried=len(done), rules=ctx.rules.capacity_probe
    )
    if factor is None or any(f == factor for f, _t in done):
        return None
    shape = scaled(round_.shape, factor)
    found = (f"met the SLO at {low:g}x" if low else "missed the SLO") + (
        f", not at {high:g}x" if high is not None else ""
    )
    why = f"capacity probe: {chosen.config.label()} at {factor:g}x the per-replica load ({shape.describe()}); {found}"
    factors = round_.probe_factors if factor in round_.probe_factors else (*round_.probe_factors, factor)
    round_ = round_.model_copy(update={"probe_key": round_.probe_key or key, "probe_factors": factors})
    status = ctx.status.model_copy(update={"tuning": round_})
    loop = ctx.rules.capacity_probe_loop
    return Intent(Code.CAPACITY_PROBE, status, (RunTrial(chosen.config, shape, why, "capacity-probe", loop=loop),))


def replicas_decided(ctx: PlanContext, round_: TuningRound, key: str, low: float, high: float | None) -> bool:
    """Whether another probe could change the replicas the window's load needs: with managed replicas (no HPA or
    KEDA object owning them), the fleet
    rate the round was tuned for, and that rate ``ScheduleRules.forecast_uncertainty`` either side, need as many
    replicas at the capacity that held (``low``) as at the most one replica can carry (:func:`capacity_bound`:
    what the load that did not hold, ``high``, offered or the replica served there; none found yet: however
    much more one replica carries), and so do the forecast loads of the other windows the capacity would size
    (:func:`loads_sized_alike`), so the probe's answer is already known in GPUs. A window whose whole busy hour
    one replica of the config carries with headroom is decided by the first probe that held twice its load; one
    whose replica fell behind at the next load is decided when its throughput there needs as many replicas as
    what held."""
    rules, rate = ctx.rules.scaling, fleet_rate(ctx, round_)
    if rules is None or ctx.external_autoscaler or not rate or low <= 0:
        return False  # an HPA's replicas are not ours to count: the capacity is checked against its own
    low_rps = served_rps(ctx, round_, key, low)
    if low_rps is None:
        return False
    high_rps = capacity_bound(ctx, round_, key, high, served=low_rps)
    floor = max(rules.min_replicas, 1)

    def need(at: float, capacity: float) -> int:
        return max(replicas_for(at, capacity, rules) if math.isfinite(capacity) else 0, floor)

    u = ctx.rules.schedule.forecast_uncertainty
    loads = [rate, *loads_sized_alike(ctx, round_.shape)]
    return all(need(r, low_rps) == need(r, high_rps) for load in loads for r in (load * (1 - u), load, load * (1 + u)))


def capacity_bound(ctx: PlanContext, round_: TuningRound, key: str, high: float | None, *, served: float) -> float:
    """The most requests/s one replica of ``key`` can carry within the SLO, as the probes so far bound it: the rate
    the lowest load that did not hold (``high``) offered, or the requests/s the replica completed there when it
    fell behind that rate (a replica pushed past its limit runs at its most; it carries no more within the SLO);
    unbounded before any load failed. The completed rate bounds it only when it is at least what a lighter load
    ``served`` within the SLO: a replica that completed less under more load was thrashing, not at its most."""
    if high is None:
        return math.inf
    offered = round_.shape.arrival_rate_rps * high
    missed = next((t for f, t in probe_results(ctx, round_, key) if f == high), None)
    if missed is None or not missed.ok or missed.request_throughput < served:
        return offered
    return min(offered, missed.request_throughput)


def loads_sized_alike(ctx: PlanContext, shape: TrafficShape) -> list[float]:
    """The forecast busy-hour rates of the windows whose traffic a capacity probed on ``shape`` would size (a
    length mix within ``capacity_transfer_distance``): a capacity is read for every window of a nearby mix, so a
    probe stopped for a quiet window's load must also decide the busiest of them."""
    far = ctx.rules.capacity_transfer_distance
    return [f.arrival_rate_rps for f in ctx.forecast.values() if length_distance(f, shape) <= far]


def probe_results(ctx: PlanContext, round_: TuningRound, key: str) -> list[tuple[float, TrialResult]]:
    out = []
    for factor in round_.probe_factors:
        shape = scaled(round_.shape, factor)
        found = next((t for t in reversed(ctx.status.trials) if t.config.key() == key and t.shape == shape), None)
        if found is not None:
            out.append((factor, found))
    return out


def bracket(ctx: PlanContext, round_: TuningRound, key: str) -> tuple[float, float | None]:
    """(highest load multiple that held, lowest that did not) for ``key``: its round trial counts as 1x."""
    base = next((t for t in reversed(round_trials(ctx.status)) if t.config.key() == key), None)
    at_1 = [(1.0, base)] if base is not None else []
    closed = ctx.rules.capacity_probe_loop == "closed"
    return probe_bracket(held_loads((*at_1, *probe_results(ctx, round_, key)), closed=closed))


def held_loads(probed: Sequence[tuple[float, TrialResult]], *, closed: bool) -> list[tuple[float, bool]]:
    """``(load multiple, held)`` for each probed load. An ``invalid`` probe (the load generator did not keep its
    plan) says nothing about the engine: it is neither a load that held nor one that did not."""
    return [(f, holds(t, keeps_up=closed or f == 1.0)) for f, t in probed if t.status is not TrialStatus.INVALID]


def fleet_rate(ctx: PlanContext, round_: TuningRound) -> float | None:
    """The fleet-level rate the round was tuned for (what is observed now, for rounds that did not record it)."""
    if round_.fleet_rate_rps is not None:
        return round_.fleet_rate_rps
    return ctx.observation.shape.arrival_rate_rps if ctx.observation is not None else None


def capacity(ctx: PlanContext, round_: TuningRound, chosen: TrialResult) -> tuple[float | None, float | None]:
    """(requests/s, concurrent requests) one replica of the chosen config carries within the SLO: the most
    requests/s any probed load up to the highest that met it served within the SLO (:func:`served_rps`), at that
    highest load's streams. Without a probe nothing is known about the capacity (a trial that met the SLO at a
    light load only bounds it from below)."""
    key = chosen.config.key()
    if not probe_results(ctx, round_, key):
        return None, None
    low, _high = bracket(ctx, round_, key)
    if low == 0.0:
        return None, None
    return served_rps(ctx, round_, key, low, fallback=chosen), round_.shape.concurrency * low


def served_rps(
    ctx: PlanContext, round_: TuningRound, key: str, low: float, *, fallback: TrialResult | None = None
) -> float | None:
    """The most requests/s one replica of ``key`` served within the SLO at the loads probed up to ``low`` (the
    highest that held; the round's own trial counts as 1x): each held load's goodput, never above the rate it
    offered. Past its saturation an open-loop replica falls behind the offered rate and serves a little less
    than at a lighter load that still held, so the highest held load alone reads the capacity low by the
    bracket's precision; production at that lighter load's rate is within the SLO too. None when nothing held."""
    if low <= 0:
        return None
    base = next((t for t in reversed(round_trials(ctx.status)) if t.config.key() == key), fallback)
    closed = ctx.rules.capacity_probe_loop == "closed"
    probed = [*([(1.0, base)] if base is not None else []), *probe_results(ctx, round_, key)]
    trials = dict(probed)
    served = [
        min(trials[f].goodput_rps, trials[f].shape.arrival_rate_rps)
        for f, ok in held_loads(probed, closed=closed)
        if ok and f <= low
    ]
    best = max(served, default=0.0)
    return best if best > 0 else None


def replicas_needed(ctx: PlanContext, round_: TuningRound, trial: TrialResult) -> int | None:
    """Replicas ``trial``'s config needs for the round's fleet load at its probed capacity (None: unknown)."""
    rules, rate = ctx.rules.scaling, fleet_rate(ctx, round_)
    per_replica = capacity(ctx, round_, trial)[0]
    if rules is None or rate is None or not per_replica:
        return None
    return min(max(replicas_for(rate, per_replica, rules), rules.min_replicas, 1), max(rules.max_replicas, 1))


def fewest_replicas(ctx: PlanContext, round_: TuningRound, leader: TrialResult) -> tuple[TrialResult, str]:
    """The finalist that needs fewer replicas than the leader for the window's load, and why (the leader and
    an empty reason when none does, or when capacities are unknown)."""
    lead_need = replicas_needed(ctx, round_, leader)
    if lead_need is None:
        return leader, ""
    better: list[tuple[int, TrialResult]] = []
    for finalist in capacity_finalists(ctx, leader):  # best goodput first: the first of equal need wins
        need = replicas_needed(ctx, round_, finalist)
        if need is not None and need < lead_need:
            better.append((need, finalist))
    if not better:
        return leader, ""
    need, winner = min(better, key=lambda r: r[0])
    why = (
        f"{winner.config.label()} needs {need} replica(s) for the window's load and {leader.config.label()}, "
        f"the best goodput at the design load, {lead_need}"
    )
    return winner, why


def replicas_saved(ctx: PlanContext, round_: TuningRound, chosen: TrialResult, baseline: TrialResult | None) -> str:
    """With managed replicas, why switching to ``chosen`` would not save replicas at the round's fleet load
    (empty when it would, or when the capacities to tell are unknown). A faster config on replicas that are
    needed anyway only trades latency, and pays for its rollout with nothing."""
    if baseline is None or not baseline.meets_slo():
        return ""
    need_best, need_base = replicas_needed(ctx, round_, chosen), replicas_needed(ctx, round_, baseline)
    if need_best is None or need_base is None or need_best < need_base:
        return ""
    return (
        f"one replica of {chosen.config.label()} serves {capacity(ctx, round_, chosen)[0]:.2f} req/s within the "
        f"SLO and of {baseline.config.label()} {capacity(ctx, round_, baseline)[0]:.2f} req/s; {need_best} vs "
        f"{need_base} replica(s) for {fleet_rate(ctx, round_):.2f} req/s with headroom, so a switch would save "
        f"no GPUs"
    )


__all__ = [
    "bracket",
    "capacity",
    "capacity_bound",
    "capacity_finalists",
    "capacity_probe",
    "fewest_replicas",
    "fleet_rate",
    "loads_sized_alike",
    "more_slots",
    "next_probe",
    "probe_results",
    "replicas_decided",
    "replicas_needed",
    "replicas_saved",
    "served_rps",
    "slots",
]
