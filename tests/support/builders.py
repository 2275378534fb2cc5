"""Builders the tests share: one value each, written once, with keyword arguments for what a test cares about and
defaults for the rest."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from controller.decide.context import PlanContext
from controller.decide.rules import Rules
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation, VariantStats
from controller.domain.rollout import RolloutState
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.ports import TrialRequest

#: p50, p95 and p99 in seconds
Spread = tuple[float, float, float]


def shape(
    rate: float,
    concurrency: float,
    prompt: float = 512,
    output: float = 512,
    *,
    cv: float = 0.0,
    repetitiveness: float = 0.0,
    window: TimeWindow | None = None,
) -> TrafficShape:
    """Traffic of ``rate`` req/s with ``concurrency`` requests in flight, ``prompt`` tokens in and ``output`` out (both
    lengths spread by ``cv``)."""
    return TrafficShape(
        arrival_rate_rps=rate,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=prompt, cv=cv),
        output_tokens=LengthDistribution(mean=output, cv=cv),
        repetitiveness=repetitiveness,
        window=window,
    )


def spread(values: Spread | None) -> Percentiles | None:
    return None if values is None else Percentiles(p50=values[0], p95=values[1], p99=values[2])


def trial(
    config: EngineConfig,
    shape: TrafficShape,
    *,
    slo: SLO,
    goodput: float = 1000.0,
    status: TrialStatus = TrialStatus.MEASURED,
    ttft: Spread | None = (0.5, 1.0, 1.5),
    tpot: Spread | None = (0.02, 0.03, 0.04),
    throughput: float | None = None,
    completed: int = 100,
    **fields: Any,
) -> TrialResult:
    """A trial of ``config`` on ``shape`` against ``slo``: ``goodput`` output tok/s (all of it good), ``completed``
    requests at ``throughput`` req/s (``shape``'s arrival rate unless given) with the TTFT and TPOT spreads given.
    Any other ``TrialResult`` field comes from ``fields`` (``goodput_rps``, ``duration_s``, ``reason``...)."""
    return TrialResult(
        config=config,
        shape=shape,
        slo=slo,
        status=status,
        ttft_s=spread(ttft),
        tpot_s=spread(tpot),
        goodput_tokens_per_s=goodput,
        output_tokens_per_s=goodput,
        request_throughput=shape.arrival_rate_rps if throughput is None else throughput,
        completed=completed,
        **fields,
    )


def failed_trial(
    config: EngineConfig,
    shape: TrafficShape,
    *,
    slo: SLO | None = None,
    status: TrialStatus = TrialStatus.FAILED,
    reason: str = "test",
) -> TrialResult:
    """A trial of ``config`` on ``shape`` that measured nothing (``status``, the default SLO unless given), for
    ``reason``."""
    return TrialResult(config=config, shape=shape, slo=slo or SLO(), status=status, reason=reason)


def measured_trial(request: TrialRequest, *, output_tokens_per_s: float = 1000.0) -> TrialResult:
    """A trial of ``request`` that measured 100 requests at ``output_tokens_per_s``, TTFT p50/p95/p99 0.1/0.2/0.3 s
    and TPOT 10/20/30 ms: well within the usual test SLOs."""
    return TrialResult(
        config=request.config,
        shape=request.shape,
        slo=request.slo,
        status=TrialStatus.MEASURED,
        completed=100,
        output_tokens_per_s=output_tokens_per_s,
        ttft_s=Percentiles(p50=0.1, p95=0.2, p99=0.3),
        tpot_s=Percentiles(p50=0.01, p95=0.02, p99=0.03),
    )


def variant(
    name: str, requests: int, *, ttft: float | None = 0.2, tpot: float | None = 0.02, **fields: Any
) -> VariantStats:
    """``name``'s production signals: ``requests`` finished, TTFT and TPOT p95 as given; every one good unless
    ``fields`` says otherwise (``good_requests``, ``errors``...)."""
    return VariantStats(
        variant=name, requests=requests, ttft_p95_s=ttft, tpot_p95_s=tpot, **({"good_requests": requests} | fields)
    )


def observed(
    shape: TrafficShape, end: datetime, *variants: VariantStats, minutes: float = 5, target: str = "ns/m"
) -> Observation:
    """One observe cycle of ``target`` ending at ``end``: ``shape``'s traffic and the ``variants`` given."""
    return Observation(
        target=target,
        start=end - timedelta(minutes=minutes),
        end=end,
        shape=shape,
        variants={v.variant: v for v in variants},
    )


def scheduled(
    window: str,
    config: EngineConfig,
    shape: TrafficShape,
    *,
    goodput: float = 2000,
    stock_goodput: float = 1000,
    **fields: Any,
) -> ScheduledConfig:
    """``window``'s schedule entry: ``config``, measured on ``shape`` at ``goodput`` against stock's
    ``stock_goodput``; other ``ScheduledConfig`` fields (``reason``, ``tuned_at``, ``replicas``...) from ``fields``."""
    return ScheduledConfig(
        window=window,
        config=config,
        shape=shape,
        goodput_tokens_per_s=goodput,
        stock_goodput_tokens_per_s=stock_goodput,
        **fields,
    )


def at_step(
    rollout_id: str,
    from_config: EngineConfig,
    to_config: EngineConfig,
    steps: tuple[int, ...],
    step_index: int,
    at: datetime,
    *,
    ago: tuple[float, float],
    **fields: Any,
) -> RolloutState:
    """Rollout ``rollout_id`` from ``from_config`` to ``to_config``, at step ``step_index`` of ``steps`` (its weight
    that step's); ``ago`` says how many minutes before ``at`` the rollout and that step started. Other
    ``RolloutState`` fields (``proposed_by``, ``abort_requested``...) from ``fields``."""
    return RolloutState(
        id=rollout_id,
        from_config=from_config,
        to_config=to_config,
        steps=steps,
        step_index=step_index,
        weight=steps[step_index],
        started_at=at - timedelta(minutes=ago[0]),
        step_started_at=at - timedelta(minutes=ago[1]),
        **fields,
    )


def plan_context(
    status: TargetStatus,
    rules: Rules,
    now: datetime,
    window: TimeWindow,
    *,
    observation: Observation | None = None,
    **fields: Any,
) -> PlanContext:
    """What one decision at ``now`` in ``window`` reads: ``status``, ``observation`` (none by default), ``rules``, no
    proposals and no observe error unless ``fields`` says otherwise."""
    return PlanContext(
        status=status,
        observation=observation,
        observe_error=fields.pop("observe_error", None),
        proposals=fields.pop("proposals", ()),
        rules=rules,
        now=now,
        window=window,
        **fields,
    )
