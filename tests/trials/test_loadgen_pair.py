"""The GPU host's pair script (``scripts/gpu/loadgen_pair.py``): our client and ``vllm bench serve`` send the same
requests, sampling included (``vllm bench serve`` sends no temperature unless told, and the server's default then
samples where our trials decode greedily)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from controller.trials.loadgen_client import LoadGenerator

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "loadgen_pair.py"


@pytest.fixture(scope="module")
def pair() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loadgen_pair_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_both_tools_ask_for_the_same_temperature(pair: ModuleType, temperature: float) -> None:
    plan, _ = pair.make_plan(4, 1, 4000)
    cmd = pair.bench_command(8101, "/models/m", plan, Path("ds.json"), 4, Path("out"), "r.json", temperature)
    assert cmd.count("--temperature") == 1
    assert float(cmd[cmd.index("--temperature") + 1]) == temperature

    settings = pair.worker_settings(8101, temperature)
    ours = LoadGenerator(settings.base_url, settings.model, temperature=settings.temperature)
    assert json.loads(ours._payload(plan.requests[0]))["temperature"] == temperature


def test_the_default_is_greedy_for_both(pair: ModuleType) -> None:
    plan, _ = pair.make_plan(4, 1, 4000)
    cmd = pair.bench_command(8101, "/models/m", plan, Path("ds.json"), 4, Path("out"), "r.json", 0.0)
    assert float(cmd[cmd.index("--temperature") + 1]) == 0.0
    assert pair.worker_settings(8101, 0.0).temperature == 0.0
    assert pair.run_tool.__defaults__ == (0.0,)  # warmup_gpu.py's pair runs get the trials' greedy sampling too


@pytest.mark.parametrize("shape", ["fixed", "varied"])
@pytest.mark.parametrize("conc", [64, 256])
def test_every_run_at_a_concurrency_asks_for_the_same_work_with_other_prompts(
    pair: ModuleType, shape: str, conc: int
) -> None:
    first, texts = pair.make_plan(conc, 1001, 128256, shape)
    second, _ = pair.make_plan(conc, 1002, 128256, shape)
    assert len(first.requests) == 4 * conc
    lengths = [(r.prompt_tokens, r.max_tokens) for r in first.requests]
    assert lengths == [(r.prompt_tokens, r.max_tokens) for r in second.requests]
    assert all(a.prompt_token_ids != b.prompt_token_ids for a, b in zip(first.requests, second.requests, strict=True))
    assert (first.seed, second.seed) == (1001, 1002)
    # the text each tool sends is the plan's ids as words of the word-level tokenizer, one word per id
    assert texts[0].split() == [f"t{i}" for i in first.requests[0].prompt_token_ids]
    prompts = {p for p, _ in lengths}
    outputs = {o for _, o in lengths}
    if shape == "fixed":
        assert prompts == outputs == {512}
    else:
        assert len(prompts) > conc and len(outputs) > conc  # lengths vary request by request
        assert max(prompts) <= 1000 and max(outputs) <= 1000 and min(prompts) >= 4 and min(outputs) >= 4


def test_a_plan_the_bench_would_filter_is_refused(pair: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from controller.domain.traffic import LengthDistribution

    monkeypatch.setitem(pair.SHAPES, "too-long", LengthDistribution(mean=1500, cv=0.0))
    with pytest.raises(ValueError, match="ShareGPT filter"):
        pair.make_plan(4, 1, 4000, "too-long")


def test_the_bench_per_request_figures_come_from_its_detailed_result(pair: ModuleType) -> None:
    result = {"start_times": [10.5, 10.0], "ttfts": [0.25, 0.5], "itls": [[0.01, 0.02], [0.03]]}
    assert pair.bench_per_request(result) == {
        "start_s": [0.5, 0.0],
        "ttft_ms": [250.0, 500.0],
        "e2e_ms": [280.0, 530.0],
    }
    assert pair.bench_per_request({"ttfts": [0.1]}) is None  # a result saved without --save-detailed


def test_the_bench_is_asked_for_its_per_request_detail(pair: ModuleType) -> None:
    plan, _ = pair.make_plan(4, 1, 4000)
    assert "--save-detailed" in pair.bench_command(8101, "/m", plan, Path("d"), 4, Path("o"), "r.json", 0.0)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([], {}),
        (["256:bench,ours,ours,bench"], {256: ("bench", "ours", "ours", "bench")}),
        (["64:bench,ours", "256:ours"], {64: ("bench", "ours"), 256: ("ours",)}),
    ],
)
def test_the_order_of_the_tools_per_concurrency(pair: ModuleType, items: list[str], expected: object) -> None:
    assert pair.parse_orders(items) == expected


@pytest.mark.parametrize("item", ["256", "x:bench", "256:bench,curl", "256:"])
def test_a_bad_order_is_refused_naming_it(pair: ModuleType, item: str) -> None:
    with pytest.raises(SystemExit, match="--runs"):
        pair.parse_orders([item])


def test_each_pair_group_has_its_own_server_name(pair: ModuleType) -> None:
    """A config's done-marker is its name: a second pair group under the first's name would be skipped."""
    measure = sys.modules["measure"]
    groups = {g.name: g for g in measure.GROUPS}
    fixed, varied = groups["pair-fixed"], groups["pair-varied"]
    assert fixed.pair != varied.pair
    assert {fixed.pair, varied.pair} <= set(measure.CONFIGS)
    assert measure.CONFIGS[fixed.pair] == measure.CONFIGS[varied.pair] == []  # both stock
    shapes = [g.pair_args[g.pair_args.index("--shape") + 1] for g in (fixed, varied)]
    assert shapes == ["fixed", "varied"]


def test_the_report_compares_geometric_means_per_shape_and_concurrency(pair: ModuleType) -> None:
    def run(tool: str, tput: float, ttft: float, **extra: object) -> dict[str, object]:
        return {"tool": tool, "output_throughput": tput, "median_ttft_ms": ttft, "concurrency": 256, **extra}

    records = [
        run("vllm-bench", 1000.0, 400.0, kind="measured", shape="varied"),
        run("shiftlight", 990.0, 420.0, kind="measured", shape="varied"),
        run("shiftlight", 1010.0, 210.0, kind="measured", shape="varied"),
        run("vllm-bench", 1000.0, 200.0, kind="measured", shape="varied"),
        run("shiftlight", 500.0, 9000.0, kind="warmup", shape="varied"),  # a warm-up round is not compared
        {"tool": "shiftlight", "error": "ConnectionRefusedError()", "concurrency": 256, "kind": "measured"},
        run("shiftlight", 800.0, 300.0),  # a record of an earlier run: no kind, no shape (fixed, measured)
    ]
    lines = pair.compare(records)
    assert len(lines) == 1  # the fixed plan has no bench run to compare with
    assert lines[0].startswith("pair varied c256: throughput ours 1000 bench 1000 tok/s (-0.0%)")
    assert "ttft p50 ours 297 bench 283 ms (+5.0%)" in lines[0]
    assert lines[0].endswith("runs ours 2 bench 2")
