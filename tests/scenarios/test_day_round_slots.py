"""Scenario: the day's tuning round with managed replicas, on a GPU whose engine default holds more sequences than the
policy's space allows. The round replays the day's load spread over the replicas the space's largest
``max_num_seqs`` (512) needs, so every config there runs at or below its slots: the 512-slot config measures the most
goodput and stock (the engine's default of 1024 slots) 20 % less. Where the SLO breaks is another matter: one stock
replica carries 1.3x the round's load, the 512-slot config 1.05x, so stock needs 8 replicas for the day's busy hour
and the 512-slot config 10. Stock was more than 10 % behind the leader's goodput, so no probe measured its capacity
and the round settled on the config that needs two replicas more all day. Clock injected (a fixed 07:45, the round
tuned ahead of the day window)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller import decide
from controller.act.effects import TrialRecorded
from controller.act.fold import fold
from controller.decide import Rules, ScalingRules, TuningRules
from controller.domain import RunTrial
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.proposal import Proposal
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult
from tests.support import builders
from tests.support.builders import observed, shape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=7)
DAY = TimeWindow(name="day", start_hour=7, end_hour=24)
NOW = datetime(2026, 12, 1, 7, 45, tzinfo=UTC)
NIGHT_CONFIG = EngineConfig(speculative_method="ngram", num_speculative_tokens=4, max_num_seqs=128)
WIDE = EngineConfig(max_num_seqs=512, max_num_batched_tokens=4096)
#: the day's busy hour: 170 req/s, 4096 streams of 512/512 tokens
BUSY = shape(170.0, 4096)
RULES = Rules(
    slo=SLO(ttft_seconds=2, tpot_seconds=0.05),
    tuning=TuningRules(max_trials=4),
    windows=(NIGHT, DAY),
    scaling=ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=0),
    design_slots=512,
)
#: how far one replica of each config stretches, as a multiple of the round's per-replica load (512 streams)
CAPACITY = {STOCK.key(): 1.3, WIDE.key(): 1.05, NIGHT_CONFIG.key(): 0.2}
GOODPUT = {STOCK.key(): 14000.0, WIDE.key(): 17500.0, NIGHT_CONFIG.key(): 5400.0}


def trial(config: EngineConfig, shape: TrafficShape, factor: float, capacity: dict[str, float]) -> TrialResult:
    """One replica of ``config`` on ``shape`` (``factor`` times the round's per-replica load): within the SLO up to
    its capacity, keeping up with the load's rate there."""
    ok = factor <= capacity[config.key()]
    rate = shape.arrival_rate_rps if ok else shape.arrival_rate_rps * capacity[config.key()] / factor
    return builders.trial(
        config,
        shape,
        slo=RULES.slo,
        goodput=GOODPUT[config.key()] * min(factor, 1.0),
        ttft=(0.3, 0.6 if ok else 4.0, 0.8 if ok else 6.0),
        throughput=rate,
        completed=200,
        goodput_rps=rate if ok else 0.1 * rate,
    )


def day_round(capacity: dict[str, float] = CAPACITY) -> tuple[decide.Decision, list[RunTrial]]:
    """The round from its first cycle to its verdict: every trial it asks for is measured on the replica above."""
    status = TargetStatus(active_config=NIGHT_CONFIG, window="night", replicas=3)
    probes: list[RunTrial] = []
    proposals = (Proposal(config=WIDE, rationale="more goodput", proposed_by="optimizer"),)
    for _ in range(40):
        d = decide.plan(
            status=status,
            observation=observed(BUSY, NOW),
            observe_error=None,
            proposals=proposals,
            rules=RULES,
            now=NOW,
            forecast={"day": BUSY},
        )
        runs = [a for a in d.actions if isinstance(a, RunTrial)]
        if not runs and d.status.tuning is None:
            return d, probes
        assert d.status.tuning is not None, d.codes
        base = d.status.tuning.shape
        probes += [run for run in runs if run.proposed_by == "capacity-probe"]
        recorded = [
            TrialRecorded(run, trial(run.config, run.shape, run.shape.concurrency / base.concurrency, capacity))
            for run in runs
        ]
        status = fold(d.status, recorded, keep_trials=200)
    raise AssertionError("the round did not end")


def test_the_round_probes_the_config_with_more_slots_and_picks_the_one_that_needs_fewer_replicas() -> None:
    d, probes = day_round()
    assert STOCK.key() in {p.config.key() for p in probes}
    entry = d.status.schedule_for("day")
    assert entry is not None
    assert entry.config == STOCK, entry.reason
    assert "chosen for capacity" in entry.reason
    assert d.status.phase is Phase.ROLLING_OUT
    # 170 req/s x 1.25 over one stock replica's probed rate: 8 replicas, where the 512-slot config needs 10
    assert entry.capacity_rps is not None
    assert -(-170.0 * 1.25 // entry.capacity_rps) == 8


@pytest.mark.parametrize(("stock_capacity", "winner"), [(1.3, STOCK), (1.05, WIDE)])
def test_more_slots_win_only_where_they_save_replicas(stock_capacity: float, winner: EngineConfig) -> None:
    """Probed and no better where the SLO breaks: the leader's goodput decides."""
    d, _probes = day_round({**CAPACITY, STOCK.key(): stock_capacity})
    entry = d.status.schedule_for("day")
    assert entry is not None and entry.config == winner, entry.reason
