"""Each act handler on in-memory ports: the port calls it makes and the effects it returns. Also the registry: every
action type has a handler, and an executor missing one refuses to start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

import pytest

from controller.act import (
    HANDLERS,
    ActContext,
    ActPorts,
    Executor,
    TrialSettings,
    approvals,
    deployments,
    notify,
    routing,
    trials,
)
from controller.act.effects import (
    ApprovalRequested,
    CandidateDeployed,
    EventFailed,
    EventRecorded,
    Notified,
    Promoted,
    RolledBack,
    Scaled,
    TrialRecorded,
    TrialStarted,
    WeightsSet,
)
from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Promote,
    RequestApproval,
    Rollback,
    RunTrial,
    Scale,
    SetWeights,
    Severity,
)
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import PermanentError, TemporaryError
from controller.ports import TrialBudget, TrialRequest
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import failed_trial, shape

TARGET = TargetRef("team-a", "chat", "llama")
A = EngineConfig(max_num_seqs=128)
SHAPE = shape(4.0, 16.0, 512, 128, cv=0.5)
SETTINGS = TrialSettings(slo=SLO(ttft_seconds=1.5), budget=TrialBudget(duration_s=60.0, warmup_s=5.0), seed=3)


def failed(request: TrialRequest) -> TrialResult:
    return failed_trial(request.config, request.shape, slo=request.slo)


@dataclass
class RunOnly:
    requests: list[TrialRequest] = field(default_factory=list)
    error: Exception | None = None

    def run(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        return failed(request)


@dataclass
class Handle:
    result: TrialResult | None = None

    def poll(self) -> TrialResult | None:
        return self.result


@dataclass
class Background:
    handles: list[Handle] = field(default_factory=list)

    def start(self, request: TrialRequest) -> Handle:
        self.handles.append(Handle())
        return self.handles[-1]

    def run(self, request: TrialRequest) -> TrialResult:
        raise AssertionError("started, not run")


@dataclass
class Fakes:
    router: InMemoryRouter
    cluster: InMemoryCluster
    notifier: RecordingNotifier

    def ctx(self, load_tester: RunOnly | Background | None = None) -> ActContext:
        ports = ActPorts(self.router, self.cluster, self.notifier, load_tester or RunOnly())
        return ActContext(TARGET, ports, SETTINGS)


@pytest.fixture
def fakes() -> Fakes:
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=FakeClock(), router=router)
    cluster.deploy(TARGET, "stable", STOCK, 4)
    cluster.deploy(TARGET, "candidate", A, 1)
    cluster.calls.clear()
    return Fakes(router, cluster, RecordingNotifier())


def test_every_action_type_has_a_handler() -> None:
    assert set(get_args(Action)) == set(HANDLERS)


def test_an_executor_without_a_handler_for_an_action_type_refuses_to_start(fakes: Fakes) -> None:
    partial = {k: v for k, v in HANDLERS.items() if k is not Scale}
    with pytest.raises(PermanentError, match="Scale"):
        Executor(fakes.ctx().ports, SETTINGS, handlers=partial)


def test_routing_sets_the_decided_weight(fakes: Fakes) -> None:
    assert routing.set_weights(SetWeights(25, "step 2", step=1), fakes.ctx()) == (WeightsSet(25),)
    assert fakes.router.history == [(TARGET, 25)]


def test_deploy_candidate(fakes: Fakes) -> None:
    assert deployments.deploy_candidate(DeployCandidate(A, 2, "warm"), fakes.ctx()) == (CandidateDeployed(A, 2),)
    assert fakes.cluster.ops() == ["deploy candidate x2"]


def test_scale(fakes: Fakes) -> None:
    assert deployments.scale(Scale("stable", 6, "more load"), fakes.ctx()) == (Scaled("stable", 6),)
    assert fakes.cluster.ops() == ["scale stable x6"]


def test_promote_and_promote_again(fakes: Fakes) -> None:
    assert deployments.promote(Promote(A, "better"), fakes.ctx()) == (Promoted(A),)
    # applied before a lost status write: the candidate is already stable; done, not an error
    assert deployments.promote(Promote(A, "better"), fakes.ctx()) == (Promoted(A, already=True),)
    assert fakes.cluster.ops() == ["promote candidate", "promote candidate"]


def test_rollback_sends_traffic_back_then_retires(fakes: Fakes) -> None:
    fakes.router.set_weight(TARGET, 25)
    assert deployments.rollback(Rollback("breach"), fakes.ctx()) == (RolledBack(),)
    assert fakes.router.history[-1] == (TARGET, 0)
    assert fakes.cluster.ops() == ["retire candidate"]


def test_notify_posts_the_notification(fakes: Fakes) -> None:
    note = Notify(Severity.INFO, "Rollout at 25%", "step 2")
    assert notify.notify(note, fakes.ctx()) == (Notified("Rollout at 25%"),)
    assert fakes.notifier.posted == [(TARGET, note)]


@pytest.mark.parametrize(
    ("action", "warning"),
    [
        (Rollback("breach"), True),
        (Notify(Severity.WARNING, "t", "r"), True),
        (Notify(Severity.INFO, "t", "r"), False),
        (Scale("stable", 3, "r"), False),
    ],
)
def test_every_action_leaves_an_event(fakes: Fakes, action: Action, warning: bool) -> None:
    kind = type(action).__name__
    assert notify.record_event(action, fakes.ctx()) == EventRecorded(kind, warning)
    assert [(e.reason, e.message, e.warning) for e in fakes.cluster.events] == [(kind, action.reason, warning)]


def test_an_event_that_cannot_be_recorded_is_an_effect_not_an_error(fakes: Fakes) -> None:
    class NoEvents(InMemoryCluster):
        def record_event(
            self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
        ) -> None:
            raise TemporaryError("events API down")

    ctx = ActContext(TARGET, ActPorts(fakes.router, NoEvents(), fakes.notifier, RunOnly()), SETTINGS)
    assert notify.record_event(Scale("stable", 3, "r"), ctx) == EventFailed("Scale", "events API down")


def test_request_approval_touches_no_port(fakes: Fakes) -> None:
    assert approvals.request_approval(RequestApproval("r-1", 2, "lossy"), fakes.ctx()) == (ApprovalRequested("r-1", 2),)
    assert fakes.cluster.calls == [] and fakes.router.history == [] and fakes.notifier.posted == []


def test_a_run_only_trial_is_recorded_at_once_with_the_decided_request(fakes: Fakes) -> None:
    tester = RunOnly()
    action = RunTrial(A, SHAPE, "trial 1/4", "agent", loop="open", repeat=True)
    (effect,) = trials.run_trial(action, fakes.ctx(tester))
    (request,) = tester.requests
    assert effect == TrialRecorded(action, failed(request))
    assert (request.target, request.config, request.shape, request.loop, request.fresh) == (
        TARGET,
        A,
        SHAPE,
        "open",
        True,
    )
    assert (request.slo, request.seed, request.budget) == (SETTINGS.slo, 3, SETTINGS.budget.for_shape(SHAPE))


def test_a_load_tester_that_raises_gives_a_failed_trial(fakes: Fakes) -> None:
    action = RunTrial(A, SHAPE, "trial 1/4")
    (effect,) = trials.run_trial(action, fakes.ctx(RunOnly(error=TemporaryError("canary pool gone"))))
    assert isinstance(effect, TrialRecorded)
    assert effect.result.status is TrialStatus.FAILED and "canary pool gone" in effect.result.reason


def test_a_background_trial_is_started_then_lands_when_polled(fakes: Fakes) -> None:
    tester = Background()
    action = RunTrial(A, SHAPE, "trial 1/4")
    (started,) = trials.run_trial(action, fakes.ctx(tester))
    assert started == TrialStarted(action, tester.handles[0])
    assert trials.landed(started, SETTINGS) is started  # still running
    done = failed(trials.request_for(action, TARGET, SETTINGS))
    tester.handles[0].result = done
    assert trials.landed(started, SETTINGS) == TrialRecorded(action, done)
