"""The load generator in its own process: the job it reads, the lines it prints, and the operator's side that
validates them (a worker that dies, prints garbage or reports something that does not fit the plan fails the
replay with a reason; a cancel stops it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from controller.domain.traffic import TrafficShape
from controller.errors import InvalidInput
from controller.trials.loadgen.process import LoadClientFailed, ReplayProgress, check_report, replay_in_worker
from controller.trials.loadgen.replay import RequestRecord, plan_requests
from controller.trials.loadgen.worker import (
    FAULT_ENV,
    Fault,
    ReportMessage,
    WorkerJob,
    WorkerSettings,
    parse_fault,
    read_job,
)


def _plan(shape: TrafficShape, n: int = 24):  # type: ignore[no-untyped-def]
    return plan_requests(shape, num_requests=n, seed=3, token_id_range=(300, 4000), max_model_len=512)


def _children() -> set[int]:
    """Live child processes of this test process (all its threads)."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        text = (task / "children").read_text() if (task / "children").exists() else ""
        out.update(int(x) for x in text.split())
    return out


BAD_JOBS = [
    ({"settings": {"base_url": ""}}, "settings.base_url"),
    ({"settings": {"base_url": "http://x", "model": "m", "request_timeout_s": -1}}, "settings.request_timeout_s"),
    ({"settings": {"base_url": "http://x", "model": "m", "surprise": 1}}, "settings.surprise"),
    ({"plan": {"mode": "sideways"}}, "plan.mode"),
    (
        {"plan": {"requests": [{"index": 0, "send_at_s": 0, "prompt_token_ids": ["a"], "max_tokens": 4}]}},
        "plan.requests.0",
    ),
]


@pytest.mark.security
@pytest.mark.parametrize(("patch", "field"), BAD_JOBS)
def test_a_bad_job_is_refused_naming_the_field(small_shape: TrafficShape, patch: dict, field: str) -> None:  # type: ignore[type-arg]
    good = WorkerJob(settings=WorkerSettings(base_url="http://x", model="m"), plan=_plan(small_shape, 2))
    body = good.model_dump(mode="json")
    for key, value in patch.items():
        body[key] = {**body[key], **value}
    with pytest.raises(InvalidInput) as exc:
        read_job(json.dumps(body))
    assert exc.value.field.startswith(field)


def test_the_worker_answers_a_bad_job_with_an_error_line_and_exit_code_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "controller.trials.loadgen.worker"],
        input=b'{"settings": {"model": "m"}}',
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 2
    assert b'"kind":"error"' in proc.stdout and b"settings.base_url" in proc.stdout


FAULTS = [
    ("", None),
    ("stall=2.5@10", Fault("stall", 10, 2.5)),
    ("exit=3@5", Fault("exit", 5, 3.0)),
    ("garbage@1", Fault("garbage", 1)),
    ("stall=1@4,once=/tmp/x", Fault("stall", 4, 1.0, Path("/tmp/x"))),
]


@pytest.mark.parametrize(("text", "fault"), FAULTS)
def test_test_faults_parse(text: str, fault: Fault | None) -> None:
    assert parse_fault(text) == fault


@pytest.mark.parametrize("text", ["stall=1", "hang@3", "exit=1@x"])
def test_an_unreadable_fault_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_fault(text)


def _message(plan, records: list[RequestRecord]) -> ReportMessage:  # type: ignore[no-untyped-def]
    return ReportMessage(plan_fingerprint=plan.fingerprint(), records=records, duration_s=1.0, max_in_flight=1)


def _ok(index: int) -> RequestRecord:
    return RequestRecord(index=index, prompt_tokens=8, max_tokens=4, ok=True, ttft_s=0.1, e2e_s=0.5, output_tokens=4)


REPORT_PROBLEMS = [
    ("fingerprint", "plan_fingerprint"),
    ("duplicate", "records.1.index"),
    ("out of plan", "records.0.index"),
    ("negative e2e", "records.0.e2e_s"),
    ("nan ttft", "records.0.ttft_s"),
    ("ttft after end", "records.0.ttft_s"),
]


@pytest.mark.security
@pytest.mark.parametrize(("problem", "field"), REPORT_PROBLEMS)
def test_a_report_that_does_not_fit_the_plan_is_refused(small_shape: TrafficShape, problem: str, field: str) -> None:
    plan = _plan(small_shape, 4)
    records = {
        "fingerprint": [_ok(0)],
        "duplicate": [_ok(0), _ok(0)],
        "out of plan": [_ok(4)],
        "negative e2e": [replace(_ok(0), e2e_s=-1.0)],
        "nan ttft": [replace(_ok(0), ttft_s=float("nan"))],
        "ttft after end": [replace(_ok(0), ttft_s=0.9)],
    }[problem]
    message = _message(plan, records)
    if problem == "fingerprint":
        message = message.model_copy(update={"plan_fingerprint": "0" * 16})
    with pytest.raises(LoadClientFailed, match=field.replace(".", r"\.")):
        check_report(message, plan)


def test_the_worker_replays_and_streams_progress(fake_engine, small_shape: TrafficShape) -> None:
    plan = _plan(small_shape, 24)
    seen: list[ReplayProgress] = []
    settings = WorkerSettings(base_url=fake_engine.endpoint, model="fake", progress_interval_s=0.01)
    report = replay_in_worker(plan, settings, progress=seen.append)
    assert len(report.completed) == 24 and not report.failed and report.plan is plan
    assert report.adherence is not None and report.adherence.planned_concurrency == 8
    assert seen and seen[-1].done == 24 and seen[-1].total == 24
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert seen[-1].elapsed_s > 0 and seen[-1].output_tokens_per_s > 0
    assert fake_engine.state.requests == 24


def test_planned_prompt_texts_are_sent_as_text_through_the_worker(fake_engine, small_shape: TrafficShape) -> None:
    drawn = _plan(small_shape, 12)
    texts = [f"prompt {r.index}" for r in drawn.requests]
    plan = replace(drawn, requests=tuple(replace(r, prompt_text=t) for r, t in zip(drawn.requests, texts, strict=True)))
    assert plan.fingerprint() != drawn.fingerprint()  # the text is part of what the plan sends
    report = replay_in_worker(plan, WorkerSettings(base_url=fake_engine.endpoint, model="fake"))
    assert len(report.completed) == 12 and not report.failed
    assert sorted(fake_engine.state.texts) == sorted(texts) and fake_engine.state.prompts == []


def test_one_worker_keeps_hundreds_of_streams(make_fake_engine, small_shape: TrafficShape) -> None:
    with make_fake_engine() as engine:
        engine.state.token_delay_s = 0.01
        shape = small_shape.model_copy(update={"concurrency": 300.0})
        report = replay_in_worker(_plan(shape, 300), WorkerSettings(base_url=engine.endpoint, model="fake"))
    assert len(report.completed) == 300 and report.max_in_flight == 300


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("exit=3@5", "exited with code 3 before its report"), ("garbage@3", "printed an invalid message")],
)
def test_a_worker_that_dies_or_prints_garbage_fails_the_replay(
    fake_engine, small_shape: TrafficShape, monkeypatch: pytest.MonkeyPatch, fault: str, reason: str
) -> None:
    monkeypatch.setenv(FAULT_ENV, fault)
    before = _children()
    with pytest.raises(LoadClientFailed, match=reason):
        replay_in_worker(_plan(small_shape, 24), WorkerSettings(base_url=fake_engine.endpoint, model="fake"))
    assert _children() <= before  # stopped and reaped


def test_a_cancel_stops_the_worker(make_fake_engine, small_shape: TrafficShape) -> None:
    with make_fake_engine() as engine:
        engine.state.token_delay_s = 0.05  # 32 tokens: each request takes over a second
        seen: list[ReplayProgress] = []
        before = _children()
        report = replay_in_worker(
            _plan(small_shape, 200),
            WorkerSettings(base_url=engine.endpoint, model="fake", progress_interval_s=0.01),
            progress=seen.append,
            cancelled=lambda: bool(seen),
        )
        assert report.cancelled and not report.records
        assert _children() <= before
        assert engine.state.generated < 200 * 16
