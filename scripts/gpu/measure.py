"""Engine measurements on the GPU host: one ``vllm serve`` per config, ``vllm bench serve`` at many concurrencies.

    PYTHONPATH=/root/site python3 scripts/gpu/measure.py --model-dir /root/models/llama-3.1-8b \
        --out $OUT --budget-s 560

Per server: start it (``--load-format dummy``), wait for ``/health``; per shape, one warm-up run at the shape's
highest concurrency (recorded, marked ``warmup``), then for each concurrency ``--runs`` measured runs of
``4 x concurrency`` requests (at least 4), each with its own seed (so no run's prompts hit the prefix cache of
another's). Every run's ``--save-result`` JSON is appended to ``results.jsonl`` with the exact server and bench
commands, the server's start-up time and the run's wall time; the server logs go to ``logs.tar.gz``. A server is
skipped when the budget left cannot hold its estimated time; the next call runs it. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

SERVED = "m"
#: Set for every server (host-run.sh exports them): the FlashInfer top-k/top-p sampler is off because the
#: wheelhouse carries no flashinfer (the benches sample greedily, which never uses that sampler).
SERVER_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
LONG = (2048, 64)
SHORT = (512, 512)

#: name -> extra ``vllm serve`` flags.
CONFIGS: dict[str, list[str]] = {
    "stock": [],
    "stock-pair": [],  # stock again, only for our trial client beside vllm bench (loadgen_pair.py)
    "stock-pair-varied": [],  # the same, for the plan with varied lengths (its own name: its own done-marker)
    "stock-pair-varied-64": [],
    "stock-pair-varied-2": [],
    "stock-pair-fixed-2": [],
    "stock-pair-varied-3": [],
    # stock with four API server processes in front of the one engine: at 256 streams one API server held 50-120
    # of the client's requests outside the engine (run10), and the TTFT median moved 2-4x between runs of one tool
    "stock-pair-fe4": ["--api-server-count", "4"],
    "stock-pair-fe4-2": ["--api-server-count", "4"],
    "stock-pair-fe4-fixed": ["--api-server-count", "4"],
    "kv-fp8": ["--kv-cache-dtype", "fp8"],
    "ngram4": ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 4,
                                                    "prompt_lookup_max": 4, "prompt_lookup_min": 2})],
    "ngram2": ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 2,
                                                    "prompt_lookup_max": 4, "prompt_lookup_min": 2})],
    "sync": ["--no-async-scheduling"],
    "mbt2048": ["--max-num-batched-tokens", "2048"],
    "mbt16384": ["--max-num-batched-tokens", "16384"],
    "seqs64": ["--max-num-seqs", "64"],
    "seqs256": ["--max-num-seqs", "256"],
    "perf-throughput": ["--performance-mode", "throughput"],
    "ngram-gpu4": ["--speculative-config", json.dumps({"method": "ngram_gpu", "num_speculative_tokens": 4,
                                                        "prompt_lookup_max": 4, "prompt_lookup_min": 2})],
    "cg64": ["--max-cudagraph-capture-size", "64"],
}  # fmt: skip

#: The configs in the order they run (most important first), each with its shapes and concurrencies. A call
#: runs the next ones not yet done (``--state-dir`` keeps what is done while the machine stays warm).
ORDER: list[tuple[str, dict[tuple[int, int], list[int]]]] = [
    ("stock", {SHORT: [1, 16, 64, 256], LONG: [16, 64]}),
    ("kv-fp8", {SHORT: [64, 256]}),
    ("ngram4", {SHORT: [1, 16]}),
    ("sync", {SHORT: [1]}),
    ("mbt2048", {SHORT: [256], LONG: [16, 64]}),
    ("mbt16384", {LONG: [16, 64]}),
    ("stock-pair", {}),
    ("ngram2", {SHORT: [1, 16]}),
    ("seqs64", {SHORT: [256]}),
    ("perf-throughput", {SHORT: [256]}),
]
SMOKE: list[tuple[str, dict[tuple[int, int], list[int]]]] = [("stock", {SHORT: [16]})]

GIB = 1 << 30
HYBRID_L8_DIR = "/root/models/qwen3.6-27b-l8"  # model_dir.py qwen3.6-27b-int4 DIR --layers 8 (host-run.sh)


@dataclass(frozen=True)
class Group:
    """Servers started together and measured one after the other (``--groups``). Each gets a fixed KV cache
    (``--kv-cache-memory-bytes``), so vLLM skips the memory profiling that another server's allocations would
    disturb, and a ``--gpu-memory-utilization`` low enough for the start-up check of free memory. Every config's
    KV cache holds its largest run (concurrency x (prompt + output) tokens), so the cache size does not bind;
    an idle server beside the measured one holds memory, not compute. ``pair``: after its runs, the config's
    server also serves ``loadgen_pair.py`` (our trial client beside ``vllm bench serve``, 512/512 at 64/256)."""

    name: str
    kv_gib: int
    utilization: float
    configs: tuple[tuple[str, dict[tuple[int, int], list[int]]], ...]
    pair: str = ""
    #: config -> ``warmup_gpu.py --order``: on that config's untouched server, a canary trial with the warm-up
    #: rule first, then these runs of ``vllm bench serve`` (bench) and our trial client (ours), 512/512 at 256
    warm: tuple[tuple[str, str], ...] = ()
    #: the group's model directory (``--layers``: a hybrid at real widths with fewer layers); default --model-dir
    model_dir: str = ""
    #: extra ``loadgen_pair.py`` arguments for the ``pair`` config (its shape, concurrencies and the tools' order)
    pair_args: tuple[str, ...] = ()


#: A Llama-3.1-8B KV cache takes 128 KiB per token in bf16: 16 GiB holds 131,072 tokens.
GROUPS: list[Group] = [
    Group("long-and-pair", 36, 0.3, (("stock", {LONG: [16, 64]}), ("kv-fp8", {LONG: [16, 64]})), pair="stock"),
    Group("speculation", 10, 0.2, (
        ("ngram4", {SHORT: [1, 16, 64]}),
        ("ngram-gpu4", {SHORT: [1, 16, 64]}),
        ("sync", {SHORT: [1, 16, 64]}),
        ("ngram2", {SHORT: [1]}),
    )),
    Group("batching", 20, 0.2, (
        ("mbt2048", {LONG: [16, 64]}),
        ("mbt16384", {LONG: [16, 64]}),
        ("seqs64", {SHORT: [128]}),
    )),
    # run5: a canary trial on two untouched servers (first-run and steady figures), and our client beside
    # vllm bench serve at 256 streams, more runs than run4's
    Group("warmup-and-pair", 36, 0.3, (("stock", {}), ("kv-fp8", {})),
          warm=(("stock", "bench,ours,ours,bench"), ("kv-fp8", "bench"))),
    Group("knobs", 20, 0.2, (
        ("ngram2", {SHORT: [1, 16, 64]}),
        ("perf-throughput", {SHORT: [64, 256]}),
        ("cg64", {SHORT: [256]}),
    )),
    # run6: the canary trial with the one-sided warm-up rule on two untouched servers, kv-fp8 first (run5 never
    # reached it), each followed by vllm bench serve: the first-run and steady figures of two configs
    Group("warm-two", 36, 0.3, (("kv-fp8", {}), ("stock", {})), warm=(("kv-fp8", "bench,bench"), ("stock", "bench,bench"))),
    # run6: our trial client beside vllm bench serve at 64 and 256 streams (loadgen_pair.py), on a server of its own
    Group("pair", 36, 0.3, (("stock-pair", {}),), pair="stock-pair"),
    # the hybrid Gated DeltaNet model with an MTP head at the profile's widths and 8 of its 64 layers (2 of them
    # full attention): five servers fit together; the model is evaluated at the same depth
    Group("hybrid", 8, 0.12, (
        ("hy-stock", {SHORT: [1, 16, 64]}),
        ("hy-mtp1", {SHORT: [1, 16, 64]}),
        ("hy-mtp3", {SHORT: [1, 16, 64]}),
        ("hy-mtp2", {SHORT: [1, 64]}),
        ("hy-ssm-fp16", {SHORT: [64]}),
    ), model_dir=HYBRID_L8_DIR),
    # run8: the pair again, with each request's TTFT from both tools (run7's 256-stream pair was one run each, and
    # the bench's median TTFT there, 798 ms, was less than half of run6's three bench runs, ~1,800 ms): 64 streams
    # first (they warm the server), then 256 streams twice each; the same plan again with varied lengths
    Group("pair-fixed", 36, 0.3, (("stock-pair", {}),), pair="stock-pair",
          pair_args=("--concurrency", "64", "256", "--shape", "fixed")),
    Group("pair-varied", 48, 0.4, (("stock-pair-varied", {}),), pair="stock-pair-varied",
          pair_args=("--concurrency", "64", "256", "--shape", "varied", "--runs", "64:bench,ours")),
    # next: the varied plan at 64 streams in the alternating order too (run8 had time for bench and ours once each)
    Group("pair-varied-64", 48, 0.4, (("stock-pair-varied-64", {}),), pair="stock-pair-varied-64",
          pair_args=("--concurrency", "64", "--shape", "varied")),
    # run9: the varied plan at 64 and 256 streams, each in the alternating order (bench, ours, ours, bench), on one
    # fresh server; then the fixed plan again on another fresh server (its 256-stream TTFT median moved with the
    # engine's prefill waves between servers and runs)
    Group("pair-varied-both", 48, 0.4, (("stock-pair-varied-2", {}),), pair="stock-pair-varied-2",
          pair_args=("--concurrency", "64", "256", "--shape", "varied")),
    Group("pair-fixed-again", 36, 0.3, (("stock-pair-fixed-2", {}),), pair="stock-pair-fixed-2",
          pair_args=("--concurrency", "64", "256", "--shape", "fixed")),
    # run10: the varied plan at 256 streams only, eight alternating runs on a fresh server (run8's and run9's two
    # runs per tool there spread 155-605 ms in TTFT median for either tool)
    Group("pair-varied-256x8", 48, 0.4, (("stock-pair-varied-3", {}),), pair="stock-pair-varied-3",
          pair_args=("--concurrency", "256", "--shape", "varied",
                     "--runs", "256:bench,ours,ours,bench,bench,ours,ours,bench")),
    # run11: the pair on a server whose front end is not the bottleneck (four API servers, one engine): the varied
    # plan at 256 streams, then 64, alternating; pair-frontends-again repeats 256 on another fresh server
    Group("pair-frontends", 48, 0.4, (("stock-pair-fe4", {}),), pair="stock-pair-fe4",
          pair_args=("--concurrency", "256", "64", "--shape", "varied",
                     "--runs", "256:bench,ours,ours,bench", "64:bench,ours,ours,bench")),
    Group("pair-frontends-again", 48, 0.4, (("stock-pair-fe4-2", {}),), pair="stock-pair-fe4-2",
          pair_args=("--concurrency", "256", "--shape", "varied",
                     "--runs", "256:bench,ours,ours,bench,bench,ours,ours,bench")),
    Group("pair-frontends-fixed", 36, 0.3, (("stock-pair-fe4-fixed", {}),), pair="stock-pair-fe4-fixed",
          pair_args=("--concurrency", "256", "--shape", "fixed", "--runs", "256:bench,ours,ours,bench")),
    # run8: what run6's call had no time left for (MTP k=2, the fp16 SSM state), with the stock hybrid again on
    # the same machine as the reference they are compared with
    Group("hybrid-rest", 8, 0.12, (
        ("hy-stock", {SHORT: [16, 64]}),
        ("hy-mtp2", {SHORT: [1, 16, 64]}),
        ("hy-ssm-fp16", {SHORT: [16, 64]}),
    ), model_dir=HYBRID_L8_DIR),
]  # fmt: skip

#: ``--hybrid``: the hybrid Gated DeltaNet / attention model with an MTP head (``model_dir.py qwen3.6-27b-int4``).
#: With dummy weights the drafts are almost never accepted, so the MTP runs measure the verification cost only;
#: acceptance is modelled separately. Not yet run on the GPU.
#: run5 showed what the hybrid needs on this host: vLLM 0.26 runs the Gated DeltaNet prefill with FlashInfer's
#: kernel on SM90 unless told otherwise (``Using FlashInfer GDN prefill kernel (requested=auto)``; no flashinfer in
#: the wheelhouse, so the first request killed the engine), and an MTP server checks at start-up that every
#: sequence slot has a Mamba cache block (``max_num_seqs (1024) exceeds available Mamba cache blocks (873)`` with
#: an 8 GiB cache): the Triton GDN prefill and 256 slots, which every run here fits.
MM_OFF = ["--limit-mm-per-prompt", json.dumps({"image": 0, "video": 0}), "--gdn-prefill-backend", "triton",
          "--max-num-seqs", "256"]  # fmt: skip
HYBRID_CONFIGS: dict[str, list[str]] = {
    "hy-stock": MM_OFF,
    "hy-mtp1": [*MM_OFF, "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1})],
    "hy-mtp2": [*MM_OFF, "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 2})],
    "hy-mtp3": [*MM_OFF, "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 3})],
    "hy-ssm-fp16": [*MM_OFF, "--mamba-ssm-cache-dtype", "float16"],
}
HYBRID_ORDER: list[tuple[str, dict[tuple[int, int], list[int]]]] = [
    ("hy-stock", {SHORT: [1, 16, 64]}),
    ("hy-mtp1", {SHORT: [1, 16, 64]}),
    ("hy-mtp3", {SHORT: [1, 16, 64]}),
    ("hy-ssm-fp16", {SHORT: [16, 64]}),
    ("hy-mtp2", {SHORT: [1, 16]}),
]
CONFIGS.update(HYBRID_CONFIGS)


def est_run_s(shape: tuple[int, int], conc: int, n: int = 0) -> float:
    """A rough guess of one run's seconds on an H200 with an 8B model (for the budget check only)."""
    n = n or max(4, 4 * conc)
    out_tok_s = {1: 190, 16: 2600, 64: 7500, 256: 15000, 512: 17000}.get(conc, 8000)
    if shape == LONG:
        return 2 + n * shape[0] / 35000 + n * shape[1] / out_tok_s
    return 2 + n * shape[1] / out_tok_s


def api_servers(flags: list[str]) -> int:
    """How many API server processes ``vllm serve`` runs with ``flags`` (``--api-server-count``, default 1)."""
    for i, flag in enumerate(flags):
        if flag == "--api-server-count" and i + 1 < len(flags):
            return int(flags[i + 1])
        if flag.startswith("--api-server-count="):
            return int(flag.split("=", 1)[1])
    return 1


def server_cmd(model_dir: str, port: int, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_dir, "--load-format", "dummy",
        "--served-model-name", SERVED, "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "4096",
        *extra,
    ]  # fmt: skip


def bench_cmd(model_dir: str, port: int, shape: tuple[int, int], conc: int, n: int, seed: int, rdir: str,
              fname: str) -> list[str]:  # fmt: skip
    return [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai",
        "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions", "--model", SERVED,
        "--tokenizer", model_dir, "--dataset-name", "random", "--random-input-len", str(shape[0]),
        "--random-output-len", str(shape[1]), "--random-range-ratio", "0", "--num-prompts", str(n),
        "--max-concurrency", str(conc), "--request-rate", "inf", "--ignore-eos", "--seed", str(seed),
        "--ready-check-timeout-sec", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", rdir, "--result-filename", fname,
    ]  # fmt: skip


def bench_inproc(cmd: list[str]) -> int:
    """Run one ``vllm bench serve`` command (``cmd`` as the CLI would take it) in this process: the same argument
    parser and ``main`` as the CLI, without a fresh interpreter's ~25 s of imports per run."""
    from vllm.benchmarks.serve import add_cli_args  # type: ignore[import-not-found]
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(cmd[cmd.index("serve") + 1 :])
    try:
        bench_main(args)
    except Exception as exc:  # a failed run is recorded (its result file is missing), not fatal
        print(f"bench failed: {exc!r}", flush=True)
        return 1
    return 0


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=20)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def collect(state: Path, out: Path) -> None:
    """Copy what is measured so far (all calls) into ``out``: results.jsonl, loadgen.jsonl, warmup*.jsonl,
    summary.txt and the
    server logs as logs.tar.gz (the device tool brings back at most 8 files)."""
    for name in ("results.jsonl", "loadgen.jsonl", "warmup.jsonl", "warmup-servers.jsonl", "summary.txt"):
        if (state / name).exists():
            (out / name).write_bytes((state / name).read_bytes())
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for p in sorted((state / "logs").glob("*.log")):
            tar.add(p, arcname=p.name)


class Driver:
    """Starts servers, runs the benches, appends the records; shared by the per-config and the group modes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t_end = time.monotonic() + args.budget_s
        args.out.mkdir(parents=True, exist_ok=True)
        self.state: Path = args.state_dir
        self.logs = self.state / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.rdir = self.state / "results"
        self.rdir.mkdir(exist_ok=True)
        self.results = open(self.state / "results.jsonl", "a")  # noqa: SIM115
        self.port = 8100 + len(list(self.logs.glob("*.log")))
        self.seed = int(time.time()) % 100000
        self.summary: list[str] = []

    def left(self) -> float:
        return self.t_end - time.monotonic()

    def need_s(self, shapes: dict[tuple[int, int], list[int]]) -> float:
        a = self.args
        return a.est_scale * sum(
            est_run_s(s, max(cs), max(16, max(cs))) + a.runs * sum(est_run_s(s, c) for c in cs)
            for s, cs in shapes.items()
        )

    def start(self, name: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], list[str], int]:
        self.port += 1
        scmd = server_cmd(self.args.model_dir, self.port, [*CONFIGS[name], *extra])
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            scmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ, **SERVER_ENV)
        )
        return proc, scmd, self.port

    def wait_healthy(self, procs: dict[str, tuple[subprocess.Popen[bytes], list[str], int]]) -> dict[str, float]:
        """Seconds each server took to answer /health; a server that exits or is not up in 420 s is missing."""
        t0 = time.monotonic()
        up: dict[str, float] = {}
        pending = dict(procs)
        while pending and time.monotonic() - t0 < 420 and time.monotonic() < self.t_end:
            for name, (proc, _, port) in list(pending.items()):
                if healthy(port):
                    up[name] = time.monotonic() - t0
                    print(f"{name}: up in {up[name]:.0f} s", flush=True)
                    del pending[name]
                elif proc.poll() is not None:
                    print(f"{name}: server failed (rc {proc.poll()}) after {time.monotonic() - t0:.0f} s", flush=True)
                    self.summary.append(f"{name}: server failed after {time.monotonic() - t0:.0f} s")
                    del pending[name]
            time.sleep(1)
        for name in pending:
            self.summary.append(f"{name}: not up after {time.monotonic() - t0:.0f} s")
        return up

    def measure(self, name: str, shapes: dict[tuple[int, int], list[int]], port: int, scmd: list[str],
                startup: float, group: str = "") -> None:  # fmt: skip
        a = self.args
        for shape, concs in shapes.items():
            plan = [("warmup", max(concs), 0)] + [("measured", c, i) for c in concs for i in range(a.runs)]
            for kind, conc, i in plan:
                if time.monotonic() > self.t_end - 5:
                    break
                n = max(4, 4 * conc) if kind == "measured" else max(16, conc)
                self.seed += 1
                fname = f"{name}-{shape[0]}x{shape[1]}-c{conc}-{kind}{i}.json"
                bcmd = bench_cmd(a.model_dir, port, shape, conc, n, self.seed, str(self.rdir), fname)
                tb = time.monotonic()
                rc = bench_inproc(bcmd) if a.inproc else subprocess.run(bcmd, timeout=max(30, self.left())).returncode
                wall = time.monotonic() - tb
                rec: dict[str, object] = {
                    "config": name, "flags": CONFIGS[name], "input_len": shape[0], "output_len": shape[1],
                    "concurrency": conc, "kind": kind, "run": i, "num_prompts": n, "seed": self.seed,
                    "server_env": SERVER_ENV, "server_cmd": shlex.join(scmd), "bench_cmd": shlex.join(bcmd),
                    "startup_s": round(startup, 1), "group": group,
                    "wall_s": round(wall, 2), "rc": rc, "bench_in_process": a.inproc,
                }  # fmt: skip
                try:
                    rec["result"] = json.loads((self.rdir / fname).read_text())
                except (OSError, ValueError):
                    rec["result"] = None
                self.results.write(json.dumps(rec) + "\n")
                self.results.flush()
                r = rec["result"] if isinstance(rec["result"], dict) else {}
                tput, ttft, tpot = (float(r.get(k) or "nan") for k in ("output_throughput", "median_ttft_ms",
                                                                        "median_tpot_ms"))  # fmt: skip
                line = (
                    f"{name:16s} {shape[0]}/{shape[1]} c{conc:<4d} {kind}{i} n={n:<5d} out {tput:8.1f} tok/s"
                    f" ttft p50 {ttft:8.1f} ms tpot p50 {tpot:6.2f} ms wall {wall:5.1f} s"
                )
                print(line, flush=True)
                self.summary.append(line)

    def pair(self, port: int, extra: tuple[str, ...] = ()) -> None:
        a = self.args
        lg = [sys.executable, str(Path(__file__).with_name("loadgen_pair.py")), "--port", str(port),
              "--model-dir", a.model_dir, "--out", str(self.state / "loadgen.jsonl"), "--budget-s",
              str(max(0.0, self.left() - 40)), *extra]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(Path.cwd())]))
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(lg, timeout=max(30, self.left()), env=env)

    def warm(self, name: str, port: int, scmd: list[str], startup: float, order: str) -> None:
        a = self.args
        wg = [sys.executable, str(Path(__file__).with_name("warmup_gpu.py")), "--port", str(port), "--config", name,
              "--model-dir", a.model_dir, "--out", str(self.state / "warmup.jsonl"), "--order", order,
              "--startup-s", f"{startup:.1f}", "--budget-s", str(max(0.0, self.left() - 60))]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(Path.cwd())]))
        with open(self.state / "warmup-servers.jsonl", "a") as f:
            f.write(json.dumps({"config": name, "server_cmd": shlex.join(scmd), "startup_s": round(startup, 1),
                                "server_env": SERVER_ENV, "warmup_cmd": shlex.join(wg)}) + "\n")  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(wg, timeout=max(30, self.left()), env=env)

    def finish(self) -> None:
        with open(self.state / "summary.txt", "a") as f:
            f.write("\n".join(self.summary) + "\n")
        collect(self.state, self.args.out)
        print("\n".join(self.summary))


PAIR_EST_S = 2 * est_run_s(SHORT, 64) + 2 * est_run_s(SHORT, 256) + 30


def run_groups(d: Driver, names: list[str]) -> None:
    for g in [g for g in GROUPS if g.name in names] if names else GROUPS:
        if (d.state / f"group-{g.name}.done").exists():
            continue
        todo = [(n, sh) for n, sh in g.configs if not (d.state / f"{n}.done").exists()]
        need = d.args.start_est_s + sum(d.need_s(sh) for _, sh in todo) + (PAIR_EST_S if g.pair else 0)
        if need > d.left():
            print(f"group {g.name}: needs ~{need:.0f} s, {d.left():.0f} s left; starting it anyway", flush=True)
        extra = ["--gpu-memory-utilization", f"{g.utilization:g}", "--kv-cache-memory-bytes", str(g.kv_gib * GIB)]
        if g.model_dir:
            d.args.model_dir = g.model_dir
        procs = {}
        for n, _ in todo:
            procs[n] = d.start(n, extra)
            time.sleep(3)
        up = d.wait_healthy(procs)
        warm = dict(g.warm)
        for n, shapes in todo:
            proc, scmd, port = procs[n]
            if n in up and d.left() > 20:
                if n in warm:
                    d.warm(n, port, scmd, up[n], warm[n])
                d.measure(n, shapes, port, scmd, up[n], group=g.name)
                if n == g.pair:
                    d.pair(port, (*g.pair_args, "--api-servers", str(api_servers(CONFIGS[n]))))
                if d.left() > 5:
                    (d.state / f"{n}.done").write_text("")
            stop(proc)
            collect(d.state, d.args.out)
        if all((d.state / f"{n}.done").exists() for n, _ in g.configs):
            (d.state / f"group-{g.name}.done").write_text("")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one short run on stock, nothing recorded as done")
    ap.add_argument("--state-dir", type=Path, default=Path("/root/measure"))
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=560)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--start-est-s", type=float, default=75)
    ap.add_argument("--inproc", action="store_true", help="run each vllm bench serve command in this process")
    ap.add_argument("--only", nargs="*", help="these configs of the order, in this order")
    ap.add_argument("--groups", nargs="*", help="GROUPS mode: these groups (none named: every group not done)")
    ap.add_argument("--hybrid", action="store_true", help="the hybrid MTP model's configs (HYBRID_ORDER)")
    ap.add_argument("--est-scale", type=float, default=1.0, help="runs take this many times the 8B's estimate")
    args = ap.parse_args()
    d = Driver(args)
    if args.groups is not None:
        run_groups(d, args.groups)
        d.finish()
        return 0
    failures = 0
    order = HYBRID_ORDER if args.hybrid else ORDER
    chosen = SMOKE if args.smoke else order
    if args.only:
        chosen = [next(c for c in order if c[0] == n) for n in args.only]
    for name, shapes in chosen:
        if (d.state / f"{name}.done").exists() and not args.smoke:
            continue
        need = args.start_est_s + d.need_s(shapes) + (PAIR_EST_S if name == "stock-pair" else 0)
        if need > d.left():
            print(f"skip {name}: needs ~{need:.0f} s, {d.left():.0f} s left", flush=True)
            d.summary.append(f"{name}: skipped (needs ~{need:.0f} s, {d.left():.0f} s left)")
            continue
        proc, scmd, port = d.start(name, [])
        up = d.wait_healthy({name: (proc, scmd, port)})
        if name not in up:
            stop(proc)
            failures += 1
            if failures >= 2 or name == "stock":
                d.summary.append("stopped: the engine does not start (see logs.tar.gz)")
                break
            continue
        failures = 0
        print(f"{name}: {shlex.join(scmd)}", flush=True)
        d.measure(name, shapes, port, scmd, up[name])
        if name == "stock-pair":
            d.pair(port)
        stop(proc)
        if not args.smoke:
            (d.state / f"{name}.done").write_text("")
        collect(d.state, args.out)
    d.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
