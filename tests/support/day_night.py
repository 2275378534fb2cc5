"""The day/night schedule the switch and swap scenarios share: two windows, a day config with 512 slots, a night
config with n-gram speculation, and the night's long repetitive documents (one replica's share)."""

from __future__ import annotations

from controller.decide import Rules, ScalingRules, TuningRules
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult
from tests.support import builders
from tests.support.builders import scheduled, shape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
DAY_CONFIG = EngineConfig(max_num_seqs=512)
NIGHT_CONFIG = EngineConfig(speculative_method="ngram", num_speculative_tokens=4)
NIGHT_SHAPE = shape(1.0, 16, 24000, 1024, repetitiveness=0.85)

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
    return builders.trial(
        config, shape, slo=slo, goodput=goodput, completed=completed, goodput_rps=shape.arrival_rate_rps
    )


def night_entry(shape: TrafficShape = NIGHT_SHAPE) -> ScheduledConfig:
    """The night's schedule entry: the n-gram config, measured on ``shape`` at 1.5x stock's goodput, one replica
    carrying 1.0 req/s within the SLO, for a fleet load of 4 req/s."""
    return scheduled(
        "night",
        NIGHT_CONFIG,
        shape,
        goodput=600,
        stock_goodput=400,
        reason="measured",
        capacity_rps=1.0,
        fleet_rate_rps=4.0,
    )


def day_entry(shape: TrafficShape, *, fleet_rate_rps: float | None = None) -> ScheduledConfig:
    """The day's schedule entry: the 512-slot config, measured on ``shape`` at 2x stock's goodput, one replica
    carrying 10 req/s within the SLO."""
    return scheduled(
        "day",
        DAY_CONFIG,
        shape,
        goodput=3000,
        stock_goodput=1500,
        reason="measured",
        capacity_rps=10.0,
        fleet_rate_rps=fleet_rate_rps,
    )
