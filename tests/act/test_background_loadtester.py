"""The background load tester: a synchronous load tester's trial runs on a worker thread and is polled."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from controller.act import ActContext, ActPorts, TrialSettings
from controller.act.effects import TrialRecorded, TrialStarted
from controller.act.trials import landed, run_trial
from controller.adapters.notify.recording import NopNotifier
from controller.domain.actions import RunTrial
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import TemporaryError
from controller.ports import LoadTester, TrialBudget, TrialRequest, TrialStarter
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from controller.trials.background import BackgroundLoadTester, BackgroundTrial
from tests.support.builders import failed_trial, shape

TARGET = TargetRef("team-a", "chat", "llama")
SHAPE = shape(4.0, 16.0, 512, 128, cv=0.5)
ACTION = RunTrial(EngineConfig(max_num_seqs=128), SHAPE, "trial 1/4")
SETTINGS = TrialSettings(slo=SLO(), budget=TrialBudget())


@dataclass
class Gated:
    """A synchronous load tester whose ``run`` waits until the test releases it."""

    release: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None

    def run(self, request: TrialRequest) -> TrialResult:
        self.release.wait()
        if self.error is not None:
            raise self.error
        return failed_trial(request.config, request.shape, slo=request.slo, reason="gated")


def ctx(tester: LoadTester) -> ActContext:
    return ActContext(TARGET, ActPorts(InMemoryRouter(), InMemoryCluster(), NopNotifier(), tester), SETTINGS)


@pytest.fixture
def gated() -> Gated:
    return Gated()


def test_a_started_trial_is_polled_until_it_lands(gated: Gated) -> None:
    tester = BackgroundLoadTester(gated)
    assert isinstance(tester, TrialStarter) and isinstance(tester, LoadTester)
    try:
        (started,) = run_trial(ACTION, ctx(tester))
        assert isinstance(started, TrialStarted)  # the handler returned while the trial runs
        assert landed(started, SETTINGS) is started
        gated.release.set()
        assert isinstance(started.handle, BackgroundTrial)
        started.handle.future.result()  # let the worker finish
        recorded = landed(started, SETTINGS)
        assert isinstance(recorded, TrialRecorded) and recorded.result.reason == "gated"
    finally:
        gated.release.set()
        tester.close()


def test_an_error_the_load_tester_raises_lands_as_a_failed_trial(gated: Gated) -> None:
    gated.error = TemporaryError("canary pool gone")
    gated.release.set()
    tester = BackgroundLoadTester(gated)
    try:
        (started,) = run_trial(ACTION, ctx(tester))
        assert isinstance(started, TrialStarted | TrialRecorded)
        if isinstance(started, TrialStarted):
            assert isinstance(started.handle, BackgroundTrial)
            started.handle.future.exception()  # let the worker finish
            recorded = landed(started, SETTINGS)
        else:
            recorded = started
        assert isinstance(recorded, TrialRecorded)
        assert recorded.result.status is TrialStatus.FAILED and "canary pool gone" in recorded.result.reason
    finally:
        tester.close()
