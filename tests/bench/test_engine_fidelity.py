"""The engine-fidelity benchmark runs on the committed H200 engine measurements (no GPU) and prints its line."""

from __future__ import annotations

import math
import re

import pytest

from bench import engine_fidelity as fidelity

pytestmark = pytest.mark.slow

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
    none = fidelity.with_engine({"m": shipped}, None)["m"]
    default = fidelity.with_engine({"m": shipped}, fidelity.EngineFit())["m"]
    # (the n-gram configs differ by construction: with an engine section they run on the V1 runner's rule)
    for name in ("stock", "kv-fp8", "sync", "mbt2048"):
        for seqs, prefill in ((1, 0), (64, 0), (8, 4096)):
            kwargs = {"decode_seqs": seqs, "prefill_tokens": prefill, "mean_context_tokens": 768.0}
            a = none.step(fidelity.CONFIGS[name], **kwargs).seconds
            b = default.step(fidelity.CONFIGS[name], **kwargs).seconds
            assert b == pytest.approx(a, rel=1e-12), (name, seqs, prefill)


def test_the_replay_counts_every_request_once() -> None:
    base = fidelity.PerformanceModel(fidelity.load_model("llama-3.1-8b"), fidelity.load_gpu("h200"), None)
    models = fidelity.with_engine({fidelity.MODEL: base}, None)
    model = models[fidelity.MODEL]
    p = fidelity.Point("stock", 64, 16, 4, runs=(1.0, 1.0))
    tput = fidelity.replay_throughput(models, p)
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


def test_configs_compete_only_within_one_models_cell() -> None:
    pts = [
        fidelity.Point("stock", 512, 512, 64, runs=(100.0, 100.0)),
        fidelity.Point("hy-stock", 512, 512, 64, runs=(300.0, 300.0)),
        fidelity.Point("hy-mtp1", 512, 512, 64, runs=(200.0, 200.0)),
    ]
    # the dense model's point alone is no cell; the hybrid's two configs are one
    assert fidelity.top_config_right(lambda p: p.engine, pts) == (1, 1)
    assert fidelity.top_config_right(lambda p: -p.engine, pts) == (0, 1)


def test_the_hybrid_at_the_servers_depth_keeps_its_mix_and_heads() -> None:
    full = fidelity.load_model(fidelity.HYBRID)
    l8 = fidelity.hybrid_at_depth(full, 8)
    assert (l8.num_layers, l8.attention_layers, l8.mamba_layers) == (8, 2, 6)
    assert l8.dense_params_b == pytest.approx(full.dense_params_b / 8)
    assert (l8.lm_head_params_b, l8.mtp_params_b) == (full.lm_head_params_b, full.mtp_params_b)
    assert l8.weight_bytes_per_param == 2.0  # dummy weights are bf16


def test_the_warm_up_groups_bench_runs_are_points() -> None:
    # run6's warm-two group: vllm bench serve on the kv-fp8 server after its canary trial (warmup.jsonl only)
    kv256 = [p for p in fidelity.load_points() if (p.config, p.input_len, p.concurrency) == ("kv-fp8", 512, 256)]
    assert kv256 and 11813.0 in [round(r) for r in kv256[0].runs]
