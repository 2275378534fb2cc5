"""The load generator as its own process: ``python -m controller.trials.loadgen.worker``.

Nothing else runs in this process, so nothing else the operator does (reconciling, scraping metrics, writing
status) can stall the client's event loop while it keeps a plan. The wire format is JSON:

- **stdin**: one :class:`WorkerJob` (the :class:`LoadPlan` and the client's settings), validated with pydantic;
  an invalid job is answered with one ``error`` message naming the field, and exit code 2.
- **stdout**: JSON lines, one :data:`WorkerMessage` each: ``progress`` (requests done of planned, elapsed, live
  output throughput) at most every ``progress_interval_s`` and once at the end, then one ``report`` carrying every
  request record and what the run planned and achieved (:class:`Adherence`). Diagnostics go to stderr.

The operator's side is :mod:`controller.trials.loadgen.process`. ``SHIFTLIGHT_LOADGEN_TEST_FAULT`` injects a fault
for the tests of that boundary (see :func:`parse_fault`); it is unset in normal use.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from controller.errors import InvalidInput
from controller.trials.loadgen.client import LoadGenerator
from controller.trials.loadgen.plan import LoadPlan
from controller.trials.loadgen.report import Adherence, RequestRecord

FAULT_ENV = "SHIFTLIGHT_LOADGEN_TEST_FAULT"
EXIT_INVALID_JOB = 2


class WorkerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(min_length=1, description="the engine's base URL (``/v1/completions`` is appended)")
    model: str = Field(min_length=1, description="the served model name")
    request_timeout_s: float = Field(default=600.0, gt=0)
    temperature: float = Field(default=0.0, ge=0)
    max_duration_s: float | None = Field(default=None, gt=0, description="stop sending new requests after this")
    progress_interval_s: float = Field(default=0.5, gt=0, description="at most one progress line this often")


class WorkerJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    settings: WorkerSettings
    plan: LoadPlan


class ProgressMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["progress"] = "progress"
    done: int = Field(ge=0)
    total: int = Field(ge=0)
    elapsed_s: float = Field(ge=0)
    output_tokens_per_s: float = Field(ge=0)


class ReportMessage(BaseModel):
    """A :class:`LoadReport` without its plan (the operator holds the plan; ``plan_fingerprint`` ties them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["report"] = "report"
    plan_fingerprint: str
    records: list[RequestRecord]
    duration_s: float = Field(ge=0)
    max_in_flight: int = Field(ge=0)
    cancelled: bool = False
    adherence: Adherence | None = None


class ErrorMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["error"] = "error"
    message: str
    field: str = ""


WorkerMessage = Annotated[ProgressMessage | ReportMessage | ErrorMessage, Field(discriminator="kind")]
MESSAGE = TypeAdapter[ProgressMessage | ReportMessage | ErrorMessage](WorkerMessage)


def read_job(text: str | bytes, *, source: str = "stdin") -> WorkerJob:
    """The job, validated; :class:`InvalidInput` names the first bad field (``plan.requests.3.max_tokens``)."""
    try:
        return WorkerJob.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"load generator job: {first['msg']}", source=source, field=where) from exc


@dataclass(frozen=True)
class Fault:
    """A test-only fault: at the ``at``-th finished request, ``stall`` blocks the event loop for ``seconds``;
    ``exit`` ends the process with code ``seconds``; ``garbage`` prints a line that is not a message. With
    ``once`` (a file path), the fault fires only if that file does not exist yet, and creates it."""

    action: Literal["stall", "exit", "garbage"]
    at: int
    seconds: float = 0.0
    once: Path | None = None


def parse_fault(text: str) -> Fault | None:
    """``stall=2.5@10``, ``exit=3@5``, ``garbage@1``, each optionally followed by ``,once=/path``."""
    if not text:
        return None
    head, _, tail = text.partition(",")
    once = Path(tail.removeprefix("once=")) if tail.startswith("once=") else None
    what, _, at = head.partition("@")
    action, _, value = what.partition("=")
    if action not in ("stall", "exit", "garbage") or not at.isdigit():
        raise InvalidInput(f"cannot read the fault {text!r}", source=FAULT_ENV)
    return Fault(action, int(at), float(value or 0), once)  # type: ignore[arg-type]


def _emit(message: BaseModel) -> None:
    sys.stdout.buffer.write(message.model_dump_json().encode() + b"\n")
    sys.stdout.buffer.flush()


def _fire(fault: Fault) -> None:
    if fault.once is not None:
        if fault.once.exists():
            return
        fault.once.write_text("fired\n")
    if fault.action == "stall":
        time.sleep(fault.seconds)  # blocks the event loop: no answer is read, no request sent
    elif fault.action == "exit":
        sys.stdout.flush()
        os._exit(int(fault.seconds))
    else:
        sys.stdout.buffer.write(b"Traceback (most recent call last): not a message\n")
        sys.stdout.buffer.flush()


async def run_job(job: WorkerJob, fault: Fault | None = None) -> ReportMessage:
    """Run the job's plan, printing progress lines; returns the report (not yet printed)."""
    s = job.settings
    total = len(job.plan.requests)
    t0 = time.perf_counter()
    last = -s.progress_interval_s

    def progress(done: int, _total: int) -> None:
        nonlocal last
        if fault is not None and done == fault.at:
            _fire(fault)
        now = time.perf_counter() - t0
        if now - last >= s.progress_interval_s or done == total:
            last = now
            rate = gen.output_tokens / now if now > 0 else 0.0
            _emit(ProgressMessage(done=done, total=total, elapsed_s=now, output_tokens_per_s=rate))

    gen = LoadGenerator(
        s.base_url, s.model, request_timeout_s=s.request_timeout_s, temperature=s.temperature, progress=progress
    )
    report = await gen.run(job.plan, max_duration_s=s.max_duration_s)
    return ReportMessage(
        plan_fingerprint=job.plan.fingerprint(),
        records=report.records,
        duration_s=report.duration_s,
        max_in_flight=report.max_in_flight,
        cancelled=report.cancelled,
        adherence=report.adherence,
    )


def main() -> int:
    try:
        job = read_job(sys.stdin.buffer.read())
        fault = parse_fault(os.environ.get(FAULT_ENV, ""))
    except InvalidInput as exc:
        print(exc, file=sys.stderr)
        _emit(ErrorMessage(message=str(exc), field=exc.field or ""))
        return EXIT_INVALID_JOB
    _emit(asyncio.run(run_job(job, fault)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
