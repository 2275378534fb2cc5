"""The capacity a probe reads: the most requests/s a held load served within the SLO, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.decide import Rules, ScalingRules
from controller.decide.context import PlanContext, scaled
from controller.decide.tuning import probe
from controller.domain.config import STOCK
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.traffic import TimeWindow
from controller.domain.trial import Percentiles, TrialResult
from tests.support import builders
from tests.support.builders import plan_context, shape

DAY = TimeWindow(name="day", start_hour=0, end_hour=24)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SHAPE = shape(20, 300, 1000, 250)
SLO_ = SLO(ttft_seconds=5, tpot_seconds=0.1)


def trial(factor: float, served: float, *, meets: bool = True) -> TrialResult:
    return builders.trial(
        STOCK,
        scaled(SHAPE, factor),
        slo=SLO_,
        goodput=served * 250,
        ttft=(0.3, 0.6 if meets else 9.0, 0.8 if meets else 12.0),
        throughput=served,
        goodput_rps=served,
    )


def context(probes: list[tuple[float, TrialResult]]) -> PlanContext:
    base = trial(1.0, 20)
    round_ = TuningRound(
        id="r",
        window="day",
        shape=SHAPE,
        started_at=NOW,
        reason="tuning",
        trial_keys=(STOCK.key(),),
        probe_factors=tuple(f for f, _ in probes),
        fleet_rate_rps=40,
    )
    status = TargetStatus(
        active_config=STOCK, window="day", tuning=round_, trials=(base, *(t for _, t in probes)), replicas=2
    )
    rules = Rules(slo=SLO_, windows=(DAY,), scaling=ScalingRules(max_replicas=16, headroom=0.25), design_slots=512)
    return plan_context(
        status,
        rules,
        NOW,
        DAY,
        is_lossy=lambda _c: False,
        candidate_ready_replicas=None,
        forecast={},
        external_autoscaler=None,
    )


@pytest.mark.parametrize(
    ("probes", "expected", "why"),
    [
        (
            [(2.0, trial(2.0, 24.6, meets=False)), (1.4142, trial(1.4142, 25.5)), (1.5422, trial(1.5422, 24.55))],
            25.5,
            "past saturation the highest held load served less than a lighter one that held: the most served counts",
        ),
        (
            [(2.0, trial(2.0, 30.0, meets=False)), (1.4142, trial(1.4142, 26.0)), (1.6818, trial(1.6818, 28.0))],
            28.0,
            "below saturation the highest held load served the most",
        ),
        (
            [(2.0, trial(2.0, 40.0)), (4.0, trial(4.0, 90.0, meets=False))],
            40.0,
            "a load that missed the SLO counts for nothing, whatever it served",
        ),
        (
            [(2.0, trial(2.0, 60.0))],
            40.0,
            "never above the rate the held load offered",
        ),
    ],
)
def test_the_probed_capacity_is_the_most_a_held_load_served(
    probes: list[tuple[float, TrialResult]], expected: float, why: str
) -> None:
    ctx = context(probes)
    assert ctx.status.tuning is not None
    rps, _streams = probe.capacity(ctx, ctx.status.tuning, ctx.status.trials[0])
    assert rps == pytest.approx(expected), why


def test_no_capacity_when_nothing_held() -> None:
    ctx = context([(0.5, trial(0.5, 5.0, meets=False))])
    assert ctx.status.tuning is not None
    base = ctx.status.trials[0].model_copy(update={"ttft_s": Percentiles(p50=1, p95=9, p99=12)})
    ctx = ctx.with_status(ctx.status.model_copy(update={"trials": (base, *ctx.status.trials[1:])}))
    assert ctx.status.tuning is not None
    assert probe.capacity(ctx, ctx.status.tuning, base) == (None, None)


@pytest.mark.parametrize(
    ("probes", "bound", "decided", "why"),
    [
        (
            [(2.0, trial(2.0, 40.0)), (4.0, trial(4.0, 43.0, meets=False))],
            43.0,
            True,
            "the replica fell behind at 4x and served 43 req/s: 40 or 43 per replica need 2 for 36-44 req/s",
        ),
        (
            [(2.0, trial(2.0, 40.0)), (4.0, trial(4.0, 60.0, meets=False))],
            60.0,
            False,
            "60 req/s a replica might still carry: 1 replica for 36 req/s, so another probe could save one",
        ),
        (
            [
                (2.0, trial(2.0, 40.0)),
                (4.0, trial(4.0, 43.0, meets=False).model_copy(update={"request_throughput": 0})),
            ],
            80.0,
            False,
            "no throughput measured where it missed: bounded by the rate offered there",
        ),
        (
            [(2.0, trial(2.0, 40.0)), (4.0, trial(4.0, 30.0, meets=False))],
            80.0,
            False,
            "it completed less at 4x than it served at 2x: thrashing, not its most; bounded by the rate offered",
        ),
        (
            [(2.0, trial(2.0, 40.0))],
            float("inf"),
            False,
            "nothing missed yet: unbounded",
        ),
    ],
)
def test_a_load_that_missed_bounds_the_capacity_by_what_the_replica_served_there(
    probes: list[tuple[float, TrialResult]], bound: float, decided: bool, why: str
) -> None:
    ctx = context(probes)
    round_ = ctx.status.tuning
    assert round_ is not None
    low, high = probe.bracket(ctx, round_, STOCK.key())
    served = probe.served_rps(ctx, round_, STOCK.key(), low)
    assert served is not None
    assert probe.capacity_bound(ctx, round_, STOCK.key(), high, served=served) == pytest.approx(bound), why
    assert probe.replicas_decided(ctx, round_, STOCK.key(), low, high) is decided, why
