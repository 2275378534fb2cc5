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

#: ``--hybrid``: the hybrid Gated DeltaNet / attention model with an MTP head (``model_dir.py qwen3.6-27b-int4``).
#: With dummy weights the drafts are almost never accepted, so the MTP runs measure the verification cost only;
#: acceptance is modelled separately. Not yet run on the GPU.
MM_OFF = ["--limit-mm-per-prompt", json.dumps({"image": 0, "video": 0})]
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
    """Copy what is measured so far (all calls) into ``out``: results.jsonl, loadgen.jsonl, summary.txt and the
    server logs as logs.tar.gz (the device tool brings back at most 8 files)."""
    for name in ("results.jsonl", "loadgen.jsonl", "summary.txt"):
        if (state / name).exists():
            (out / name).write_bytes((state / name).read_bytes())
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for p in sorted((state / "logs").glob("*.log")):
            tar.add(p, arcname=p.name)


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
    ap.add_argument("--hybrid", action="store_true", help="the hybrid MTP model's configs (HYBRID_ORDER)")
    ap.add_argument("--est-scale", type=float, default=1.0, help="runs take this many times the 8B's estimate")
    args = ap.parse_args()
    t_end = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    state = args.state_dir
    logs = state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rdir = state / "results"
    rdir.mkdir(exist_ok=True)
    results = open(state / "results.jsonl", "a")  # noqa: SIM115
    port = 8100 + len(list(logs.glob("*.log")))
    seed = int(time.time()) % 100000
    summary: list[str] = []
    failures = 0
    order = HYBRID_ORDER if args.hybrid else ORDER
    chosen = SMOKE if args.smoke else order
    if args.only:
        chosen = [next(c for c in order if c[0] == n) for n in args.only]
    for name, shapes in chosen:
        if (state / f"{name}.done").exists() and not args.smoke:
            continue
        need = args.start_est_s + args.est_scale * sum(
            est_run_s(s, max(cs), max(16, max(cs))) + args.runs * sum(est_run_s(s, c) for c in cs)
            for s, cs in shapes.items()
        )
        if name == "stock-pair":
            need += 2 * est_run_s(SHORT, 64) + 2 * est_run_s(SHORT, 256) + 30
        left = t_end - time.monotonic()
        if need > left:
            print(f"skip {name}: needs ~{need:.0f} s, {left:.0f} s left", flush=True)
            summary.append(f"{name}: skipped (needs ~{need:.0f} s, {left:.0f} s left)")
            continue
        port += 1
        scmd = server_cmd(args.model_dir, port, CONFIGS[name])
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115
        t0 = time.monotonic()
        proc = subprocess.Popen(
            scmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ, **SERVER_ENV)
        )
        while not healthy(port):
            if proc.poll() is not None or time.monotonic() - t0 > 400 or time.monotonic() > t_end:
                break
            time.sleep(1)
        startup = time.monotonic() - t0
        if not healthy(port):
            print(f"{name}: server failed (rc {proc.poll()}) after {startup:.0f} s", flush=True)
            summary.append(f"{name}: server failed after {startup:.0f} s")
            stop(proc)
            log.close()
            failures += 1
            if failures >= 2 or name == "stock":
                summary.append("stopped: the engine does not start (see logs.tar.gz)")
                break
            continue
        failures = 0
        print(f"{name}: up in {startup:.0f} s: {shlex.join(scmd)}", flush=True)
        for shape, concs in shapes.items():
            plan = [("warmup", max(concs), 0)] + [("measured", c, i) for c in concs for i in range(args.runs)]
            for kind, conc, i in plan:
                if time.monotonic() > t_end - 5:
                    break
                n = max(4, 4 * conc) if kind == "measured" else max(16, conc)
                seed += 1
                fname = f"{name}-{shape[0]}x{shape[1]}-c{conc}-{kind}{i}.json"
                bcmd = bench_cmd(args.model_dir, port, shape, conc, n, seed, str(rdir), fname)
                tb = time.monotonic()
                rc = bench_inproc(bcmd) if args.inproc else subprocess.run(bcmd, timeout=max(30, t_end - tb)).returncode
                wall = time.monotonic() - tb
                rec: dict[str, object] = {
                    "config": name, "flags": CONFIGS[name], "input_len": shape[0], "output_len": shape[1],
                    "concurrency": conc, "kind": kind, "run": i, "num_prompts": n, "seed": seed,
                    "server_env": SERVER_ENV, "server_cmd": shlex.join(scmd), "bench_cmd": shlex.join(bcmd),
                    "startup_s": round(startup, 1),
                    "wall_s": round(wall, 2), "rc": rc, "bench_in_process": args.inproc,
                }  # fmt: skip
                try:
                    rec["result"] = json.loads((rdir / fname).read_text())
                except (OSError, ValueError):
                    rec["result"] = None
                results.write(json.dumps(rec) + "\n")
                results.flush()
                r = rec["result"] if isinstance(rec["result"], dict) else {}
                tput, ttft, tpot = (float(r.get(k) or "nan") for k in ("output_throughput", "median_ttft_ms",
                                                                        "median_tpot_ms"))  # fmt: skip
                line = (
                    f"{name:16s} {shape[0]}/{shape[1]} c{conc:<4d} {kind}{i} n={n:<5d} out {tput:8.1f} tok/s"
                    f" ttft p50 {ttft:8.1f} ms tpot p50 {tpot:6.2f} ms wall {wall:5.1f} s"
                )
                print(line, flush=True)
                summary.append(line)
        if name == "stock-pair":
            lg = [sys.executable, str(Path(__file__).with_name("loadgen_pair.py")), "--port", str(port),
                  "--model-dir", args.model_dir, "--out", str(state / "loadgen.jsonl"), "--budget-s",
                  str(max(0.0, t_end - time.monotonic() - 40))]  # fmt: skip
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(Path.cwd())]))
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(lg, timeout=max(30, t_end - time.monotonic()), env=env)
        stop(proc)
        log.close()
        if not args.smoke:
            (state / f"{name}.done").write_text("")
        collect(state, args.out)
    with open(state / "summary.txt", "a") as f:
        f.write("\n".join(summary) + "\n")
    collect(state, args.out)
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
