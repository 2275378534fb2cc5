"""A trial or capacity probe whose percentiles or throughput are NaN, infinite or missing never meets the SLO, never
holds a probed capacity and is never ranked best; a vllm bench result with such numbers is refused where it enters,
naming the field."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from controller.decide.capacity.sizing import holds
from controller.decide.tuning.selection import best_trial
from controller.domain import SLO, STOCK, EngineConfig
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.errors import InvalidInput
from controller.trials.loadgen.vllm_bench import load_result, to_trial_result
from tests.support import builders

SLO_ = SLO(ttft_seconds=1.0, tpot_seconds=0.05)
SHAPE = builders.shape(4.0, 16.0, 512, 128, cv=0.5)
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)


def measured(config: EngineConfig = STOCK, goodput: float = 1000.0) -> TrialResult:
    return builders.trial(
        config,
        SHAPE,
        slo=SLO_,
        goodput=goodput,
        ttft=(0.1, 0.2, 0.3),
        tpot=(0.01, 0.02, 0.03),
        completed=500,
        total_tokens_per_s=goodput * 5,
        goodput_rps=4.0,
    )


GOOD = measured()
NAN, INF = math.nan, math.inf


def broken(**update: Any) -> TrialResult:
    """The candidate's result with ``update`` applied as arithmetic would (``model_copy`` does not re-validate, like
    the runner's engine-time rescaling)."""
    return measured(MTP1, goodput=5000.0).model_copy(update=update)


def pct(p95: float) -> Percentiles:
    return Percentiles.model_construct(p50=0.1, p95=p95, p99=max(0.3, p95) if not math.isnan(p95) else p95)


BROKEN = {
    "ttft-p95-nan": (broken(ttft_s=pct(NAN)), "ttft_s.p95"),
    "ttft-p95-inf": (broken(ttft_s=pct(INF)), "ttft_s.p95"),
    "ttft-missing": (broken(ttft_s=None), "ttft_s"),
    "tpot-p95-nan": (broken(tpot_s=pct(NAN)), "tpot_s.p95"),
    "tpot-p95-inf": (broken(tpot_s=pct(INF)), "tpot_s.p95"),
    "tpot-missing": (broken(tpot_s=None), "tpot_s"),
    "goodput-nan": (broken(goodput_tokens_per_s=NAN), "goodput_tokens_per_s"),
    "goodput-inf": (broken(goodput_tokens_per_s=INF), "goodput_tokens_per_s"),
    "goodput-rps-inf": (broken(goodput_rps=INF), "goodput_rps"),
    "throughput-nan": (broken(request_throughput=NAN), "request_throughput"),
    "throughput-inf": (broken(output_tokens_per_s=INF), "output_tokens_per_s"),
}


@pytest.mark.security
@pytest.mark.parametrize(("result", "field"), BROKEN.values(), ids=BROKEN.keys())
def test_a_result_without_finite_numbers_is_never_within_the_slo_held_or_best(result: TrialResult, field: str) -> None:
    assert field in result.data_problems()
    assert not result.meets_slo()
    assert result.objective() == 0.0
    assert not holds(result, keeps_up=False) and not holds(result, keeps_up=True)
    # five times the goodput of a clean result, and it still does not win
    assert best_trial([GOOD, result]) is GOOD
    assert best_trial([result]) is None


def test_a_clean_result_has_no_data_problems() -> None:
    assert GOOD.data_problems() == () and GOOD.meets_slo() and holds(GOOD, keeps_up=True)


# ----- vllm bench results, where they enter ----------------------------------------------------------------------

BENCH: dict[str, Any] = {
    "duration": 60.0,
    "completed": 200,
    "failed": 0,
    "total_input_tokens": 100000,
    "total_output_tokens": 25000,
    "request_throughput": 3.3,
    "output_throughput": 416.0,
    "total_token_throughput": 2083.0,
    "median_ttft_ms": 80.0,
    "p95_ttft_ms": 150.0,
    "p99_ttft_ms": 200.0,
    "median_tpot_ms": 10.0,
    "p95_tpot_ms": 15.0,
    "p99_tpot_ms": 20.0,
}


@pytest.mark.security
@pytest.mark.parametrize(
    ("field", "value"),
    [("p95_ttft_ms", "NaN"), ("median_tpot_ms", "Infinity"), ("output_throughput", "NaN"), ("duration", "-Infinity")],
)
def test_a_bench_result_with_a_non_finite_number_is_refused_naming_the_field(
    tmp_path: Path, field: str, value: str
) -> None:
    text = json.dumps(BENCH).replace(f'"{field}": {json.dumps(BENCH[field])}', f'"{field}": {value}')
    path = tmp_path / "result.json"
    path.write_text(text)
    with pytest.raises(InvalidInput) as err:
        load_result(path)
    assert err.value.field == field
    assert str(path) in str(err.value)


@pytest.mark.security
@pytest.mark.parametrize("absent", [("median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms"), ("p99_tpot_ms",)])
def test_a_bench_result_without_latency_percentiles_is_a_failed_measurement(
    tmp_path: Path, absent: tuple[str, ...]
) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({k: v for k, v in BENCH.items() if k not in absent}))
    result = to_trial_result(load_result(path), config=STOCK, shape=SHAPE, slo=SLO_)
    assert result.status is TrialStatus.FAILED and "latency not measured" in result.reason
    assert not result.meets_slo() and result.objective() == 0.0


def test_a_complete_bench_result_is_measured(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(BENCH))
    result = to_trial_result(load_result(path), config=STOCK, shape=SHAPE, slo=SLO_)
    assert result.ok and result.meets_slo() and result.ttft_s is not None
    assert result.ttft_s.p95 == pytest.approx(0.150)
