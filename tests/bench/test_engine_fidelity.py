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


def test_prints_the_issue_line_and_the_shipped_engine_section_is_the_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert fidelity.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = out[-1]
    m = LINE.match(last)
    assert m, last
    for key in ("med", "worst", "med2", "worst2", "unc"):
        assert math.isfinite(float(m[key]))
    assert int(m["n"]) >= 24
    assert 0 <= int(m["k"]) <= int(m["m"])
    assert float(m["med"]) <= float(m["worst"])
    # the calibration that ships is the fit on all committed points (a refit that moved would say so)
    assert not [line for line in out if line.startswith("note:")]


def test_points_are_medians_of_at_least_two_measured_runs() -> None:
    points = fidelity.load_points()
    assert points
    for p in points:
        assert len(p.runs) >= 2
        assert min(p.runs) <= p.engine <= max(p.runs)


def test_the_default_fit_is_the_model_without_an_engine_section() -> None:
    shipped = fidelity.PerformanceModel(
        fidelity.load_model("llama-3.1-8b"),
        fidelity.load_gpu("h200"),
        fidelity.shipped_calibration("h200"),
        prefill_fixes=True,
    )
    none = fidelity.with_engine(shipped, None)
    default = fidelity.with_engine(shipped, fidelity.EngineFit())
    # (the n-gram configs differ by construction: with an engine section they run on the V1 runner's rule)
    for name in ("stock", "kv-fp8", "sync", "mbt2048"):
        for seqs, prefill in ((1, 0), (64, 0), (8, 4096)):
            kwargs = {"decode_seqs": seqs, "prefill_tokens": prefill, "mean_context_tokens": 768.0}
            a = none.step(fidelity.CONFIGS[name], **kwargs).seconds
            b = default.step(fidelity.CONFIGS[name], **kwargs).seconds
            assert b == pytest.approx(a, rel=1e-12), (name, seqs, prefill)


def test_the_replay_counts_every_request_once() -> None:
    base = fidelity.PerformanceModel(fidelity.load_model("llama-3.1-8b"), fidelity.load_gpu("h200"), None)
    model = fidelity.with_engine(base, None)
    p = fidelity.Point("stock", 64, 16, 4, runs=(1.0, 1.0))
    tput = fidelity.replay_throughput(model, p)
    assert tput > 0
    # 16 requests of 16 tokens; the replay ends when the last is done, so the time is at least one request's
    one = model.step(fidelity.CONFIGS["stock"], decode_seqs=4, prefill_tokens=0, mean_context_tokens=72.0).seconds
    assert 16 * 16 / tput >= 15 * one


def test_a_tie_within_three_percent_counts_as_right() -> None:
    pts = [
        fidelity.Point("stock", 512, 512, 64, runs=(100.0, 100.0)),
        fidelity.Point("kv-fp8", 512, 512, 64, runs=(102.0, 102.0)),
        fidelity.Point("stock", 512, 512, 1, runs=(10.0, 10.0)),  # one config only: not a cell
    ]
    predicted = {"stock": 2.0, "kv-fp8": 1.0}
    assert fidelity.top_config_right(lambda p: predicted[p.config], pts) == (1, 1)
