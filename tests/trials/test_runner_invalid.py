"""Trials that check themselves: the runner's load generator runs in its own process against a fast fake engine
on loopback; a client whose event loop is deliberately blocked mid-run (a test fault in the worker process) did
not keep its plan, so the trial is ``invalid`` with the reason, retried once on a fresh engine, and never cached.
A healthy run is ``measured``; a worker that dies or prints garbage is a ``failed`` measurement (no retry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialStatus
from controller.ports import TrialBudget, TrialRequest
from controller.trials.cache import JsonFileStore, TrialCache
from controller.trials.loadgen.process import ReplayProgress
from controller.trials.loadgen.worker import FAULT_ENV
from controller.trials.runner import RunnerSettings, TrialRunner
from controller.trials.verdict.validity import IN_FLIGHT_LOW, LOOP_STALLED
from tests.trials.test_runner_cache import TARGET, FakeLauncher

#: 64 requests on 8 streams of ~32 tokens at 5 ms a token: about 1.3 s of steady replay, so a 1 s stall at the
#: 10th answer falls inside it
BUDGET = TrialBudget(duration_s=60, warmup_s=0, max_requests=64, startup_timeout_s=5)


def _request(shape: TrafficShape) -> TrialRequest:
    return TrialRequest(TARGET, EngineConfig(max_num_seqs=8), shape, SLO(), BUDGET)


def _runner(launcher: FakeLauncher, cache: TrialCache | None = None, **kw: object) -> TrialRunner:
    settings = RunnerSettings(max_model_len=512, sample_interval_s=0.05, warmup_requests=0)
    return TrialRunner(
        launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0", settings=settings, cache=cache, **kw
    )  # type: ignore[arg-type]


@pytest.fixture
def engine(make_fake_engine):  # type: ignore[no-untyped-def]
    with make_fake_engine() as e:
        e.state.token_delay_s = 0.005
        yield e


def test_a_healthy_run_is_measured(engine, small_shape: TrafficShape, tmp_path: Path) -> None:
    launcher = FakeLauncher(engine)
    seen: list[ReplayProgress] = []
    cache = TrialCache(JsonFileStore(tmp_path / "cache.json"))
    runner = _runner(launcher, cache, replay_progress=seen.append)
    result = runner.run(_request(small_shape))
    assert result.status is TrialStatus.MEASURED, result.reason
    assert result.completed == 64 and len(launcher.started) == 1 and runner.runs == 1
    assert seen and seen[-1].done == 64 and seen[-1].output_tokens_per_s > 0 and seen[-1].elapsed_s > 0
    assert cache.get(runner.key(_request(small_shape))) is not None


@pytest.mark.security
def test_a_stalled_client_makes_the_trial_invalid_and_it_is_retried_once(
    engine, small_shape: TrafficShape, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_ENV, "stall=1.0@10")  # every attempt: the client's event loop blocks for 1 s
    launcher = FakeLauncher(engine)
    cache = TrialCache(JsonFileStore(tmp_path / "cache.json"))
    runner = _runner(launcher, cache)
    result = runner.run(_request(small_shape))
    assert result.status is TrialStatus.INVALID
    assert LOOP_STALLED in result.invalid_codes, result.reason
    assert IN_FLIGHT_LOW in result.invalid_codes, result.reason  # all 8 streams idle for a second
    assert not result.ok and result.objective() == 0.0 and not result.meets_slo()
    assert len(launcher.started) == 2 and launcher.stopped == 2 and runner.runs == 2  # retried once, fresh engine
    assert cache.get(runner.key(_request(small_shape))) is None  # never cached as a measurement


def test_a_stall_on_the_first_attempt_only_is_measured_on_the_retry(
    engine, small_shape: TrafficShape, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_ENV, f"stall=1.0@10,once={tmp_path / 'stalled'}")
    launcher = FakeLauncher(engine)
    runner = _runner(launcher)
    result = runner.run(_request(small_shape))
    assert (tmp_path / "stalled").exists()
    assert result.status is TrialStatus.MEASURED, result.reason
    assert len(launcher.started) == 2 and runner.runs == 2


@pytest.mark.parametrize(
    ("fault", "words"),
    [("exit=3@10", "exited with code 3 before its report"), ("garbage@10", "printed an invalid message")],
)
def test_a_worker_that_dies_or_prints_garbage_is_a_failed_measurement(
    engine, small_shape: TrafficShape, monkeypatch: pytest.MonkeyPatch, fault: str, words: str
) -> None:
    monkeypatch.setenv(FAULT_ENV, fault)
    launcher = FakeLauncher(engine)
    runner = _runner(launcher)
    result = runner.run(_request(small_shape))
    assert result.status is TrialStatus.FAILED and words in result.reason
    assert len(launcher.started) == 1 and launcher.stopped == 1  # a broken measurement is not retried
