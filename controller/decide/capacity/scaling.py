"""Replicas of the stable variant: sized from the capacity probed for the active config, corrected by production's
own SLO breaches, and checked against an HPA/KEDA object that owns them. Pure; the replica maths is in
:mod:`controller.decide.capacity.sizing`."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

from controller.decide.capacity.sizing import ScalingDecision, desired_replicas, leading_rate, length_distance
from controller.decide.context import Intent, PlanContext, prewarm_lead_s, remaining_s, window_at, with_schedule
from controller.decide.signals.breach import slo_breach
from controller.decide.signals.latency import judged_latency
from controller.domain.actions import Scale
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.observation import VariantStats
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig
from controller.domain.traffic import TrafficShape


def scale(ctx: PlanContext) -> Intent:
    """Replicas of the stable variant for the request rate observed now, at the capacity probed for the active
    config on the most similar length mix (see :func:`capacity_entry`); with none known, an SLO breach adds
    replicas. While the load rises towards the one forecast for the window's end (:func:`window_end_rate`), the
    rate is the one expected ``lead_s`` ahead (:func:`~controller.decide.capacity.sizing.leading_rate`), so a replica
    added now is warm when the load reaches it. Never fewer than the requests in flight need
    (:func:`in_flight_need`). While a rollout runs, fewer only at the lower of the two configs' capacities
    (:func:`during_rollout`). Code ``scale`` with a :class:`Scale` action, else ``replicas-kept`` (the note says
    why)."""
    rules = ctx.rules.scaling
    status = ctx.status
    if rules is None or ctx.observation is None:
        return Intent(Code.REPLICAS_UNMANAGED, status)
    observation = ctx.observation
    entry = status.schedule_for(ctx.window.name)
    capacity, basis = active_capacity(ctx)
    left_s = remaining_s(ctx.now, ctx.window)
    end_rate = window_end_rate(ctx, left_s)
    rate = leading_rate(observation.shape.arrival_rate_rps, end_rate, lead_s=rules.lead_s, remaining_s=left_s)
    decision = desired_replicas(
        forecast_rps=rate,
        capacity_rps_per_replica=capacity or 0.0,
        current=status.replicas,
        rules=rules,
        now=ctx.now,
        below_since=status.scale_below_since,
        external_autoscaler=ctx.external_autoscaler,
    )
    if rate > observation.shape.arrival_rate_rps:
        decision = replace(
            decision,
            reason=f"{decision.reason} (the load expected in {rules.lead_s / 60:.0f} min: "
            f"{observation.shape.arrival_rate_rps:.2f} req/s observed, rising to {end_rate or rate:.2f} req/s "
            f"forecast at the window's end)",
        )
    if basis:
        decision = replace(decision, reason=f"{decision.reason} (capacity probed on {basis})")
    streams = in_flight_need(ctx)
    if streams is not None and streams.replicas > decision.replicas:
        decision = streams
    last = status.reactive_scale_at
    settled = last is None or (ctx.now - last).total_seconds() >= ctx.rules.reactive_scale_interval_s
    if capacity is None and not ctx.external_autoscaler and settled:
        breach = slo_breach(observation, ctx.rules.slo, ctx.rules.rollout.min_samples)
        if breach and status.replicas < rules.max_replicas:
            more = min(rules.max_replicas, status.replicas + max(1, math.ceil(status.replicas / 2)))
            decision = ScalingDecision(
                more, f"scale up {status.replicas} -> {more}: no probed capacity for this traffic and {breach}", None
            )
            status = status.model_copy(update={"reactive_scale_at": ctx.now})
    lead = prewarm_lead_s(ctx)
    upcoming_window = window_at(ctx.rules.windows, ctx.now + timedelta(seconds=lead))
    upcoming = status.schedule_for(upcoming_window.name)
    if (
        upcoming_window.name != ctx.window.name
        and upcoming is not None
        and upcoming.config.key() != status.active_config.key()
        and upcoming.capacity_rps
        and length_distance(upcoming.shape, observation.shape) <= ctx.rules.capacity_transfer_distance
    ):
        # today's load at the capacity of the config the next window switches to, so a smaller config does not
        # arrive short of replicas
        ahead = desired_replicas(
            forecast_rps=observation.shape.arrival_rate_rps,
            capacity_rps_per_replica=upcoming.capacity_rps,
            current=status.replicas,
            rules=rules,
            now=ctx.now,
            below_since=status.scale_below_since,
            external_autoscaler=ctx.external_autoscaler,
        )
        if ahead.replicas > decision.replicas:
            decision = replace(ahead, reason=f"ahead of window '{upcoming_window.name}': {ahead.reason}")
    if status.rollout is not None and decision.replicas < status.replicas:
        decision = during_rollout(ctx, decision, capacity, rate)
    status = status.model_copy(update={"scale_below_since": decision.below_since})
    if decision.changes(status.replicas):
        if entry is not None:
            status = with_schedule(status, entry.model_copy(update={"replicas": decision.replicas}))
        return Intent(Code.SCALE, status, (Scale("stable", decision.replicas, decision.reason, code=Code.SCALE),))
    return Intent(Code.REPLICAS_KEPT, status, notes=(decision.reason,))


def in_flight_need(ctx: PlanContext) -> ScalingDecision | None:
    """The replicas the requests in flight now need, at the streams one replica of the active config held within
    the SLO where its capacity was probed (``capacity_concurrency``, scaled like the rate by the tokens a request
    carries). In a steady mix this asks for no more than the rate does (the streams are the rate times the
    latency); it binds when the arrivals change faster than the work in flight: at the end of a batch job, the
    morning's first chat arrives at a light rate while the night's long generations still occupy the replicas,
    and a fleet sized on the arrivals alone sheds the replicas those streams run on. None without a probed
    concurrency for the traffic."""
    rules, observation = ctx.rules.scaling, ctx.observation
    if rules is None or observation is None or observation.shape.concurrency <= 0:
        return None
    entry = capacity_entry(ctx)
    if entry is None or not entry.capacity_concurrency or not entry.capacity_rps:
        return None
    streams = (
        entry.capacity_concurrency
        * transferred(entry.capacity_rps, entry.shape, observation.shape)
        / (entry.capacity_rps)
    )
    decision = desired_replicas(
        forecast_rps=observation.shape.concurrency,
        capacity_rps_per_replica=streams,
        current=ctx.status.replicas,
        rules=rules,
        now=ctx.now,
        below_since=ctx.status.scale_below_since,
        external_autoscaler=ctx.external_autoscaler,
        unit="requests in flight",
    )
    return replace(decision, reason=f"{decision.reason} (the requests in flight)")


def during_rollout(ctx: PlanContext, decision: ScalingDecision, capacity: float | None, rate: float) -> ScalingDecision:
    """A scale-down while a rollout runs. The fleet is sized for the window it serves now, not the one behind it:
    when both configs have a capacity probed on this traffic, the replicas follow the whole load at the lower of
    the two (either config can carry all of it: the candidate once promoted, the stable one after a rollback),
    and the candidate's replicas follow the stable count at each step. With either capacity unknown the count is
    kept until the rollout is through."""
    status = ctx.status
    assert status.rollout is not None and ctx.rules.scaling is not None and ctx.observation is not None
    candidate = capacity_entry(ctx, status.rollout.to_config)
    if capacity is None or candidate is None or candidate.capacity_rps is None:
        return ScalingDecision(
            status.replicas,
            f"keep {status.replicas} while rollout {status.rollout.id} runs (scale-down waits for it: "
            f"no capacity probed for both configs on this traffic)",
            status.scale_below_since,
        )
    lower = min(capacity, transferred(candidate.capacity_rps, candidate.shape, ctx.observation.shape))
    sized = desired_replicas(
        forecast_rps=rate,
        capacity_rps_per_replica=lower,
        current=status.replicas,
        rules=ctx.rules.scaling,
        now=ctx.now,
        below_since=status.scale_below_since,
        external_autoscaler=ctx.external_autoscaler,
    )
    return replace(
        sized,
        reason=f"{sized.reason} (rollout {status.rollout.id} runs: sized at the lower of the two configs' capacities)",
    )


def window_end_rate(ctx: PlanContext, left_s: float) -> float | None:
    """The request rate forecast for the end of the window ``now`` is in, ``left_s`` from now: the lower of this
    window's and the next window's busy-hour rates (a load that keeps rising into the next window is at least this
    window's busy hour there; one that falls after a busy hour inside this window has come down to the next
    window's). None without a forecast for this window, or when a forecast is of another length mix than the
    traffic observed now (the capacity sizing it is the observed mix's: a rate of 512-token requests over the
    capacity for 24k-token documents says nothing)."""
    busy = ctx.forecast.get(ctx.window.name)
    if busy is None or ctx.observation is None:
        return None
    following = window_at(ctx.rules.windows, ctx.now + timedelta(seconds=left_s))
    after = ctx.forecast.get(following.name) if following.name != ctx.window.name else None
    observed = ctx.observation.shape
    far = ctx.rules.capacity_transfer_distance
    if any(length_distance(f, observed) > far for f in (busy, after) if f is not None):
        return None
    return busy.arrival_rate_rps if after is None else min(busy.arrival_rate_rps, after.arrival_rate_rps)


def scales_up(intent: Intent, replicas: int) -> bool:
    """Whether ``intent`` adds replicas to the stable variant's ``replicas``."""
    return any(isinstance(a, Scale) and a.replicas > replicas for a in intent.actions)


def capacity_entry(ctx: PlanContext, config: EngineConfig | None = None) -> ScheduledConfig | None:
    """The schedule entry whose probed capacity applies to the active config on the traffic observed now: the
    active config's entries with a capacity, nearest in length mix (this window's first on a tie), and only
    when that mix is close; a capacity probed on another length mix says little about this one."""
    assert ctx.observation is not None
    key = (config or ctx.status.active_config).key()
    probed = [s for s in ctx.status.schedule if s.config.key() == key and s.capacity_rps]
    if not probed:
        return None
    observed = ctx.observation.shape
    nearest = min(probed, key=lambda s: (length_distance(s.shape, observed), s.window != ctx.window.name))
    if length_distance(nearest.shape, observed) > ctx.rules.capacity_transfer_distance:
        return None
    return nearest


def active_capacity(ctx: PlanContext) -> tuple[float | None, str]:
    """Requests/s one replica of the active config serves within the SLO, and where it was probed. During a
    rollout, the lower of the stable and the candidate config's (the candidate may end up carrying it all)."""
    entry = capacity_entry(ctx)
    rollout = ctx.status.rollout
    if rollout is not None and rollout.weight > 0:
        candidate = capacity_entry(ctx, rollout.to_config)
        if (
            candidate is not None
            and candidate.capacity_rps
            and (entry is None or entry.capacity_rps is None or candidate.capacity_rps < entry.capacity_rps)
        ):
            entry = candidate
    if entry is None or entry.capacity_rps is None:
        return None, ""
    assert ctx.observation is not None
    capacity = transferred(entry.capacity_rps, entry.shape, ctx.observation.shape)
    basis = "" if entry.window == ctx.window.name else f"window '{entry.window}'"
    if capacity < entry.capacity_rps:
        work = f"{entry.capacity_rps:.2f} req/s for {tokens_per_request(entry.shape):.0f}-token requests"
        basis = f"{basis}, {work}" if basis else work
    return capacity, basis


def tokens_per_request(shape: TrafficShape) -> float:
    return shape.prompt_tokens.mean + shape.output_tokens.mean


def transferred(capacity_rps: float, probed: TrafficShape, observed: TrafficShape) -> float:
    """A capacity probed on one length mix, applied to a nearby one: scaled down by how many more tokens a request
    of the observed mix carries (prompt and output together; a prompt token costs less than an output token, so
    this errs towards more replicas), never up. A capacity probed on 1,200-token requests carries about a fifth
    fewer requests of 1,470 tokens."""
    factor = tokens_per_request(probed) / tokens_per_request(observed)
    return capacity_rps if factor >= TRANSFER_TOLERANCE else capacity_rps * factor


#: A mix within this share of the probed tokens per request is the probed mix (a mean that moved by a token).
TRANSFER_TOLERANCE = 0.99


def correct_capacity(ctx: PlanContext, breach: str) -> Intent | None:
    """Production evidence beats the canary's: when the stable variant breaches the SLO at a per-replica rate
    below the capacity its probe measured, that capacity was too optimistic. Lower it to what production
    just failed to carry (x ``breach_capacity_factor``) and size the replicas again, before any re-tune.

    None when no correction applies. Code ``capacity-corrected`` when the lowered capacity adds replicas, else
    ``capacity-lowered``: the caller continues from that intent's status (the lowered capacity) without its
    actions."""
    assert ctx.observation is not None
    if ctx.rules.scaling is None or ctx.external_autoscaler:
        return None
    changed = ctx.status.replicas_changed_at
    if changed is not None and ctx.observation.start < changed + timedelta(seconds=ctx.rules.replica_settle_s):
        return None  # the replicas were still settling: the breach says nothing about one replica's capacity
    entry = capacity_entry(ctx)
    if entry is None or entry.capacity_rps is None:
        return None
    per_replica_rate = ctx.observation.shape.arrival_rate_rps / max(1, ctx.status.replicas)
    if per_replica_rate >= entry.capacity_rps or per_replica_rate <= 0:
        return None
    lowered = per_replica_rate * ctx.rules.breach_capacity_factor
    note = (
        f"{breach}: one replica failed to carry {per_replica_rate:.2f} req/s, below the "
        f"{entry.capacity_rps:.2f} req/s the canary measured; sizing with {lowered:.2f} req/s from now on"
    )
    status = with_schedule(ctx.status, entry.model_copy(update={"capacity_rps": lowered}))
    sized = scale(ctx.with_status(status))
    if not scales_up(sized, sized.status.replicas):
        return Intent(Code.CAPACITY_LOWERED, sized.status)
    return Intent(Code.CAPACITY_CORRECTED, sized.status, sized.actions, (note, *sized.notes))


def production_capacity(ctx: PlanContext) -> Intent | None:
    """Production evidence beats the canary's the other way too: when the stable variant served more requests/s per
    replica within the SLO than the capacity its probe measured on this traffic, the probe was too pessimistic
    (a probe stops at the last load of its bracket that held, and replays one replica's share of a shape).
    Raise the capacity to what production carried, so the replicas are sized on it (code ``capacity-raised``;
    the caller continues from its status). Evidence: at least ``rollout.min_samples`` requests in the observe
    window, TTFT and TPOT each within its bound at the SLO's percentile, errors within the SLO's rate, the replicas
    settled, no candidate beside them, and a request mix no lighter than the probed one (a rate held on heavier
    requests holds on the probed mix too). None when nothing is raised."""
    observation, status = ctx.observation, ctx.status
    if observation is None or ctx.rules.scaling is None or ctx.external_autoscaler or status.rollout is not None:
        return None
    changed = status.replicas_changed_at
    if changed is not None and observation.start < changed + timedelta(seconds=ctx.rules.replica_settle_s):
        return None
    stable = observation.variants.get("stable")
    if stable is None or "candidate" in observation.variants or stable.requests < ctx.rules.rollout.min_samples:
        return None
    if not within_slo(stable, ctx.rules.slo):
        return None
    entry = capacity_entry(ctx)
    if entry is None or entry.capacity_rps is None:
        return None
    if tokens_per_request(observation.shape) < tokens_per_request(entry.shape) * TRANSFER_TOLERANCE:
        return None
    per_replica_rate = observation.shape.arrival_rate_rps / max(1, status.replicas)
    if per_replica_rate <= entry.capacity_rps:
        return None
    note = (
        f"production served {per_replica_rate:.2f} req/s per replica within the SLO over {stable.requests} "
        f"requests, above the {entry.capacity_rps:.2f} req/s the canary's probe measured; sizing with "
        f"{per_replica_rate:.2f} req/s from now on"
    )
    raised = with_schedule(status, entry.model_copy(update={"capacity_rps": per_replica_rate}))
    return Intent(Code.CAPACITY_RAISED, raised, notes=(note,))


def within_slo(stats: VariantStats, slo: SLO) -> bool:
    """Whether a variant's latencies, each at its SLO's percentile, and its error rate are within the SLO (a
    latency that cannot be judged is not within it)."""
    for metric, bound, percentile in (
        ("ttft", slo.ttft_seconds, slo.ttft_percentile),
        ("tpot", slo.tpot_seconds, slo.tpot_percentile),
    ):
        value, _ = judged_latency(stats, metric, percentile)  # type: ignore[arg-type]
        if value is None or value > bound:
            return False
    return stats.problem("errors") is None and stats.error_rate <= slo.max_error_rate


def short_of_replicas(ctx: PlanContext, capacity_rps: float | None) -> str:
    """With an HPA or KEDA object owning the replicas: why the replicas it holds cannot carry the load observed
    now at ``capacity_rps`` per replica (empty when they can, or when either is unknown). A config rolled out
    onto them fails its SLO analysis whatever its flags and ends up blocked; the fix is the autoscaler's."""
    if not ctx.external_autoscaler or not capacity_rps or ctx.observation is None:
        return ""
    rate = ctx.observation.shape.arrival_rate_rps
    replicas = max(1, ctx.status.replicas)
    if rate <= capacity_rps * replicas:
        return ""
    need = math.ceil(rate / capacity_rps - 1e-9)
    return (
        f"{ctx.external_autoscaler} holds {replicas} replica(s) for {rate:.2f} req/s and one replica carries "
        f"{capacity_rps:.2f} req/s within the SLO: the load needs at least {need}; raise its target or "
        f"maxReplicas"
    )


__all__ = [
    "active_capacity",
    "capacity_entry",
    "correct_capacity",
    "during_rollout",
    "in_flight_need",
    "production_capacity",
    "scale",
    "scales_up",
    "short_of_replicas",
    "tokens_per_request",
    "transferred",
    "window_end_rate",
    "within_slo",
]
