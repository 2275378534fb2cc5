"""What a scheduled switch is worth, from what was measured: whether a config measured on one traffic says what it
does on another (:func:`same_traffic`), the scheduled config's goodput over the active one's on the window's traffic
(:func:`switch_gain`), a config's probed capacity, and the GPUs a switch saves over its window against what its
rollout costs (:func:`switch_economics`). Pure."""

from __future__ import annotations

import math

from controller.decide.capacity.sizing import holds, length_distance
from controller.decide.context import PlanContext
from controller.decide.rollout.sizing import Swap
from controller.decide.signals.noise import ASSUMED, clamped
from controller.decide.tuning.economics import SwitchWorth, switch_worth
from controller.domain.config import STOCK, EngineConfig
from controller.domain.status import ScheduledConfig
from controller.domain.traffic import TimeWindow, TrafficShape

#: Repetitiveness further apart than this is other traffic to a measured config (lookup drafters live on it).
OTHER_REPETITIVENESS = 0.25


def same_traffic(ctx: PlanContext, a: TrafficShape, b: TrafficShape) -> bool:
    """Whether a config measured on one of the two shapes says what it does on the other: length mixes within
    ``capacity_transfer_distance`` and repetitiveness within :data:`OTHER_REPETITIVENESS`."""
    return (
        length_distance(a, b) <= ctx.rules.capacity_transfer_distance
        and abs(a.repetitiveness - b.repetitiveness) <= OTHER_REPETITIVENESS
    )


def switch_gain(ctx: PlanContext, entry: ScheduledConfig) -> float | None:
    """The scheduled config's goodput over the active config's on the window's traffic, or None when nothing says
    what the active config does on that kind of traffic.

    Against the active config's own trial on the window's shape; else, when the active config was measured beside
    stock on another load of the same traffic (a length mix within ``capacity_transfer_distance`` and
    repetitiveness within 0.25), the two configs' gains over stock compared (a gain over stock carries across loads
    of one mix far better than a goodput does); else, when the active config is stock or was measured on the same
    kind of traffic at all, against stock's reference (it is taken to do as stock does). None when the active
    config was never measured on traffic like this window's: it came from another window's (the night's documents
    config running into the morning's chat), and no gain is assumed."""
    status = ctx.status
    active = status.active_config
    ok = [t for t in status.trials if t.ok and t.objective() > 0]
    base = next((t for t in reversed(ok) if t.config.key() == active.key() and t.shape == entry.shape), None)
    if base is not None:
        return entry.goodput_tokens_per_s / base.objective()
    stock_goodput = entry.stock_goodput_tokens_per_s
    against_stock = entry.goodput_tokens_per_s / stock_goodput if stock_goodput else float("inf")
    if active.key() == STOCK.key():
        return against_stock
    alike = [t for t in ok if t.config.key() == active.key() and same_traffic(ctx, t.shape, entry.shape)]
    if not alike:
        return None
    pairs = []
    for t in alike:
        reference = next((r for r in reversed(ok) if r.config.key() == STOCK.key() and r.shape == t.shape), None)
        if reference is not None:
            pairs.append((length_distance(t.shape, entry.shape), t.objective() / reference.objective()))
    if not pairs or not stock_goodput:
        return against_stock
    return against_stock / min(pairs, key=lambda p: p[0])[1]


def probed_capacity(ctx: PlanContext, config: EngineConfig, shape: TrafficShape) -> float | None:
    """Requests/s one replica of ``config`` carried within the SLO on ``shape``'s mix: the highest of its trials on
    that mix (a round's trials and capacity probes replay one shape at several loads) that held. None when none
    did."""
    key, closed = config.key(), ctx.rules.capacity_probe_loop == "closed"
    held = [
        min(t.goodput_rps, t.shape.arrival_rate_rps)
        for t in ctx.status.trials
        if t.config.key() == key
        and t.shape.repetitiveness == shape.repetitiveness
        and length_distance(t.shape, shape) < 1e-9
        and holds(t, keeps_up=closed)
    ]
    return max(held, default=None)


def switch_economics(
    ctx: PlanContext, window: TimeWindow, entry: ScheduledConfig, seconds: float, *, swap: Swap | None = None
) -> SwitchWorth | None:
    """With managed replicas: what switching to ``entry``'s config saves over ``seconds`` of ``window`` at its
    forecast load against what its rollout costs (:func:`~controller.decide.tuning.economics.switch_worth`), with the
    forecast's and the measurements' uncertainty held against the saving. None when a capacity to tell is unknown
    (the goodput gain decides alone)."""
    rules = ctx.rules.scaling
    if rules is None or ctx.external_autoscaler or not entry.capacity_rps:
        return None
    active = ctx.status.active_config
    active_capacity = probed_capacity(ctx, active, entry.shape)
    forecast = ctx.forecast.get(window.name)
    rate = forecast.arrival_rate_rps if forecast is not None else entry.fleet_rate_rps
    if not active_capacity or not rate:
        return None
    noise = clamped(ctx.status.noise.relative if ctx.status.noise is not None else ASSUMED)
    rollout = ctx.rules.rollout
    return switch_worth(
        rate_rps=rate,
        active_capacity_rps=active_capacity,
        new_capacity_rps=entry.capacity_rps,
        active_tp=active.tensor_parallel_size,
        new_tp=entry.config.tensor_parallel_size,
        window_s=seconds,
        current_replicas=ctx.status.replicas,
        steps=swap.steps if swap is not None else rollout.steps,
        bake_s=swap.bake_s if swap is not None else rollout.bake_s,
        surge=swap is not None,
        rules=rules,
        forecast_uncertainty=ctx.rules.schedule.forecast_uncertainty,
        capacity_uncertainty=1 - math.exp(-math.sqrt(2) * noise),
    )


__all__ = ["OTHER_REPETITIVENESS", "probed_capacity", "same_traffic", "switch_economics", "switch_gain"]
