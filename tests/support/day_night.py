"""The day/night schedule the switch and swap scenarios share: two windows, a day config with 512 slots, a night
config with n-gram speculation, and the night's long repetitive documents (one replica's share)."""

from __future__ import annotations

from controller.decide import Rules, ScalingRules, TuningRules
from controller.domain import (
    SLO,
    EngineConfig,
    LengthDistribution,
    Percentiles,
    ScheduledConfig,
    TimeWindow,
    TrafficShape,
    TrialResult,
    TrialStatus,
)

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
DAY_CONFIG = EngineConfig(max_num_seqs=512)
NIGHT_CONFIG = EngineConfig(speculative_method="ngram", num_speculative_tokens=4)
NIGHT_SHAPE = TrafficShape(
    arrival_rate_rps=1.0,
    concurrency=16,
    prompt_tokens=LengthDistribution(mean=24000),
    output_tokens=LengthDistribution(mean=1024),
    repetitiveness=0.85,
)

#: the SLO and rules the day/night scenarios decide under (four trials a round, 1-32 replicas, 25 % headroom)
DAY_NIGHT_SLO = SLO(ttft_seconds=2, tpot_seconds=0.1)
DAY_NIGHT_RULES = Rules(
    slo=DAY_NIGHT_SLO,
    tuning=TuningRules(max_trials=4),
    windows=(NIGHT, DAY),
    scaling=ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=0),
)


def held_probe(
    config: EngineConfig, shape: TrafficShape, goodput: float, *, slo: SLO = DAY_NIGHT_SLO, completed: int = 100
) -> TrialResult:
    """A measured trial of ``config`` on ``shape`` (at its arrival rate) that met ``slo`` with ``goodput`` tok/s."""
    return TrialResult(
        config=config,
        shape=shape,
        slo=slo,
        status=TrialStatus.MEASURED,
        ttft_s=Percentiles(p50=0.5, p95=1.0, p99=1.5),
        tpot_s=Percentiles(p50=0.02, p95=0.03, p99=0.04),
        goodput_tokens_per_s=goodput,
        output_tokens_per_s=goodput,
        goodput_rps=shape.arrival_rate_rps,
        request_throughput=shape.arrival_rate_rps,
        completed=completed,
    )


def night_entry(shape: TrafficShape = NIGHT_SHAPE) -> ScheduledConfig:
    """The night's schedule entry: the n-gram config, measured on ``shape`` at 1.5x stock's goodput, one replica
    carrying 1.0 req/s within the SLO, for a fleet load of 4 req/s."""
    return ScheduledConfig(
        window="night",
        config=NIGHT_CONFIG,
        shape=shape,
        goodput_tokens_per_s=600,
        stock_goodput_tokens_per_s=400,
        reason="measured",
        capacity_rps=1.0,
        fleet_rate_rps=4.0,
    )


def day_entry(shape: TrafficShape, *, fleet_rate_rps: float | None = None) -> ScheduledConfig:
    """The day's schedule entry: the 512-slot config, measured on ``shape`` at 2x stock's goodput, one replica
    carrying 10 req/s within the SLO."""
    return ScheduledConfig(
        window="day",
        config=DAY_CONFIG,
        shape=shape,
        goodput_tokens_per_s=3000,
        stock_goodput_tokens_per_s=1500,
        reason="measured",
        capacity_rps=10.0,
        fleet_rate_rps=fleet_rate_rps,
    )
