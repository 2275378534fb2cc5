"""The traffic ``bench/week.py`` runs, for the planner's regression tests that replay what it found: agents by day
(512 tokens in and out), long documents by night, on the diurnal windows, against a 5 s TTFT SLO; and the planner
run once on a status and an observation of the stable variant."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controller import decide
from controller.decide import ScalingRules
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation, VariantStats
from controller.domain.proposal import Proposal
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus, TuningRound
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.simulator.traffic.diurnal import DiurnalTraffic
from tests.support.builders import observed, scheduled

SLO_5S = SLO(ttft_seconds=5.0, tpot_seconds=0.1)
WINDOWS = DiurnalTraffic(7).windows
#: Capacity scaling with a quarter of headroom, up to 16 replicas.
SCALING = decide.Rules(slo=SLO_5S, windows=WINDOWS, scaling=ScalingRules(headroom=0.25, max_replicas=16))


def agents(rate: float, concurrency: float) -> TrafficShape:
    """The day's coding agents: 512 tokens in and out (cv 0.25), a little repetition."""
    return TrafficShape(
        arrival_rate_rps=rate,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=512, cv=0.25),
        output_tokens=LengthDistribution(mean=512, cv=0.25),
        repetitiveness=0.1,
    )


def documents(rate: float, concurrency: float) -> TrafficShape:
    """The night's long documents: 24k tokens in, 1k out, highly repetitive."""
    lengths = {
        "prompt_tokens": LengthDistribution(mean=24000, cv=0.4),
        "output_tokens": LengthDistribution(mean=1024, cv=0.5),
    }
    return agents(rate, concurrency).model_copy(update={**lengths, "repetitiveness": 0.85})


def entry(
    window: str, config: EngineConfig, shape: TrafficShape, *, capacity: float, tuned_at: datetime, **fields: Any
) -> ScheduledConfig:
    """``window``'s schedule entry: ``config`` at 7000 tok/s against stock's 3000, ``capacity`` req/s a replica."""
    return scheduled(
        window, config, shape, goodput=7000, stock_goodput=3000, capacity_rps=capacity, tuned_at=tuned_at, **fields
    )


def tuning_round(
    round_id: str, shape: TrafficShape, started_at: datetime, reason: str, *trials: tuple[EngineConfig, str, str]
) -> TuningRound:
    """Round ``round_id`` of the window ``shape`` was seen in, started at ``started_at`` for ``reason``, with a trial of
    each (config, proposer, reason) in ``trials``."""
    assert shape.window is not None
    return TuningRound(
        id=round_id,
        window=shape.window.name,
        shape=shape,
        started_at=started_at,
        reason=reason,
        trial_keys=tuple(config.key() for config, _, _ in trials),
        trial_proposers=tuple(proposer for _, proposer, _ in trials),
        trial_reasons=tuple(why for _, _, why in trials),
    )


def stable_seen(
    shape: TrafficShape, now: datetime, requests: int, ttft: float, tpot: float, errors: int = 0
) -> Observation:
    """The five minutes to ``now`` of ``prod/workhorse``: ``shape``'s traffic, all of it on stable."""
    stable = VariantStats(variant="stable", requests=requests, errors=errors, ttft_p95_s=ttft, tpot_p95_s=tpot)
    return observed(shape, now, stable, target="prod/workhorse")


def plan(
    status: TargetStatus,
    observation: Observation,
    now: datetime,
    *,
    rules: decide.Rules = SCALING,
    proposals: tuple[Proposal, ...] = (),
) -> decide.Decision:
    """One planner run (no observe error)."""
    return decide.plan(
        status=status, observation=observation, observe_error=None, proposals=proposals, rules=rules, now=now
    )
