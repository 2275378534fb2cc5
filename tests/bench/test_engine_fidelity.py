"""The engine-fidelity benchmark runs on the committed H200 engine measurements (no GPU) and prints its line."""

from __future__ import annotations

import math
import re

import pytest

from tests.support.bench_module import load_bench

fidelity = load_bench("engine_fidelity.py", "engine_fidelity_bench")

LINE = re.compile(
    r"^engine: throughput error median (?P<med>[\d.]+)%, worst (?P<worst>[\d.]+)% over (?P<n>\d+) points"
    r" \(held-out half: median (?P<med2>[\d.]+)%, worst (?P<worst2>[\d.]+)%\);"
    r" top config right in (?P<k>\d+) of (?P<m>\d+) cells; uncalibrated median (?P<unc>[\d.]+)%$"
)


def test_prints_the_issue_line_with_finite_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert fidelity.main([]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = LINE.match(last)
    assert m, last
    for key in ("med", "worst", "med2", "worst2", "unc"):
        assert math.isfinite(float(m[key]))
    assert int(m["n"]) >= 6
    assert 0 <= int(m["k"]) <= int(m["m"])
    assert float(m["med"]) <= float(m["worst"])


def test_points_are_medians_of_at_least_two_measured_runs() -> None:
    points = fidelity.load_points()
    assert points
    for p in points:
        assert len(p.runs) >= 2
        assert min(p.runs) <= p.engine <= max(p.runs)


def test_the_default_fit_is_the_model_itself() -> None:
    base = fidelity.PerformanceModel(fidelity.load_model("llama-3.1-8b"), fidelity.load_gpu("h200"), None)
    fitted = fidelity.FittedModel(base, fidelity.EngineFit())
    p = fidelity.Point("kv-fp8", 512, 512, 64, runs=(1.0, 1.0))
    assert fidelity.wave_throughput(fitted, p) == pytest.approx(fidelity.wave_throughput(base, p))


def test_a_tie_within_three_percent_counts_as_right() -> None:
    pts = [
        fidelity.Point("stock", 512, 512, 64, runs=(100.0, 100.0)),
        fidelity.Point("kv-fp8", 512, 512, 64, runs=(102.0, 102.0)),
        fidelity.Point("stock", 512, 512, 1, runs=(10.0, 10.0)),  # one config only: not a cell
    ]
    predicted = {"stock": 2.0, "kv-fp8": 1.0}
    assert fidelity.top_config_right(lambda p: predicted[p.config], pts) == (1, 1)
