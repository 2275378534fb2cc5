"""Benchmark: what the trial client's own CPU costs it, next to ``vllm bench serve``'s client, on a fake engine.

    nice -n 5 .venv/bin/python -m bench.loadgen_overhead [--streams 256] [--step-ms 24] [--requests 0] [--rounds 1]

A fake OpenAI-compatible engine runs in its own process (``serve``: plain asyncio on loopback, no model): it steps
like vLLM's engine, every ``--step-ms`` writing one token chunk to every stream in flight (one SSE event per HTTP
chunk, vLLM's JSON, ``"usage":null`` in each token chunk, then the finish chunk, the usage chunk and ``[DONE]``).
Requests join at the steps after they arrived, at most ``--prefill-per-step`` of them per step (16: vLLM's 8,192
batched tokens over 512-token prompts), the rest waiting as in a prefill queue. The server knows the truth: when
each request arrived and when it wrote each of its chunks (``/stats``), so each client's throughput, TTFT and TPOT
are compared with what the server did, and with each other. About ``streams / step`` chunks per second arrive
(256 streams at 24 ms: ~10,700/s, the H200's rate at 256 streams).

Both clients run the same closed-loop plan (``--streams`` streams, 4 x streams requests of 512 prompt tokens as
text / 512 output tokens), each in its own process on the same core when two cores are usable (the fake engine on
the other):

- ``shiftlight``: our client as trials run it (``replay_in_worker``, the ``loadgen.worker`` process);
- ``vllm-bench``: ``vllm bench serve``'s client side, run in the engine's Python (``.venv-engine`` or
  ``$SHIFTLIGHT_ENGINE_PYTHON``): its request function (``async_request_openai_completions``), its connector, its
  semaphore over tasks created up front, and its duration (first send to last completion), as ``serve.py`` runs
  them, without the tokenizer and dataset loading.

``--ours-python`` and ``--vllm-python`` (with ``--vllm-request-func``, vllm's ``endpoint_request_func.py`` loaded
by path) run the clients on another interpreter, e.g. one with the GPU host's Python and aiohttp.

Per run it prints the client's output tok/s and the server's own figure over the same requests, TTFT and TPOT p50
(client against server), the client's CPU time over the run and per chunk. Ends with one line per round:
``overhead: ours/vllm-bench throughput X.XXXx, ttft p50 +D.D%, tpot p50 +D.D%, cpu per chunk ours U us vllm V us``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------------------------
# The fake engine (``serve``): stdlib only.

_HEAD = (
    b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_CHOICE = (
    b'{"id":"cmpl-%s","object":"text_completion","created":%d,"model":"m","choices":[{"index":0,"text":" t5",'
    b'"logprobs":null,"finish_reason":%s,"stop_reason":null,"prompt_logprobs":null}],"usage":null}'
)
_USAGE = (
    b'{"id":"cmpl-%s","object":"text_completion","created":%d,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":null}}'
)


def _chunk(payload: bytes) -> bytes:
    body = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(body), body)


class _Stream:
    __slots__ = ("arrived", "emitted", "first", "last", "max_tokens", "prompt_tokens", "rid", "transport")

    def __init__(self, transport: asyncio.Transport, rid: bytes, max_tokens: int, prompt_tokens: int) -> None:
        self.transport = transport
        self.rid = rid
        self.max_tokens = max_tokens
        self.prompt_tokens = prompt_tokens
        self.arrived = time.perf_counter()
        self.emitted = 0
        self.first = 0.0
        self.last = 0.0


class _Engine:
    """Steps every ``step_s``: one chunk to every stream in flight; new requests join at the next step, at most
    ``prefill_per_step`` of them per step (0: all)."""

    def __init__(self, step_s: float, prefill_per_step: int) -> None:
        self.step_s = step_s
        self.prefill_per_step = prefill_per_step
        self.active: list[_Stream] = []
        self.joining: list[_Stream] = []
        self.done: list[_Stream] = []
        self.chunks = 0
        self.late_steps = 0
        self.steps = 0
        self.created = int(time.time())
        self.token_chunk = _chunk(_CHOICE % (b"0" * 32, self.created, b"null"))

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._next = loop.time() + self.step_s
        loop.call_at(self._next, self.step)

    def step(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self._next > self.step_s / 2:
            self.late_steps += 1
        self.steps += 1
        if self.joining:  # a prefill budget per step, as vLLM's max_num_batched_tokens: the rest wait
            take = len(self.joining) if self.prefill_per_step <= 0 else self.prefill_per_step
            self.active.extend(self.joining[:take])
            del self.joining[:take]
        now = time.perf_counter()
        keep = []
        for s in self.active:
            if s.transport.is_closing():
                continue
            s.emitted += 1
            if s.emitted == 1:
                s.first = now
            s.last = now
            self.chunks += 1
            if s.emitted < s.max_tokens:
                s.transport.write(self.token_chunk)
                keep.append(s)
                continue
            n, p = s.max_tokens, s.prompt_tokens
            s.transport.write(
                _chunk(_CHOICE % (s.rid, self.created, b'"length"'))
                + _chunk(_USAGE % (s.rid, self.created, p, p + n, n))
                + _chunk(b"[DONE]")
                + b"0\r\n\r\n"
            )
            self.done.append(s)
        self.active = keep
        self._next += self.step_s
        loop.call_at(self._next, self.step)

    def stats(self) -> dict[str, Any]:
        done = self.done
        out: dict[str, Any] = {"chunks": self.chunks, "steps": self.steps, "late_steps": self.late_steps}
        if done:
            out["requests"] = len(done)
            out["tokens"] = sum(s.max_tokens for s in done)
            out["span_s"] = max(s.last for s in done) - min(s.arrived for s in done)
            out["ttft_p50_s"] = statistics.median(s.first - s.arrived for s in done)
            out["tpot_p50_s"] = statistics.median((s.last - s.first) / (s.max_tokens - 1) for s in done)
        return out


class _Conn(asyncio.Protocol):
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
            self.handle(head.split(" ", 2), body)

    def handle(self, request_line: list[str], body: bytes) -> None:
        assert self.transport is not None
        if request_line[1].startswith("/stats"):
            text = json.dumps(self.engine.stats()).encode()
            if "reset" in request_line[1]:
                self.engine.done, self.engine.chunks, self.engine.steps, self.engine.late_steps = [], 0, 0, 0
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text)
            )
            return
        job = json.loads(body)
        prompt = job["prompt"]
        prompt_tokens = len(prompt.split()) if isinstance(prompt, str) else len(prompt)
        rid = os.urandom(16).hex().encode()
        self.transport.write(_HEAD)
        self.engine.joining.append(_Stream(self.transport, rid, int(job["max_tokens"]), prompt_tokens))


def serve(port: int, step_s: float, prefill_per_step: int) -> None:
    async def main() -> None:
        engine = _Engine(step_s, prefill_per_step)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Conn(engine), "127.0.0.1", port, backlog=4096)
        engine.start()
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# --------------------------------------------------------------------------------------------------------------
# vllm bench serve's client side (``vllm-client``): runs in the engine's Python, which has vllm.


def vllm_client(job_path: str) -> None:
    import aiohttp

    job = json.loads(Path(job_path).read_text())
    if job.get("request_func"):  # vllm's request-function file, loaded on an interpreter without vllm
        import importlib.util

        spec = importlib.util.spec_from_file_location("endpoint_request_func", job["request_func"])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        RequestFuncInput, async_request_openai_completions = (
            module.RequestFuncInput,
            module.async_request_openai_completions,
        )
    else:
        from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions
    conc = job["concurrency"]

    async def main() -> dict[str, Any]:
        connector = aiohttp.TCPConnector(  # as vllm.benchmarks.serve.benchmark builds it
            limit=conc,
            limit_per_host=conc,
            ttl_dns_cache=300,
            use_dns_cache=True,
            keepalive_timeout=60,
            enable_cleanup_closed=True,
            force_close=False,
            ssl=False,
        )
        session = aiohttp.ClientSession(
            connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
        )
        semaphore = asyncio.Semaphore(conc)

        async def limited(inp: RequestFuncInput) -> Any:
            async with semaphore:
                return await async_request_openai_completions(request_func_input=inp, session=session)

        inputs = [
            RequestFuncInput(
                prompt=r["prompt"],
                api_url=job["url"],
                prompt_len=r["prompt_len"],
                output_len=r["max_tokens"],
                model="m",
                ignore_eos=True,
            )
            for r in job["requests"]
        ]
        cpu0 = time.process_time()
        start = time.perf_counter()
        tasks = [asyncio.create_task(limited(inp)) for inp in inputs]
        outputs = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        await session.close()
        ok = [o for o in outputs if o.success]
        return {
            "completed": len(ok),
            "failed": len(outputs) - len(ok),
            "output_tokens": sum(o.output_tokens for o in ok),
            "duration_s": duration,
            "ttft_p50_s": statistics.median(o.ttft for o in ok),
            # as vllm bench's calculate_metrics: (latency - ttft) / (output_len - 1)
            "tpot_p50_s": statistics.median((o.latency - o.ttft) / (o.output_tokens - 1) for o in ok),
            "client_cpu_s": cpu,
            "first_error": next((o.error[-300:] for o in outputs if not o.success), ""),
        }

    print(json.dumps(asyncio.run(main())), flush=True)


# --------------------------------------------------------------------------------------------------------------
# The driver.


def _usable() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _get(url: str) -> dict[str, Any]:
    import httpx

    return dict(httpx.get(url, timeout=30).json())


def _run_ours(endpoint: str, plan: Any, cpus: set[int] | None, python: str) -> dict[str, Any]:
    from controller.trials.loadgen.process import replay_in_worker
    from controller.trials.loadgen.worker import WorkerSettings

    report = replay_in_worker(plan, WorkerSettings(base_url=endpoint, model="m"), cpus=cpus, python=python)
    s = report.summary()
    return {
        "completed": s.completed,
        "failed": s.failed,
        "output_tokens": s.output_tokens,
        "duration_s": s.duration_s,
        "ttft_p50_s": s.ttft_s.p50 if s.ttft_s else float("nan"),
        "tpot_p50_s": s.tpot_s.p50 if s.tpot_s else float("nan"),
        "client_cpu_s": report.adherence.client_cpu_s if report.adherence else float("nan"),
        "first_error": report.failed[0].error if report.failed else "",
        "connections": report.adherence.connections_opened if report.adherence else -1,
        "loop_stall_s": report.adherence.loop_stall_s if report.adherence else -1,
    }


def _run_vllm(
    endpoint: str, plan: Any, engine_python: str, tmp: Path, cpus: set[int] | None, request_func: str
) -> dict[str, Any]:
    job = {
        "request_func": request_func,
        "url": endpoint + "/v1/completions",
        "concurrency": plan.concurrency,
        "requests": [
            {"prompt": r.prompt_text, "prompt_len": r.prompt_tokens, "max_tokens": r.max_tokens} for r in plan.requests
        ],
    }
    path = tmp / "vllm-job.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    cmd = [engine_python, str(Path(__file__).resolve()), "vllm-client", str(path)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        out, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"vllm client failed: {err[-2000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def _line(tool: str, got: dict[str, Any], truth: dict[str, Any]) -> str:
    tput = got["output_tokens"] / got["duration_s"]
    real = truth["tokens"] / truth["span_s"]
    per_chunk = got["client_cpu_s"] / max(truth["chunks"], 1) * 1e6
    return (
        f"  {tool:<10}: {tput:8.0f} out tok/s (server {real:8.0f}, {tput / real:.3f}x),"
        f" duration {got['duration_s']:.2f} s (server {truth['span_s']:.2f} s),"
        f" TTFT p50 {got['ttft_p50_s'] * 1e3:6.1f} ms (server"
        f" {truth['ttft_p50_s'] * 1e3:6.1f}), TPOT p50 {got['tpot_p50_s'] * 1e3:5.2f} ms (server"
        f" {truth['tpot_p50_s'] * 1e3:5.2f}), client CPU {got['client_cpu_s']:.1f} s = {per_chunk:.1f} us/chunk,"
        f" {got['completed']} ok {got['failed']} failed, server steps late {truth['late_steps']}/{truth['steps']}"
    )


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests", type=int, default=0, help="requests per run (0: 4 x streams)")
    ap.add_argument("--output-tokens", type=int, default=512)
    ap.add_argument("--step-ms", type=float, default=24.0, help="the fake engine's step (one token per stream)")
    ap.add_argument(
        "--prefill-per-step", type=int, default=16, help="requests the fake engine admits per step (0: all)"
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds of ours, vllm-bench, vllm-bench, ours")
    ap.add_argument("--only", choices=["ours", "vllm"], help="run one client only")
    ap.add_argument("--ours-python", default=sys.executable, help="the interpreter our worker process runs on")
    ap.add_argument(
        "--vllm-python", help="the interpreter vllm's client runs on (default: the engine's, which imports vllm)"
    )
    ap.add_argument(
        "--vllm-request-func",
        default="",
        help="vllm's benchmarks/lib/endpoint_request_func.py, loaded by path (for a --vllm-python without vllm)",
    )
    return ap.parse_args()


def _plan(streams: int, n: int, output_tokens: int) -> Any:
    """``n`` closed-loop requests of 512 prompt tokens (sent as text: one word per token) and ``output_tokens``."""
    import dataclasses

    from controller.domain.traffic import LengthDistribution, TrafficShape
    from controller.trials.loadgen.plan import plan_requests

    out_len = LengthDistribution(mean=output_tokens, cv=0.0, maximum=output_tokens)
    shape = TrafficShape(
        arrival_rate_rps=0,
        concurrency=streams,
        prompt_tokens=LengthDistribution(mean=512, cv=0.0, maximum=512),
        output_tokens=out_len,
    )
    plan = plan_requests(shape, num_requests=n, seed=5, token_id_range=(3, 4000), max_model_len=4096)
    texts = [" ".join(f"t{i}" for i in r.prompt_token_ids) for r in plan.requests]
    return dataclasses.replace(
        plan, requests=tuple(dataclasses.replace(r, prompt_text=t) for r, t in zip(plan.requests, texts, strict=True))
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "vllm-client":
        vllm_client(sys.argv[2])
        return 0
    args = _arguments()

    from controller.trials.engine.launchers import default_engine_python, free_port, stop_process_group

    usable = _usable()
    engine_cpus = {usable[0]} if len(usable) >= 2 else None
    client_cpus = {usable[-1]} if len(usable) >= 2 else None
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    n = args.requests or 4 * args.streams
    plan = _plan(args.streams, n, args.output_tokens)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "serve",
            str(port),
            str(args.step_ms / 1000),
            str(args.prefill_per_step),
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    if engine_cpus:
        os.sched_setaffinity(server.pid, engine_cpus)
    assert server.stdout is not None
    server.stdout.readline()
    engine_python = args.vllm_python or os.environ.get("SHIFTLIGHT_ENGINE_PYTHON") or default_engine_python()
    print(
        f"fake engine at {endpoint}: step {args.step_ms} ms, {args.prefill_per_step} admitted per step,"
        f" {args.streams} streams, {n} requests of 512 in /"
        f" {args.output_tokens} out (~{args.streams / args.step_ms * 1000:.0f} chunks/s); engine cpu"
        f" {sorted(engine_cpus or [])}, clients cpu {sorted(client_cpus or [])}"
    )
    order = ("ours", "vllm", "vllm", "ours")
    try:
        with tempfile.TemporaryDirectory(prefix="shiftlight-overhead-") as tmpdir:
            tmp = Path(tmpdir)
            for i in range(args.rounds):
                runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {"ours": [], "vllm": []}
                for who in order if i % 2 == 0 else order[::-1]:
                    if args.only and who != args.only:
                        continue
                    _get(endpoint + "/stats?reset")
                    if who == "ours":
                        got = _run_ours(endpoint, plan, client_cpus, args.ours_python)
                    else:
                        got = _run_vllm(endpoint, plan, engine_python, tmp, client_cpus, args.vllm_request_func)
                    truth = _get(endpoint + "/stats?reset")
                    runs[who].append((got, truth))
                    print(_line("shiftlight" if who == "ours" else "vllm-bench", got, truth), flush=True)
                if runs["ours"] and runs["vllm"]:
                    print(_summary(runs), flush=True)
    finally:
        stop_process_group(server)
    return 0


def _gmean(values: list[float]) -> float:
    return statistics.geometric_mean(values)


def _summary(runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]) -> str:
    def fig(who: str, key: str) -> float:
        if key == "tput":
            return _gmean([g["output_tokens"] / g["duration_s"] for g, _ in runs[who]])
        if key == "cpu":
            return _gmean([g["client_cpu_s"] / t["chunks"] * 1e6 for g, t in runs[who]])
        return _gmean([g[key] for g, _ in runs[who]])

    return (
        f"overhead: ours/vllm-bench throughput {fig('ours', 'tput') / fig('vllm', 'tput'):.3f}x,"
        f" ttft p50 {(fig('ours', 'ttft_p50_s') / fig('vllm', 'ttft_p50_s') - 1) * 100:+.1f}%,"
        f" tpot p50 {(fig('ours', 'tpot_p50_s') / fig('vllm', 'tpot_p50_s') - 1) * 100:+.1f}%,"
        f" cpu per chunk ours {fig('ours', 'cpu'):.1f} us vllm {fig('vllm', 'cpu'):.1f} us"
    )


if __name__ == "__main__":
    sys.exit(main())
