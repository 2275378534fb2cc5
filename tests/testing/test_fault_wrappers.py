"""The fault-injecting port wrappers behave like the failures they stand for."""

from __future__ import annotations

import pytest

from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import AdvisorUnavailable, ClusterConflict
from controller.ports import TrialRequest
from controller.testing.faults import (
    CanaryFailure,
    ConflictBudget,
    ConflictingCluster,
    ConflictingRouter,
    FaultyLoadTester,
    GarbageAdvisor,
    UnavailableAdvisor,
    canary_failure_result,
    fail_calls,
    restart_operator,
    wire_roundtrip,
)
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import shape
from tests.support.faults import SimWorld

pytestmark = pytest.mark.faults

TARGET = TargetRef("prod", "workhorse", "m")
SHAPE = shape(2, 16, 512, 256)
REQUEST = TrialRequest(target=TARGET, config=EngineConfig(max_num_seqs=256), shape=SHAPE, slo=SLO())


@pytest.mark.parametrize(
    ("failure", "status", "words"),
    [
        (CanaryFailure.CRASH, TrialStatus.INFEASIBLE, "SIGSEGV"),
        (CanaryFailure.OOM, TrialStatus.INFEASIBLE, "out of memory"),
        (CanaryFailure.STARTUP_TIMEOUT, TrialStatus.INFEASIBLE, "not ready after 900 s"),
        (CanaryFailure.NODE_GONE, TrialStatus.FAILED, "canary pool unavailable"),
    ],
)
def test_canary_failures_are_data_with_reason_and_log_tail(
    failure: CanaryFailure, status: TrialStatus, words: str
) -> None:
    result = canary_failure_result(REQUEST, failure)
    assert result.status is status and words in result.reason
    assert result.log_tail and not result.ok and result.objective() == 0.0
    assert result.config == REQUEST.config and result.shape == SHAPE


class _Measured:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, request: TrialRequest) -> TrialResult:
        self.runs += 1
        return canary_failure_result(request, CanaryFailure.NODE_GONE).model_copy(update={"reason": "inner ran"})


def test_faulty_load_tester_fails_only_the_planned_calls() -> None:
    inner = _Measured()
    tester = FaultyLoadTester(inner, fail_calls({1: CanaryFailure.OOM}))
    reasons = [tester.run(REQUEST).reason for _ in range(3)]
    assert reasons[0] == "inner ran" and "out of memory" in reasons[1] and reasons[2] == "inner ran"
    assert inner.runs == 2 and [f for _, f in tester.calls] == [None, CanaryFailure.OOM, None]


def test_conflict_budget_is_shared_and_nothing_is_written_while_it_lasts() -> None:
    budget = ConflictBudget(remaining=2)
    router = InMemoryRouter()
    cluster = InMemoryCluster()
    r, c = ConflictingRouter(router, budget), ConflictingCluster(cluster, budget)
    with pytest.raises(ClusterConflict, match="409"):
        r.set_weight(TARGET, 5)
    with pytest.raises(ClusterConflict):
        c.deploy(TARGET, "candidate", STOCK, 1)
    assert router.get_weight(TARGET) == 0 and cluster.calls == []
    r.set_weight(TARGET, 5)
    c.deploy(TARGET, "candidate", STOCK, 1)
    assert router.get_weight(TARGET) == 5 and c.ready_replicas(TARGET, "candidate") == 1
    assert budget.raised == ["route weight 5", "deploy candidate"]


def test_advisors_fail_or_answer_garbage() -> None:
    ctx = AdvisorContext(TARGET, SHAPE, SLO(), STOCK, (), 2)
    with pytest.raises(AdvisorUnavailable):
        UnavailableAdvisor().propose(ctx)
    garbage = GarbageAdvisor().propose(ctx)
    assert STOCK in [p.config for p in garbage] and len(garbage) >= 4


def test_restart_round_trips_the_status_through_json_and_builds_a_new_reconciler() -> None:
    world = SimWorld()
    world.run(12)
    assert world.status.phase is Phase.ROLLING_OUT and world.status.rollout is not None
    old = world.reconciler
    reconciler, status = restart_operator(world.status, world.build_reconciler)
    assert reconciler is not old
    assert status == world.status == wire_roundtrip(status)
