"""The act step executes exactly what decide said: each action type leads to exactly these port calls, with these
arguments, in this order, and nothing else (no replica count, weight or config is second-guessed on the way).
Handlers return effects; status changes only when the cycle folds them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from controller.act import ActPorts, Executor, TrialSettings, fold
from controller.act.effects import Effect, TrialRecorded
from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.records import ClusterCall
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
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import measured_trial, shape

TARGET = TargetRef("team-a", "chat", "llama")
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
SHAPE = shape(4.0, 16.0, 512, 128, cv=0.5)


@dataclass
class RecordingLoadTester:
    requests: list[TrialRequest] = field(default_factory=list)

    def run(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        return measured_trial(request)


@dataclass
class World:
    cluster: InMemoryCluster
    router: InMemoryRouter
    notifier: RecordingNotifier
    load_tester: RecordingLoadTester
    executor: Executor

    def act(self, status: TargetStatus, actions: Sequence[Action]) -> tuple[TargetStatus, list[TrialResult]]:
        effects = self.executor.execute(TARGET, actions)
        return fold(status, effects, keep_trials=200), trials_of(effects)

    def non_event_calls(self) -> list[ClusterCall]:
        return [c for c in self.cluster.calls if c.op != "event"]


@pytest.fixture
def world() -> World:
    clock = FakeClock()
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 8)
    cluster.deploy(TARGET, "candidate", MTP1, 2)
    cluster.calls.clear()
    notifier = RecordingNotifier()
    load_tester = RecordingLoadTester()
    ports = ActPorts(router=router, cluster=cluster, notifier=notifier, load_tester=load_tester)
    executor = Executor(ports, TrialSettings(slo=SLO(), budget=TrialBudget()))
    return World(cluster, router, notifier, load_tester, executor)


def trials_of(effects: Sequence[Effect]) -> list[TrialResult]:
    return [e.result for e in effects if isinstance(e, TrialRecorded)]


STABLE_OF_8 = TargetStatus(replicas=8)


@pytest.mark.parametrize(
    ("action", "expected_calls", "expected_weights"),
    [
        pytest.param(
            DeployCandidate(MTP1, 2, "warm up"),
            [ClusterCall("deploy", TARGET, "candidate", MTP1, 2)],
            [],
            id="deploy-candidate-with-the-decided-replicas-not-the-fleet-size",
        ),
        pytest.param(
            Scale("candidate", 3, "step needs 3"),
            [ClusterCall("scale", TARGET, "candidate", replicas=3)],
            [],
            id="scale-candidate",
        ),
        pytest.param(
            Scale("stable", 5, "fewer replicas hold the load"),
            [ClusterCall("scale", TARGET, "stable", replicas=5)],
            [],
            id="scale-stable",
        ),
        pytest.param(SetWeights(25, "step 2", step=1), [], [(TARGET, 25)], id="set-weights"),
        pytest.param(
            Promote(MTP1, "promoted"),
            [ClusterCall("promote", TARGET, "candidate")],
            [(TARGET, 0)],  # the in-memory cluster's promote sends everything to the new stable
            id="promote",
        ),
        pytest.param(
            Rollback("candidate regressed"),
            [ClusterCall("retire", TARGET, "candidate")],
            [(TARGET, 0)],
            id="rollback-sends-traffic-back-then-retires",
        ),
        pytest.param(Notify(Severity.INFO, "Rollout at 25%", "step 2"), [], [], id="notify"),
        pytest.param(RequestApproval("r-1", 0, "lossy config"), [], [], id="request-approval"),
    ],
)
def test_each_action_makes_exactly_its_port_calls(
    world: World, action: Action, expected_calls: list[ClusterCall], expected_weights: list[tuple[TargetRef, int]]
) -> None:
    _, trials = world.act(STABLE_OF_8, [action])
    assert world.non_event_calls() == expected_calls
    assert world.router.history == expected_weights
    assert trials == []
    events = [c for c in world.cluster.calls if c.op == "event"]
    assert [e.detail for e in events] == [f"{type(action).__name__}: {action.reason}"]
    posted = [n for _, n in world.notifier.posted]
    assert posted == ([action] if isinstance(action, Notify) else [])
    assert world.load_tester.requests == []


def test_deploy_candidate_against_a_larger_stable_fleet_deploys_what_decide_said(world: World) -> None:
    """DeployCandidate(replicas=2) against 8 stable replicas deploys 2: the first step's share, not the fleet."""
    world.act(STABLE_OF_8, [DeployCandidate(MTP1, 2, "warm up 2 replicas")])
    candidate = world.cluster.variant(TARGET, "candidate")
    assert candidate is not None and candidate.replicas == 2


def test_run_trial_sends_exactly_the_decided_config_shape_and_loop(world: World) -> None:
    status = STABLE_OF_8.model_copy(
        update={
            "tuning": TuningRound(id="t-1", window="day", shape=SHAPE, started_at=FakeClock().now(), reason="drift")
        }
    )
    action = RunTrial(MTP1, SHAPE, "probe at 2x", proposed_by="optimizer", loop="open")
    new_status, trials = world.act(status, [action])
    assert len(world.load_tester.requests) == 1
    request = world.load_tester.requests[0]
    assert (request.target, request.config, request.shape, request.loop) == (TARGET, MTP1, SHAPE, "open")
    assert request.slo == SLO()
    assert [t.config for t in trials] == [MTP1]
    assert new_status.tuning is not None and new_status.tuning.trial_keys == (MTP1.key(),)
    assert world.non_event_calls() == [] and world.router.history == []


def test_actions_run_in_the_decided_order(world: World) -> None:
    actions: list[Action] = [
        Rollback("breach"),
        Scale("stable", 9, "breach without capacity"),
        Notify(Severity.CRITICAL, "Rollback", "breach"),
    ]
    status, _ = world.act(STABLE_OF_8, actions)
    assert [(c.op, c.variant, c.replicas) for c in world.non_event_calls()] == [
        ("retire", "candidate", None),
        ("scale", "stable", 9),
    ]
    assert status.replicas == 9
    assert [e.detail.split(":")[0] for e in world.cluster.calls if e.op == "event"] == ["Rollback", "Scale", "Notify"]
