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

from controller.trials.loadgen.client import LoadGenerator

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
    assert json.loads(ours.payload(plan.requests[0]))["temperature"] == temperature


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


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 180.0
vllm:num_requests_running_total_something 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (METRICS, (180.0, 3.0)),  # a longer name that starts alike is another metric
        (
            METRICS.replace(" 180.0\n", ' 180.0\nvllm:num_requests_running{engine="1",model_name="m"} 20.0\n'),
            (200.0, 3.0),
        ),
        (METRICS.replace('{engine="0",model_name="m"}', ""), (180.0, 3.0)),  # no labels
        (METRICS.replace("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"), None),  # one of the two absent
        (METRICS.replace("180.0", "NaN"), None),
        (METRICS.replace("3.0", "+Inf"), None),
    ],
)
def test_the_engine_queue_reads_both_gauges_only_when_each_is_a_number(
    pair: ModuleType, text: str, expected: tuple[float, float] | None
) -> None:
    from controller.trials.verdict.metrics_delta import parse_metrics

    assert pair.engine_queue(parse_metrics(text)) == expected


def test_the_engine_queue_samples_a_server_while_a_run_lasts(pair: ModuleType) -> None:
    import http.server
    import threading
    import time

    answers = iter(
        [METRICS, "vllm:num_requests_running{", METRICS.replace("180.0", "NaN")]
        + [METRICS.replace("180.0", "60.0")] * 1000
    )

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = next(answers).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pair.EngineQueue(server.server_address[1], interval_s=0.02) as queue:
            deadline = time.monotonic() + 10
            while len(queue.running) < 4 and time.monotonic() < deadline:
                time.sleep(0.02)
        summary = queue.summary()
    finally:
        server.shutdown()
        server.server_close()
    assert queue.running[:2] == [180.0, 60.0]  # an unparseable answer and the NaN sample are not samples
    assert summary["failed_reads"] == 2
    assert summary["samples"] == len(queue.running) >= 4
    assert summary["running"]["max"] == 180.0 and summary["running"]["p50"] == 60.0
    assert summary["waiting"]["p50"] == 3.0


def test_nothing_sampled_is_no_figure(pair: ModuleType) -> None:
    queue = pair.EngineQueue(9, interval_s=0.01)  # never started
    assert queue.summary() == {"samples": 0, "failed_reads": 0, "running": None, "waiting": None}


def test_runs_against_more_api_servers_are_compared_apart(pair: ModuleType) -> None:
    def run(tool: str, tput: float, ttft: float, servers: int | None) -> dict[str, object]:
        rec: dict[str, object] = {"tool": tool, "output_throughput": tput, "median_ttft_ms": ttft,
                                  "concurrency": 256, "kind": "measured", "shape": "varied"}  # fmt: skip
        if servers is not None:
            rec["api_servers"] = servers
        return rec

    lines = pair.compare(
        [run("vllm-bench", 1000.0, 400.0, None), run("shiftlight", 1000.0, 800.0, 1),
         run("vllm-bench", 2000.0, 100.0, 4), run("shiftlight", 1980.0, 104.0, 4)]
    )  # fmt: skip
    assert lines[0].startswith("pair varied c256: throughput ours 1000 bench 1000") and "(+100.0%)" in lines[0]
    assert lines[1].startswith("pair varied c256 (4 API servers): throughput ours 1980 bench 2000 tok/s (-1.0%)")
    assert "(+4.0%)" in lines[1]


def test_each_run_line_gives_the_clients_cpu_and_the_engines_queue(pair: ModuleType) -> None:
    engine = {"samples": 9, "failed_reads": 0, "running": {"p10": 139.0, "p50": 180.4, "p90": 250.0, "max": 256.0}}
    records = [
        {"tool": "vllm-bench", "output_throughput": 1000.0, "median_ttft_ms": 400.0, "concurrency": 256,
         "kind": "measured", "shape": "varied", "run": 0, "api_servers": 4, "client_cpu_s": 30.04, "engine": engine},
        {"tool": "shiftlight", "output_throughput": 990.0, "median_ttft_ms": 420.0, "concurrency": 256,
         "kind": "measured", "shape": "varied", "run": 1, "api_servers": 4, "adherence": {"client_cpu_s": 21.5},
         "engine": {**engine, "running": None}},
        {"tool": "shiftlight", "output_throughput": 990.0, "median_ttft_ms": 420.0, "concurrency": 256,
         "kind": "measured", "shape": "varied", "run": 2},  # an earlier round's record: no queue, no line
    ]  # fmt: skip
    assert pair.run_lines(records) == [
        "run varied c256 (4 API servers) #0 vllm-bench: out 1000 tok/s, ttft p50 400 ms, client cpu 30.0 s,"
        " engine running p10/p50/p90 139/180/250",
        "run varied c256 (4 API servers) #1 shiftlight: out 990 tok/s, ttft p50 420 ms, client cpu 21.5 s,"
        " engine running p10/p50/p90 -",
    ]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], 1), (["--api-server-count", "4"], 4), (["--max-num-seqs", "8", "--api-server-count=2"], 2)],
)
def test_the_pair_is_told_how_many_api_servers_its_server_runs(
    pair: ModuleType, flags: list[str], expected: int
) -> None:
    measure = sys.modules["measure"]
    assert measure.api_servers(flags) == expected
    groups = {g.name: g for g in measure.GROUPS}
    assert measure.api_servers(measure.CONFIGS[groups["pair-frontends"].pair]) == 4
    assert measure.api_servers(measure.CONFIGS[groups["pair-varied-both"].pair]) == 1
