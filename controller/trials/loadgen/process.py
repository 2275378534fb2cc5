"""The operator's side of the load generator process (:mod:`controller.trials.loadgen.worker`).

:func:`replay_in_worker` spawns the worker in its own process group, hands it the plan on stdin, forwards its
progress lines and validates its final report. Every way the worker can let the trial down (it exits before its
report, prints a line that is not one of its messages, reports something that fails validation or does not match
the plan, or outlives its deadline) raises :class:`LoadClientFailed` with a reason; the runner turns that into a
``failed`` trial (a broken measurement, nothing about the config). A cancel or a deadline stops the worker by its
process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from controller.errors import ShiftlightError
from controller.trials.engine.launchers import stop_process_group
from controller.trials.loadgen.client import LoadGenerator
from controller.trials.loadgen.plan import LoadPlan
from controller.trials.loadgen.report import LoadReport
from controller.trials.loadgen.worker import (
    MESSAGE,
    ErrorMessage,
    ProgressMessage,
    ReportMessage,
    WorkerJob,
    WorkerSettings,
)

#: Past ``max_duration_s``, the worker may still wait for the requests in flight (each up to the request timeout)
#: and needs a moment to start and to print its report; it is stopped once this much more has passed.
START_AND_REPORT_S = 60.0
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class LoadClientFailed(ShiftlightError):
    """The load generator process did not deliver a valid report (the measurement failed, not the config)."""


@dataclass(frozen=True)
class ReplayProgress:
    """One progress line of the worker: requests done of planned, seconds since it started sending, and the
    output tokens per second of the requests completed so far."""

    done: int
    total: int
    elapsed_s: float
    output_tokens_per_s: float


def check_report(message: ReportMessage, plan: LoadPlan) -> LoadReport:
    """The report for ``plan``, or :class:`LoadClientFailed` naming what does not fit the plan."""
    if message.plan_fingerprint != plan.fingerprint():
        raise LoadClientFailed("load generator report: plan_fingerprint does not match the plan it was given")
    seen: set[int] = set()
    for i, rec in enumerate(message.records):
        where = f"load generator report: records.{i}"
        if not 0 <= rec.index < len(plan.requests) or rec.index in seen:
            raise LoadClientFailed(f"{where}.index: {rec.index} is not a request of the plan, or appears twice")
        seen.add(rec.index)
        numbers = {"ttft_s": rec.ttft_s, "e2e_s": rec.e2e_s, "output_tokens": rec.output_tokens}
        for name, value in numbers.items():
            if not math.isfinite(value) or value < 0:
                raise LoadClientFailed(f"{where}.{name}: {value} is not a finite number >= 0")
        if rec.ok and rec.ttft_s > rec.e2e_s + 1e-9:
            raise LoadClientFailed(f"{where}.ttft_s: {rec.ttft_s} is after the request ended ({rec.e2e_s})")
    return LoadReport(
        plan=plan,
        records=sorted(message.records, key=lambda r: r.index),
        duration_s=message.duration_s,
        max_in_flight=message.max_in_flight,
        cancelled=message.cancelled,
        adherence=message.adherence,
    )


def replay_inline(
    plan: LoadPlan,
    settings: WorkerSettings,
    *,
    progress: Callable[[ReplayProgress], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> LoadReport:
    """The same replay in the caller's process, on a fresh event loop (the CLI and tests; anything else the caller
    does can stall it, so the operator uses :func:`replay_in_worker`)."""
    t0 = time.perf_counter()

    def forward(done: int, total: int) -> None:
        if progress is not None:
            elapsed = time.perf_counter() - t0
            rate = gen.output_tokens / elapsed if elapsed > 0 else 0.0
            progress(ReplayProgress(done, total, elapsed, rate))

    gen = LoadGenerator(
        settings.base_url,
        settings.model,
        request_timeout_s=settings.request_timeout_s,
        temperature=settings.temperature,
        progress=forward,
    )

    async def main() -> LoadReport:
        cancel = asyncio.Event()

        async def watch() -> None:
            while not cancelled():
                await asyncio.sleep(0.1)
            cancel.set()

        watcher = asyncio.create_task(watch())
        try:
            return await gen.run(plan, max_duration_s=settings.max_duration_s, cancel=cancel)
        finally:
            watcher.cancel()

    return asyncio.run(main())


def _pump(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stderr_tail(path: Path, limit: int = 600) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return text[-limit:].replace("\n", " | ")


def replay_in_worker(
    plan: LoadPlan,
    settings: WorkerSettings,
    *,
    progress: Callable[[ReplayProgress], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    cpus: Collection[int] | None = None,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> LoadReport:
    """Run ``plan`` in a worker process and return its validated report. ``cancelled`` is polled (every 0.1 s):
    once true the worker is stopped and a report marked ``cancelled`` comes back. ``cpus`` pins the worker to
    those cores (``os.sched_setaffinity``)."""
    job = WorkerJob(settings=settings, plan=plan).model_dump_json().encode()
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, base.get("PYTHONPATH", "")) if p)
    limit = (settings.max_duration_s or math.inf) + settings.request_timeout_s + START_AND_REPORT_S
    with tempfile.TemporaryDirectory(prefix="shiftlight-loadgen-") as tmp:
        err_path = Path(tmp) / "stderr"
        with err_path.open("wb") as err:
            proc = subprocess.Popen(
                [python, "-m", "controller.trials.loadgen.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=base,
                start_new_session=True,
            )
        try:
            if cpus:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(proc.pid, set(cpus))
            return _follow(proc, job, plan, progress, cancelled, limit, err_path)
        finally:
            if proc.poll() is None:
                stop_process_group(proc, grace_s=2.0)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


def _follow(
    proc: subprocess.Popen[bytes],
    job: bytes,
    plan: LoadPlan,
    progress: Callable[[ReplayProgress], None] | None,
    cancelled: Callable[[], bool],
    limit_s: float,
    err_path: Path,
) -> LoadReport:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(job)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it died at once: the exit code and stderr say why, below
    lines: queue.Queue[bytes | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), name="loadgen-worker-out", daemon=True).start()
    started = time.monotonic()
    while True:
        if cancelled():
            stop_process_group(proc, grace_s=2.0)
            return LoadReport(
                plan=plan, records=[], duration_s=time.monotonic() - started, max_in_flight=0, cancelled=True
            )
        if time.monotonic() - started > limit_s:
            stop_process_group(proc, grace_s=2.0)
            raise LoadClientFailed(f"load generator process did not finish within {limit_s:.0f} s and was stopped")
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if line is None:
            code = proc.wait()
            raise LoadClientFailed(
                f"load generator process exited with code {code} before its report: {_stderr_tail(err_path)}".rstrip(
                    ": "
                )
            )
        try:
            message = MESSAGE.validate_json(line)
        except ValidationError as exc:
            stop_process_group(proc, grace_s=2.0)
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            shown = line[:120].decode(errors="replace").strip()
            raise LoadClientFailed(
                f"load generator process printed an invalid message ({where}: {first['msg']}): {shown!r}"
            ) from exc
        if isinstance(message, ProgressMessage):
            if progress is not None:
                progress(ReplayProgress(message.done, message.total, message.elapsed_s, message.output_tokens_per_s))
        elif isinstance(message, ErrorMessage):
            raise LoadClientFailed(f"load generator process refused its job: {message.message}")
        else:
            report = check_report(message, plan)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)  # one that lingers after its report is stopped by the caller
            return report
