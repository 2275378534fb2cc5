"""On the GPU host: Shiftlight's trial client beside ``vllm bench serve`` on one running server, the same plan.

    PYTHONPATH=/root/site:. python3 scripts/gpu/loadgen_pair.py --port 8101 --model-dir DIR --out loadgen.jsonl

For each concurrency (64 and 256 by default): one seeded closed-loop plan of 4 x C requests (``plan_requests``);
``--shape fixed`` gives every request 512 prompt / 512 output tokens, ``--shape varied`` draws both lengths from
a log-normal of mean 512 and cv 0.5, capped at 1,000 (inside ``vllm bench serve``'s ShareGPT filter), as observed
traffic varies. Prompts are the plan's token ids as words of the word-level tokenizer (``t<id>``), which encode back
to exactly those ids, so both tools send the same texts. ``vllm bench serve``
gets them as a ShareGPT file (``--disable-shuffle``, ``--ignore-eos``; in-process, as ``measure.py --inproc``);
ours runs in its worker process (``replay_in_worker``), as trials run it. Both ask for the same sampling:
``--temperature`` (default 0, greedy, as trials send it) goes to our client's settings and to ``vllm bench serve``,
which sends no temperature unless told (the server's default then applies: 1.0 for a model directory whose
``generation_config.json`` sets none, a different sampler from ours). Order per concurrency: bench, ours, ours,
bench (so a linear drift cancels in the geometric means), each run with its own seed; ``--runs C:ORDER`` sets
another order for concurrency C. Before a concurrency's measured runs, one round of C requests from our client
warms the server at that concurrency (recorded as ``warmup``). One JSON line per run, with each request's start,
TTFT and end-to-end latency (``per_request``; the bench's from ``--save-detailed``), so two runs' TTFT
distributions can be compared request by request, not only by their medians.

Each run also records what the server's engine held meanwhile (``engine``: ``vllm:num_requests_running`` and
``vllm:num_requests_waiting`` from ``/metrics`` every half second, by a thread of this process) and, for the bench,
this process's CPU time over the run (``client_cpu_s``: the whole command, loading the tokenizer and reading the
dataset included; ours is the worker's own, in ``adherence``). ``--api-servers`` says how many API server processes
the server runs (``vllm serve --api-server-count``); it is recorded, and the report compares runs per count.

    python3 scripts/gpu/loadgen_pair.py --report loadgen.jsonl     # the comparison, per shape and concurrency
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import resource
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controller.domain.traffic import LengthDistribution, TrafficShape  # noqa: E402
from controller.errors import MetricsUnavailable  # noqa: E402
from controller.trials.loadgen.plan import LoadPlan, plan_requests  # noqa: E402
from controller.trials.loadgen.process import replay_in_worker  # noqa: E402
from controller.trials.loadgen.worker import WorkerSettings  # noqa: E402
from controller.trials.verdict.metrics_delta import MetricsSnapshot, scrape  # noqa: E402
from controller.trials.loadgen.vllm_bench import sharegpt_valid, write_sharegpt_dataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import bench_inproc  # noqa: E402

SERVED = "m"


SHAPES = {
    "fixed": LengthDistribution(mean=512, cv=0.0, maximum=512),
    # at most 1,000 + 1,000 tokens: inside the ShareGPT filter (prompt <= 1,024, total <= 2,048)
    "varied": LengthDistribution(mean=512, cv=0.5, maximum=1000),
}


def make_plan(
    conc: int, seed: int, vocab: int, shape_name: str = "fixed", rounds: int = 4
) -> tuple[LoadPlan, list[str]]:
    """A closed-loop plan of ``rounds`` x ``conc`` requests of ``shape_name``, and each request's prompt text. The
    lengths depend on ``conc`` and the shape only, so every run at a concurrency asks for the same work; the
    prompts' token ids depend on ``seed``, so no run's prompts hit the prefix cache of another's."""
    length = SHAPES[shape_name]
    shape = TrafficShape(arrival_rate_rps=0, concurrency=conc, prompt_tokens=length, output_tokens=length)
    lengths = plan_requests(shape, num_requests=rounds * conc, seed=conc, token_id_range=(3, vocab), max_model_len=4096)
    invalid = [r.index for r in lengths.requests if not sharegpt_valid(r.prompt_tokens, r.max_tokens)]
    if invalid:  # the bench would skip them and the two tools would not send the same plan
        raise ValueError(f"requests {invalid[:5]} fall outside vllm bench's ShareGPT filter")
    rng = np.random.default_rng(seed)
    reqs = []
    texts = []
    for r in lengths.requests:
        ids = tuple(int(x) for x in rng.integers(3, vocab, r.prompt_tokens))
        text = " ".join(f"t{i}" for i in ids)
        reqs.append(dataclasses.replace(r, prompt_token_ids=ids, prompt_text=text))
        texts.append(text)
    return dataclasses.replace(lengths, requests=tuple(reqs), seed=seed), texts


def bench_command(
    port: int, model_dir: str, plan: LoadPlan, dataset: Path, conc: int, tmp: Path, name: str, temperature: float
) -> list[str]:
    """The ``vllm bench serve`` command for ``plan`` (its ShareGPT file ``dataset``), with our client's sampling."""
    return [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai",
        "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions", "--model", SERVED,
        "--tokenizer", model_dir, "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--num-prompts", str(len(plan.requests)), "--max-concurrency", str(conc), "--request-rate", "inf",
        "--ignore-eos", "--temperature", f"{temperature:g}", "--seed", str(plan.seed), "--save-result",
        "--save-detailed", "--result-dir", str(tmp), "--result-filename", name,
    ]  # fmt: skip


def worker_settings(port: int, temperature: float) -> WorkerSettings:
    """Our client's settings for the server on ``port``."""
    return WorkerSettings(base_url=f"http://127.0.0.1:{port}", model=SERVED, temperature=temperature)


def run_bench(
    port: int, model_dir: str, plan: LoadPlan, texts: list[str], conc: int, tmp: Path, temperature: float = 0.0
) -> dict[str, object]:
    ds = tmp / f"sharegpt-{plan.seed}.json"
    # answers of max_tokens words of the vocabulary, so the bench's ShareGPT filter and output length see
    # exactly the planned lengths (the default placeholder is one unknown word to this tokenizer)
    write_sharegpt_dataset(plan, ds, prompt_texts=texts, output_token=" t5")
    name = f"pair-bench-{plan.seed}-{time.monotonic_ns()}.json"
    cmd = bench_command(port, model_dir, plan, ds, conc, tmp, name, temperature)
    t0, cpu0 = time.monotonic(), _cpu_s()
    rc = bench_inproc(cmd)  # the CLI's parser and main, in this process (measure.py)
    wall, cpu = time.monotonic() - t0, _cpu_s() - cpu0
    try:
        r = json.loads((tmp / name).read_text())
    except (OSError, ValueError):
        return {"tool": "vllm-bench", "cmd": shlex.join(cmd), "rc": rc}
    return {
        "tool": "vllm-bench", "cmd": shlex.join(cmd), "wall_s": wall, "completed": r.get("completed"),
        "output_throughput": r.get("output_throughput"), "median_ttft_ms": r.get("median_ttft_ms"),
        "median_tpot_ms": r.get("median_tpot_ms"), "total_output_tokens": r.get("total_output_tokens"),
        "duration": r.get("duration"), "per_request": bench_per_request(r), "client_cpu_s": round(cpu, 2),
    }  # fmt: skip


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"


def engine_queue(snapshot: MetricsSnapshot) -> tuple[float, float] | None:
    """The requests the engine runs and the requests waiting in its queue (each summed over engines), or ``None``
    when ``/metrics`` lacks either or either is not a finite number."""
    running, waiting = snapshot.gauges.get(RUNNING), snapshot.gauges.get(WAITING)
    if running is None or waiting is None or not (math.isfinite(running) and math.isfinite(waiting)):
        return None
    return running, waiting


class EngineQueue:
    """While a run lasts, a thread reads the server's ``/metrics`` every ``interval_s``: the requests its engine
    runs and the requests waiting in its queue. Requests the client holds beyond both are in the API server."""

    def __init__(self, port: int, interval_s: float = 0.5) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.interval_s = interval_s
        self.running: list[float] = []
        self.waiting: list[float] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> EngineQueue:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                queue = engine_queue(scrape(self.base_url, timeout_s=2))
            except MetricsUnavailable:
                queue = None
            if queue is None:
                self.failed += 1
                continue
            self.running.append(queue[0])
            self.waiting.append(queue[1])

    def summary(self) -> dict[str, object]:
        """Percentiles of the samples (none when no sample was read), and how many reads failed."""

        def pct(values: list[float]) -> dict[str, float] | None:
            if not values:
                return None
            q = np.percentile(values, [10, 50, 90])
            return {"p10": float(q[0]), "p50": float(q[1]), "p90": float(q[2]), "max": max(values)}

        return {"samples": len(self.running), "failed_reads": self.failed, "running": pct(self.running),
                "waiting": pct(self.waiting)}  # fmt: skip


def _ms(values: list[float]) -> list[float]:
    return [round(v * 1000, 2) for v in values]


def bench_per_request(result: dict[str, object]) -> dict[str, list[float]] | None:
    """Each request's start (s from the first), TTFT and end-to-end latency (ms) from a ``--save-detailed``
    result; end-to-end is the TTFT plus the gaps between chunks, as the bench's own latency."""
    starts, ttfts, itls = (result.get(k) for k in ("start_times", "ttfts", "itls"))
    if not (isinstance(starts, list) and isinstance(ttfts, list) and isinstance(itls, list)) or not starts:
        return None
    first = min(float(x) for x in starts)
    return {
        "start_s": [round(float(x) - first, 4) for x in starts],
        "ttft_ms": _ms([float(t or 0.0) for t in ttfts]),
        "e2e_ms": _ms([float(t or 0.0) + sum(gaps or ()) for t, gaps in zip(ttfts, itls, strict=True)]),
    }


def run_ours(port: int, plan: LoadPlan, temperature: float = 0.0) -> dict[str, object]:
    t0 = time.monotonic()
    report = replay_in_worker(plan, worker_settings(port, temperature))
    s = report.summary()
    return {
        "tool": "shiftlight", "wall_s": time.monotonic() - t0, "completed": s.completed, "failed": s.failed,
        "output_throughput": s.output_tokens_per_s, "median_ttft_ms": s.ttft_s.p50 * 1000 if s.ttft_s else None,
        "median_tpot_ms": s.tpot_s.p50 * 1000 if s.tpot_s else None, "total_output_tokens": s.output_tokens,
        "duration": s.duration_s, "max_in_flight": s.max_in_flight,
        "per_request": {
            "start_s": [round(r.start_s or 0.0, 4) for r in report.records],
            "ttft_ms": _ms([r.ttft_s or 0.0 for r in report.records]),
            "e2e_ms": _ms([r.e2e_s or 0.0 for r in report.records]),
        },
        # the client's own side (CPU time, event-loop stalls, in-flight): whether the client kept up
        "adherence": json.loads(json.dumps(dataclasses.asdict(report.adherence), default=lambda o: o.model_dump()))
        if report.adherence is not None else None,
    }  # fmt: skip


def compare(records: list[dict[str, object]]) -> list[str]:
    """One line per (shape, concurrency) of measured runs: each tool's geometric mean over its runs of output
    tok/s and of TTFT p50, and ours over the bench's; runs against a server of more than one API server process
    (``api_servers``) are compared apart, named so. The runs alternate (bench, ours, ours, bench), so a drift of
    the server over the runs that is linear in time cancels in the geometric means."""
    groups: dict[tuple[str, int, int], dict[str, list[tuple[float, float]]]] = {}
    for rec in records:
        tput, ttft = rec.get("output_throughput"), rec.get("median_ttft_ms")
        if rec.get("kind", "measured") != "measured" or not isinstance(tput, float) or not isinstance(ttft, float):
            continue
        key = (str(rec.get("shape", "fixed")), int(str(rec["concurrency"])), int(str(rec.get("api_servers", 1))))
        groups.setdefault(key, {}).setdefault(str(rec["tool"]), []).append((tput, ttft))
    lines = []
    for (shape, conc, servers), tools in sorted(groups.items()):
        ours, bench = tools.get("shiftlight", []), tools.get("vllm-bench", [])
        if not ours or not bench:
            continue
        t_o, t_b = statistics.geometric_mean([t for t, _ in ours]), statistics.geometric_mean([t for t, _ in bench])
        f_o, f_b = statistics.geometric_mean([f for _, f in ours]), statistics.geometric_mean([f for _, f in bench])
        where = f" ({servers} API servers)" if servers != 1 else ""
        lines.append(
            f"pair {shape} c{conc}{where}: throughput ours {t_o:.0f} bench {t_b:.0f} tok/s"
            f" ({(t_o / t_b - 1) * 100:+.1f}%),"
            f" ttft p50 ours {f_o:.0f} bench {f_b:.0f} ms ({(f_o / f_b - 1) * 100:+.1f}%),"
            f" runs ours {len(ours)} bench {len(bench)}"
        )
    return lines


def run_lines(records: list[dict[str, object]]) -> list[str]:
    """One line per measured run that recorded the engine's queue: the tool, its figures, the client's CPU time and
    the requests the engine ran (p10 / p50 / p90), against the concurrency the client held."""
    lines = []
    for rec in records:
        engine = rec.get("engine")
        if rec.get("kind") != "measured" or not isinstance(engine, dict):
            continue
        running = engine.get("running")
        held = "-" if not isinstance(running, dict) else "/".join(f"{running[k]:.0f}" for k in ("p10", "p50", "p90"))
        adherence = rec.get("adherence")
        cpu = rec.get("client_cpu_s") if rec["tool"] == "vllm-bench" else None
        if cpu is None and isinstance(adherence, dict):
            cpu = adherence.get("client_cpu_s")
        cpu_s = "-" if cpu is None else f"{float(str(cpu)):.1f}"
        tput, ttft = float(str(rec.get("output_throughput"))), float(str(rec.get("median_ttft_ms")))
        lines.append(
            f"run {rec.get('shape')} c{rec.get('concurrency')} ({rec.get('api_servers', 1)} API servers)"
            f" #{rec.get('run')} {rec['tool']}: out {tput:.0f} tok/s, ttft p50 {ttft:.0f} ms, client cpu {cpu_s} s,"
            f" engine running p10/p50/p90 {held}"
        )
    return lines


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--report":  # the comparison of a loadgen.jsonl already measured
        records = [json.loads(line) for line in Path(sys.argv[2]).read_text().splitlines()]
        print("\n".join(compare(records) + run_lines(records)))
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--temperature", type=float, default=0.0, help="sampling temperature, for both tools")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="fixed", help="the plan's lengths (see above)")
    ap.add_argument("--api-servers", type=int, default=1, help="the server's API server processes (recorded)")
    ap.add_argument(
        "--runs",
        nargs="*",
        default=[],
        metavar="C:ORDER",
        help="the tools' order at concurrency C, e.g. 256:bench,ours,ours,bench (default that order)",
    )
    args = ap.parse_args()
    orders = parse_orders(args.runs)
    t_end = time.monotonic() + args.budget_s
    tmp = Path("/tmp/loadgen-pair")
    tmp.mkdir(exist_ok=True)
    with open(args.out, "a") as out:
        for conc in args.concurrency:
            warm = run_tool("ours", args.port, args.model_dir, conc, 900 + conc, args.vocab, tmp, args.temperature,
                            shape_name=args.shape, rounds=1)  # fmt: skip
            record(out, warm, f"pair {args.shape} c{conc} warm-up", concurrency=conc, run=-1, kind="warmup",
                   shape=args.shape, api_servers=args.api_servers)  # fmt: skip
            for i, tool in enumerate(orders.get(conc, DEFAULT_ORDER)):
                if time.monotonic() > t_end:
                    print(f"loadgen pair: budget spent before c{conc} run {i}", flush=True)
                    return 0
                seed = 1000 + 10 * conc + i + (500 if args.shape == "varied" else 0)
                rec = run_tool(tool, args.port, args.model_dir, conc, seed, args.vocab, tmp, args.temperature,
                               shape_name=args.shape)  # fmt: skip
                record(out, rec, f"pair {args.shape} c{conc} run {i}", concurrency=conc, run=i, kind="measured",
                       shape=args.shape, api_servers=args.api_servers)  # fmt: skip
    return 0


DEFAULT_ORDER = ("bench", "ours", "ours", "bench")


def parse_orders(items: list[str]) -> dict[int, tuple[str, ...]]:
    """``["256:bench,ours"]`` -> ``{256: ("bench", "ours")}``; each tool must be ``bench`` or ``ours``."""
    orders: dict[int, tuple[str, ...]] = {}
    for item in items:
        conc, _, order = item.partition(":")
        tools = tuple(order.split(","))
        if not conc.isdigit() or not order or any(t not in ("bench", "ours") for t in tools):
            raise SystemExit(f"--runs {item!r}: expected C:ORDER with ORDER of bench and ours, e.g. 256:bench,ours")
        orders[int(conc)] = tools
    return orders


def run_tool(
    tool: str,
    port: int,
    model_dir: str,
    conc: int,
    seed: int,
    vocab: int,
    tmp: Path,
    temperature: float = 0.0,
    *,
    shape_name: str = "fixed",
    rounds: int = 4,
) -> dict[str, object]:
    """One run of ``bench`` (vllm bench serve) or ``ours`` on its own seeded plan, both sampling at ``temperature``,
    with the engine's queue sampled meanwhile (``engine``); a failure is recorded, not raised."""
    try:
        plan, texts = make_plan(conc, seed, vocab, shape_name, rounds)
        with EngineQueue(port) as engine:
            if tool == "bench":
                rec = run_bench(port, model_dir, plan, texts, conc, tmp, temperature)
            else:
                rec = run_ours(port, plan, temperature)
        rec["engine"] = engine.summary()
    except Exception as exc:
        rec = {"tool": tool, "error": repr(exc)[:2000]}
    rec["seed"] = seed
    rec["temperature"] = temperature
    return rec


def record(out: TextIO, rec: dict[str, object], label: str, extra: str = "", **fields: object) -> None:
    """Append ``rec`` (with ``fields``; lengths of mean 512/512) as one JSON line and print its figures."""
    rec.update(fields, input_len=512, output_len=512)
    out.write(json.dumps(rec) + "\n")
    out.flush()
    print(
        f"{label} {rec['tool']}: out {rec.get('output_throughput')} tok/s,"
        f" ttft p50 {rec.get('median_ttft_ms')} ms{extra}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
