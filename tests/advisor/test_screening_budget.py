"""A round's trial budget counts what the round ran itself. A round interrupted earlier (a metrics outage) on the
same shape left trials of the same configs in status: they are no part of the new round's spending, so the new
round still gets its optimizer trials."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.decide.search.screening import this_rounds_trials
from controller.domain import SLO, STOCK, LengthDistribution, TrafficShape
from controller.domain.phases import Phase
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.trial import Percentiles, TrialResult, TrialStatus

SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=16.0,
    prompt_tokens=LengthDistribution(mean=512),
    output_tokens=LengthDistribution(mean=128),
)
OTHER = SHAPE.model_copy(update={"concurrency": 64.0})


def measured(shape: TrafficShape, goodput: float) -> TrialResult:
    return TrialResult(
        config=STOCK,
        shape=shape,
        slo=SLO(),
        status=TrialStatus.MEASURED,
        completed=100,
        output_tokens_per_s=goodput,
        goodput_tokens_per_s=goodput,
        ttft_s=Percentiles(p50=0.1, p95=0.2, p99=0.3),
        tpot_s=Percentiles(p50=0.01, p95=0.02, p99=0.03),
    )


def status(trials: list[TrialResult], keys: int) -> TargetStatus:
    round_ = TuningRound(
        id="r2", window="all-day", shape=SHAPE, started_at=datetime(2026, 1, 1, tzinfo=UTC), reason="test",
        trial_keys=(STOCK.key(),) * keys,
    )  # fmt: skip
    return TargetStatus(phase=Phase.TRIALLING, active_config=STOCK, tuning=round_, trials=tuple(trials))


# (status trials, how many trials the round ran, the goodputs its budget counts)
CASES = [
    ([measured(SHAPE, 1.0), measured(SHAPE, 2.0), measured(SHAPE, 3.0), measured(SHAPE, 4.0)], 2, [3.0, 4.0]),
    ([measured(SHAPE, 1.0), measured(OTHER, 2.0), measured(SHAPE, 3.0)], 1, [3.0]),
    ([measured(SHAPE, 1.0), measured(SHAPE, 2.0)], 2, [1.0, 2.0]),
    ([measured(SHAPE, 1.0)], 0, []),
]


@pytest.mark.parametrize(("trials", "ran", "counted"), CASES)
def test_the_budget_counts_only_the_rounds_own_trials(
    trials: list[TrialResult], ran: int, counted: list[float]
) -> None:
    assert [t.goodput_tokens_per_s for t in this_rounds_trials(status(trials, ran))] == counted
