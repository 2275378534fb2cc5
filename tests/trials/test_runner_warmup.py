"""The runner's warm-up until steady (``RunnerSettings.warmup_rule``) against a fake engine on loopback: a cold
engine that speeds up after its first requests is warmed up for several rounds and then measured; an engine
that keeps getting faster never steadies, so the trial is ``invalid`` with the rounds' figures in its reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialStatus
from controller.ports import TrialBudget, TrialRequest
from controller.trials.engine.launchers import Launch
from controller.trials.loadgen.warmup import WarmupRule
from controller.trials.runner import RunnerSettings, TrialRunner
from tests.support.fake_engine import FakeEngine, FakeEngineState
from tests.trials.test_runner_cache import TARGET, FakeLauncher

BUDGET = TrialBudget(duration_s=60, warmup_s=60, max_requests=64, startup_timeout_s=5)


class ColdState(FakeEngineState):
    """Slow for the first ``cold_requests`` requests, then fast; or, with ``speedup``, faster with every round of 8
    requests (each round's tokens come ``speedup`` times sooner than the last round's, from 30 ms)."""

    cold_requests = 12
    speedup = 0.0

    @property
    def token_delay_s(self) -> float:
        if self.speedup:
            return 0.03 * (1.0 - self.speedup) ** (self.requests // 8)
        return 0.004 if self.requests <= self.cold_requests else 0.001

    @token_delay_s.setter
    def token_delay_s(self, value: float) -> None:  # the dataclass's __init__ sets it; the property decides
        pass


@pytest.fixture
def cold_engine() -> Iterator[FakeEngine]:
    with FakeEngine(ColdState()) as e:
        yield e


def _runner(engine: FakeEngine, rule: WarmupRule) -> tuple[TrialRunner, FakeLauncher]:
    launcher = FakeLauncher(engine)
    settings = RunnerSettings(max_model_len=512, sample_interval_s=0.05, warmup_rule=rule, client="inline")
    runner = TrialRunner(launcher, model="tiny", gpu_type="cpu", engine_version="0.32.0", settings=settings)
    return runner, launcher


def test_a_cold_engine_is_warmed_up_until_steady_then_measured(
    cold_engine: FakeEngine, small_shape: TrafficShape
) -> None:
    rule = WarmupRule(tolerance=0.3, stable_intervals=1, max_rounds=8)
    runner, _ = _runner(cold_engine, rule)
    result = runner.run(TrialRequest(TARGET, EngineConfig(max_num_seqs=8), small_shape, SLO(), BUDGET))
    assert result.status is TrialStatus.MEASURED, result.reason
    warmup_requests = cold_engine.state.requests - result.completed
    assert warmup_requests >= 3 * rule.round_requests(small_shape.concurrency)  # at least three rounds of 8
    # the result records the warm-up it needed: every warm-up request belongs to one of its rounds
    assert result.warmup_rounds >= 3
    assert warmup_requests == result.warmup_rounds * rule.round_requests(small_shape.concurrency)


def test_an_engine_that_never_steadies_makes_the_trial_invalid(small_shape: TrafficShape) -> None:
    state = ColdState()
    state.speedup = 0.4  # each round of 8 requests 40 % quicker than the last, far beyond a busy machine's noise
    with FakeEngine(state) as engine:
        # two quiet intervals in a row, as the default asks: one round slowed by the machine is not the end of it
        rule = WarmupRule(tolerance=0.05, stable_intervals=2, max_rounds=4)
        runner, launcher = _runner(engine, rule)
        fresh_start = launcher.start

        def start_fresh(config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
            state.requests = 0  # the retry gets a fresh engine, cold again
            return fresh_start(config, timeout_s=timeout_s)

        launcher.start = start_fresh  # type: ignore[method-assign]
        result = runner.run(TrialRequest(TARGET, EngineConfig(max_num_seqs=8), small_shape, SLO(), BUDGET))
    assert result.status is TrialStatus.INVALID
    assert result.warmup_rounds == rule.max_rounds
    assert "not steady after 4 warm-up rounds" in result.reason, result.reason
    assert "out tok/s per round" in result.reason
    assert len(launcher.started) == 2  # an invalid trial is retried once on a fresh engine, as for other causes
