"""The trial runner through a fake launcher (fast engine in-process), and the result cache."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialStatus
from controller.errors import InvalidInput
from controller.ports import LoadTester, TrialBudget, TrialRequest
from controller.trials.cache import JsonFileStore, TrialCache, TrialKey
from controller.trials.engine.launchers import Launch
from controller.trials.engine.log import engine_reason
from controller.trials.runner import RunnerSettings, TrialRunner

TARGET = TargetRef("ml", "chat", "tiny")
BUDGET = TrialBudget(duration_s=20, warmup_s=2, max_requests=24, startup_timeout_s=5)


class FakeLauncher:
    """Starts nothing: hands out the fake engine, or a refusal with log lines for configs it 'rejects'."""

    source = "local-process"

    def __init__(self, engine: Any, refuse: dict[str, list[str]] | None = None) -> None:
        self.engine = engine
        self.refuse = refuse or {}
        self.started: list[EngineConfig] = []
        self.stopped = 0

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        self.started.append(config)
        lines = self.refuse.get(config.key())
        if lines is not None:
            return Launch("", "fake", False, 1.5, error="engine exited with code 1", log_tail=tuple(lines))
        return Launch(self.engine.endpoint, "fake", True, 0.1, pid=None)

    def logs(self, launch: Launch) -> tuple[str, ...]:
        return launch.log_tail

    def stop(self, launch: Launch) -> None:
        self.stopped += 1


def request(shape: TrafficShape, config: EngineConfig | None = None, seed: int = 0) -> TrialRequest:
    return TrialRequest(TARGET, config or EngineConfig(max_num_seqs=8), shape, SLO(), BUDGET, seed=seed)


def test_runner_is_a_load_tester_and_measures(fake_engine, small_shape: TrafficShape) -> None:
    launcher = FakeLauncher(fake_engine)
    phases: list[str] = []
    runner = TrialRunner(
        launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0",
        settings=RunnerSettings(max_model_len=512, sample_interval_s=0.05),
        progress=lambda phase, done, total: phases.append(phase),
    )  # fmt: skip
    assert isinstance(runner, LoadTester)
    result = runner.run(request(small_shape))
    assert result.status is TrialStatus.MEASURED, result.reason
    assert result.completed == 24 and result.failed == 0
    assert result.output_tokens_per_s > 0 and result.goodput_tokens_per_s <= result.output_tokens_per_s
    assert result.request_throughput == pytest.approx(24 / result.duration_s)
    assert result.spec_decode is None
    assert result.kv_cache_usage == pytest.approx(0.25)
    assert launcher.stopped == 1
    assert {"launch", "warmup", "replay", "teardown"} <= set(phases)


def test_refused_config_is_infeasible_with_the_engine_reason(fake_engine, small_shape: TrafficShape) -> None:
    bad = EngineConfig(kv_cache_dtype="fp8")
    log = [
        "INFO starting",
        "Traceback (most recent call last):",
        '  File "cpu_attn.py", line 541, in _get_attn_isa',
        "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",
    ]
    launcher = FakeLauncher(fake_engine, refuse={bad.key(): log})
    runner = TrialRunner(launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0")
    result = runner.run(request(small_shape, bad))
    assert result.status is TrialStatus.INFEASIBLE
    assert result.reason == "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    assert result.log_tail[-1].endswith("AVX-512 or AMX.")
    assert launcher.stopped == 1


def test_engine_reason_fallbacks() -> None:
    assert engine_reason("engine not ready on /health within 5 s", ["loading..."]) == (
        "engine not ready on /health within 5 s"
    )
    assert engine_reason("exited", ["worker Killed"]).startswith("out of memory")


def test_cache_never_reruns_an_identical_trial(fake_engine, small_shape: TrafficShape, tmp_path: Path) -> None:
    path = tmp_path / "trials.json"
    launcher = FakeLauncher(fake_engine)
    runner = TrialRunner(
        launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0", cache=TrialCache(JsonFileStore(path))
    )
    first = runner.run(request(small_shape))
    again = runner.run(request(small_shape, seed=5))  # same key: config, shape bucket, model, GPU, engine
    assert again == first
    assert runner.runs == 1 and len(launcher.started) == 1
    # persisted: a new runner (new process, same file) does not run it either
    runner2 = TrialRunner(
        launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0", cache=TrialCache(JsonFileStore(path))
    )
    assert runner2.run(request(small_shape)) == first
    assert runner2.runs == 0 and len(launcher.started) == 1
    # anything in the key changes -> a new trial
    runner3 = TrialRunner(
        launcher, model="tiny", gpu_type="cpu", engine_version="0.33.0", cache=TrialCache(JsonFileStore(path))
    )
    runner3.run(request(small_shape))
    runner2.run(request(small_shape, EngineConfig(max_num_seqs=16)))
    assert len(launcher.started) == 3


def test_cancelled_and_failed_trials_are_not_cached(make_fake_engine, small_shape: TrafficShape) -> None:
    with make_fake_engine() as engine:
        engine.state.token_delay_s = 0.05
        launcher = FakeLauncher(engine)
        cache = TrialCache()
        runner = TrialRunner(launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0", cache=cache)
        timer = threading.Timer(0.5, runner.cancel)
        timer.start()
        result = runner.run(request(small_shape))
        timer.join()
    assert result.status is TrialStatus.FAILED and result.reason == "cancelled"
    assert len(cache) == 0
    assert launcher.stopped == 1


def test_trial_key_and_corrupt_cache_file(small_shape: TrafficShape, tmp_path: Path) -> None:
    key = TrialKey.of(model="m", gpu_type="H100", engine_version="0.32.0", config=EngineConfig(), shape=small_shape)
    assert key.encode() == f"m|H100|0.32.0|{EngineConfig().key()}|{small_shape.bucket()}"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInput, match=r"bad\.json"):
        TrialCache(JsonFileStore(bad))


def test_unreachable_quality_baseline_is_a_failed_measurement(fake_engine, small_shape: TrafficShape) -> None:
    from controller.trials.verdict.quality import QualityGate

    gate = QualityGate("http://127.0.0.1:9", "baseline")
    runner = TrialRunner(
        FakeLauncher(fake_engine), model="tiny", gpu_type="cpu", engine_version="0.32.0", quality_gate=gate
    )
    result = runner.run(request(small_shape))
    assert result.status is TrialStatus.FAILED
    assert result.reason.startswith("quality gate could not run")


def test_the_runners_own_cache_serves_only_what_holds_for_the_request(fake_engine, small_shape: TrafficShape) -> None:
    """The runner's cache applies TrialCache.lookup: a result judged under another SLO is measured again."""
    launcher = FakeLauncher(fake_engine)
    runner = TrialRunner(launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0", cache=TrialCache())
    first = runner.run(request(small_shape))
    assert runner.run(request(small_shape)) == first and runner.runs == 1
    tighter = TrialRequest(TARGET, EngineConfig(max_num_seqs=8), small_shape, SLO(ttft_seconds=0.5), BUDGET)
    again = runner.run(tighter)
    assert runner.runs == 2 and again.slo == tighter.slo
