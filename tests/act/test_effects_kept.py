"""No effect lost: when a later action of a cycle fails with a temporary error, what the earlier actions produced
(a started or finished trial) is kept, the next cycle retries only the failed action and those after it, and the
cycle that completes them folds everything once. Nothing is done twice.

The decision here is a tuning round's trial followed by a scale-up on an SLO breach (``[RunTrial, Scale]``), with
the Scale refused once by a 409 (``ConflictingCluster``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide import Rules
from controller.domain import STOCK, EngineConfig, LengthDistribution, Observation, Phase, TrafficShape
from controller.domain.observation import TargetRef, VariantStats
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.trial import TrialResult
from controller.policy import load_policy
from controller.ports import LoadTester, TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.testing.faults import ConflictBudget, ConflictingCluster
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import measured_trial

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TARGET = TargetRef("team-a", "chat", "llama")
POLICY = load_policy(Path(__file__).parents[2] / "policies" / "v1" / "default.yaml")
SEQS128 = EngineConfig(max_num_seqs=128, max_num_batched_tokens=4096)
SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=16.0,
    prompt_tokens=LengthDistribution(mean=512, cv=0.5),
    output_tokens=LengthDistribution(mean=128, cv=0.5),
)


class BreachingMetrics:
    """Stable misses its TTFT and TPOT SLOs: the cycle scales up (no probed capacity) beside its trial."""

    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        stable = VariantStats(variant="stable", requests=3000, ttft_p95_s=9.0, tpot_p95_s=0.5, output_tokens_per_s=300)
        return Observation(target=str(target), start=start, end=end, shape=SHAPE, variants={"stable": stable})


@dataclass
class CountingAdvisor:
    calls: int = 0

    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        self.calls += 1
        return (Proposal(SEQS128, "fewer sequences, smaller batches", "optimizer"),)


def measured(request: TrialRequest) -> TrialResult:
    return measured_trial(request)


@dataclass
class Handle:
    request: TrialRequest
    finishes_on_poll: int
    polls: int = 0

    def poll(self) -> TrialResult | None:
        self.polls += 1
        return measured(self.request) if self.polls >= self.finishes_on_poll else None


@dataclass
class Canary:
    """Counts every trial it is asked for; runs each inside the cycle (as the simulator's load tester does)."""

    started: list[Handle] = field(default_factory=list)

    def run(self, request: TrialRequest) -> TrialResult:
        self.started.append(Handle(request, 1))
        return measured(request)


class BackgroundCanary(Canary):
    """Starts trials and lets them be polled; each finishes on its 3rd poll (as the kubernetes backend's worker)."""

    def start(self, request: TrialRequest) -> Handle:
        handle = Handle(request, 3)
        self.started.append(handle)
        return handle


def trialling() -> TargetStatus:
    round_ = TuningRound(id="day-1", window="all-day", shape=SHAPE, started_at=NOW - timedelta(minutes=5), reason="x")
    return TargetStatus(phase=Phase.TRIALLING, tuning=round_, replicas=2, updated_at=NOW)


def run(canary: LoadTester, conflicts: int, cycles: int = 6) -> tuple[TargetStatus, InMemoryCluster, CountingAdvisor]:
    clock = FakeClock(NOW)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 2)
    budget = ConflictBudget()
    advisor = CountingAdvisor()
    ports = Ports(
        metrics=BreachingMetrics(),
        load_tester=canary,
        router=router,
        advisor=advisor,
        notifier=RecordingNotifier(),
        cluster=ConflictingCluster(cluster, budget, events=False),
        clock=clock,
    )
    rules = Rules.from_policy(POLICY, (), replicas=(1, 8))
    reconciler = Reconciler(ports, rules)
    status = trialling()
    budget.remaining = conflicts  # the cycle's Scale (after its RunTrial) is refused this many times
    for _ in range(cycles):
        result = reconciler.reconcile(TARGET, status)
        status = result.status
        clock.advance(result.requeue_after_s)
        if status.trials:
            break
    return status, cluster, advisor


@pytest.mark.parametrize(
    ("background", "conflicts"),
    [(True, 1), (False, 1), (True, 3), (False, 3)],
    ids=["background-trial-1x409", "in-cycle-trial-1x409", "background-trial-3x409", "in-cycle-trial-3x409"],
)
def test_a_trial_done_before_a_failed_scale_is_kept_and_not_run_again(background: bool, conflicts: int) -> None:
    canary = BackgroundCanary() if background else Canary()
    status, cluster, advisor = run(canary, conflicts)
    assert [h.request.config for h in canary.started] == [SEQS128]  # started once, across the retried cycles
    assert advisor.calls == 1  # the decision was kept, not made again
    assert [t.config for t in status.trials] == [SEQS128]  # and its trial folded once
    assert status.tuning is not None and status.tuning.trial_keys == (SEQS128.key(),)
    scales = [c for c in cluster.calls if c.op == "scale"]
    assert [c.replicas for c in scales] == [3] and status.replicas == 3  # the refused Scale retried until it held

    baseline_status, _, _ = run(BackgroundCanary() if background else Canary(), 0)
    assert status.model_dump(exclude={"updated_at", "last_reasons"}) == baseline_status.model_dump(
        exclude={"updated_at", "last_reasons"}
    )  # the same status a cycle without the 409 folded
