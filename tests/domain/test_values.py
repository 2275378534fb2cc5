"""Traffic shapes, SLOs and trial results validate what comes from outside."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controller.domain import (
    SLO,
    STOCK,
    LengthDistribution,
    Percentiles,
    TimeWindow,
    TrafficShape,
    TrialResult,
    TrialStatus,
)


def shape(concurrency: float = 8, prompt: float = 512, output: float = 512) -> TrafficShape:
    return TrafficShape(
        arrival_rate_rps=1.0,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=prompt, cv=0.5),
        output_tokens=LengthDistribution(mean=output),
    )


def test_lognormal_parameters_reproduce_the_mean() -> None:
    import math

    d = LengthDistribution(mean=512, cv=0.8)
    mu, sigma = d.lognormal_params()
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(512)
    assert d.second_moment() == pytest.approx(512**2 * 1.64)


@pytest.mark.parametrize(
    ("window", "hour", "inside"),
    [((9, 17), 9, True), ((9, 17), 17, False), ((22, 6), 23, True), ((22, 6), 3, True), ((22, 6), 12, False)],
)
def test_time_windows_wrap_midnight(window: tuple[int, int], hour: float, inside: bool) -> None:
    w = TimeWindow(name="w", start_hour=window[0], end_hour=window[1])
    assert w.contains(hour) is inside


def test_shape_bucket_groups_similar_shapes() -> None:
    assert shape(250).bucket() == shape(260).bucket()
    assert shape(256).bucket() != shape(4).bucket()


@pytest.mark.parametrize(
    ("concurrency", "streams"),
    [(4.0, 4), (4.4, 5), (4.5, 5), (4.6, 5), (0.3, 1), (0.0, 1), (256.0, 256)],
)
def test_a_closed_loop_keeps_the_concurrency_rounded_up_in_whole_streams(concurrency: float, streams: int) -> None:
    assert shape(concurrency).closed_loop_streams() == streams


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LengthDistribution(mean=0), "mean"),
        (lambda: LengthDistribution(mean=100, maximum=50), "maximum"),
        (lambda: TrafficShape.model_validate({"arrival_rate_rps": -1, "concurrency": 1}), "arrival_rate_rps"),
        (lambda: SLO(ttft_seconds=0), "ttft_seconds"),
        (lambda: Percentiles(p50=2, p95=1, p99=3), "ordered"),
        (lambda: TrialResult(config=STOCK, shape=shape(), slo=SLO(), status=TrialStatus.INFEASIBLE), "reason"),
        (lambda: TrialResult(config=STOCK, shape=shape(), slo=SLO(), status=TrialStatus.MEASURED), "ttft_s"),
    ],
)
def test_bad_values_are_rejected_with_the_field(build: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build()  # type: ignore[operator]


def test_trial_meets_slo_and_objective() -> None:
    p = Percentiles(p50=0.1, p95=0.5, p99=1.0)
    good = TrialResult(
        config=STOCK,
        shape=shape(),
        slo=SLO(ttft_seconds=1, tpot_seconds=0.6),
        status=TrialStatus.MEASURED,
        ttft_s=p,
        tpot_s=p,
        goodput_tokens_per_s=100,
        completed=100,
    )
    assert good.meets_slo() and good.objective() == 100
    slow = good.model_copy(update={"slo": SLO(ttft_seconds=0.2, tpot_seconds=0.6)})
    assert not slow.meets_slo()
    errors = good.model_copy(update={"failed": 5})
    assert errors.error_rate == pytest.approx(5 / 105) and not errors.meets_slo()
    bad = TrialResult(config=STOCK, shape=shape(), slo=SLO(), status=TrialStatus.INFEASIBLE, reason="OOM")
    assert bad.objective() == 0 and not bad.meets_slo() and "OOM" in bad.summary()
