"""Trials do not block the cycle: a cycle that starts a trial a background load tester runs returns at once with a
short requeue, the next cycles poll it, and the one that finds it finished records exactly what a load tester that
completes at once would have recorded. A run-only load tester still completes in the cycle that starts it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide import Rules
from controller.decide.requeue import TRIAL_POLL_S
from controller.domain import STOCK, EngineConfig, LengthDistribution, Observation, Phase, TrafficShape
from controller.domain.observation import TargetRef, VariantStats
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.trial import TrialResult
from controller.policy import load_policy
from controller.ports import TrialRequest
from controller.reconcile import CycleResult, Ports, Reconciler
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


class StaticMetrics:
    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        stable = VariantStats(
            variant="stable", requests=3000, ttft_p95_s=0.3, tpot_p95_s=0.02, output_tokens_per_s=300.0
        )
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
class InstantLoadTester:
    """Completes inside ``run`` (like the simulator's load tester)."""

    requests: list[TrialRequest] = field(default_factory=list)

    def run(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        return measured(request)


@dataclass
class SlowHandle:
    request: TrialRequest
    finishes_on_poll: int
    polls: int = 0

    def poll(self) -> TrialResult | None:
        self.polls += 1
        return measured(self.request) if self.polls >= self.finishes_on_poll else None


@dataclass
class SlowLoadTester:
    """Runs trials in the background; each finishes on its handle's ``finishes_on_poll``-th poll."""

    finishes_on_poll: int = 3
    handles: list[SlowHandle] = field(default_factory=list)

    def start(self, request: TrialRequest) -> SlowHandle:
        handle = SlowHandle(request, self.finishes_on_poll)
        self.handles.append(handle)
        return handle

    def run(self, request: TrialRequest) -> TrialResult:
        raise AssertionError("a background load tester is started and polled, never run")


@dataclass
class World:
    clock: FakeClock
    cluster: InMemoryCluster
    advisor: CountingAdvisor
    reconciler: Reconciler

    def cycle(self, status: TargetStatus, *, after_s: float = 0.0) -> CycleResult:
        self.clock.advance(after_s)
        return self.reconciler.reconcile(TARGET, status)


def world(load_tester: InstantLoadTester | SlowLoadTester) -> World:
    clock = FakeClock(NOW)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 2)
    advisor = CountingAdvisor()
    ports = Ports(
        metrics=StaticMetrics(),
        load_tester=load_tester,
        router=router,
        advisor=advisor,
        notifier=RecordingNotifier(),
        cluster=cluster,
        clock=clock,
    )
    return World(clock, cluster, advisor, Reconciler(ports, Rules.from_policy(POLICY)))


def trialling() -> TargetStatus:
    round_ = TuningRound(id="day-1", window="all-day", shape=SHAPE, started_at=NOW - timedelta(minutes=5), reason="x")
    return TargetStatus(phase=Phase.TRIALLING, tuning=round_, replicas=2, updated_at=NOW)


def test_a_run_only_load_tester_records_its_trial_in_the_cycle_that_starts_it() -> None:
    tester = InstantLoadTester()
    result = world(tester).cycle(trialling())
    assert [r.config for r in tester.requests] == [SEQS128]
    assert [t.config for t in result.trials] == [SEQS128]
    assert result.status.tuning is not None and result.status.tuning.trial_keys == (SEQS128.key(),)
    assert result.requeue_after_s == 30.0  # trialling: the usual requeue, nothing in flight


def test_a_slow_trial_does_not_block_the_cycle_and_its_result_lands_on_the_third_poll() -> None:
    instant = world(InstantLoadTester()).cycle(trialling())

    tester = SlowLoadTester(finishes_on_poll=3)
    w = world(tester)
    stored = trialling()
    first = w.cycle(stored)
    assert [h.request.config for h in tester.handles] == [SEQS128]  # started ...
    assert first.trials == () and first.requeue_after_s == TRIAL_POLL_S  # ... not waited for
    assert first.status.tuning == stored.tuning and first.status.trials == ()
    assert first.status.phase is Phase.TRIALLING

    second = w.cycle(first.status, after_s=first.requeue_after_s)
    assert second.trials == () and second.requeue_after_s == TRIAL_POLL_S
    assert len(tester.handles) == 1 and tester.handles[0].polls == 2  # polled, not started again
    assert w.advisor.calls == 1  # nothing decided while the trial runs

    third = w.cycle(second.status, after_s=second.requeue_after_s)
    assert tester.handles[0].polls == 3
    assert [t.config for t in third.trials] == [SEQS128]
    # exactly what the run-only load tester recorded in its one cycle
    assert third.status == instant.status
    assert third.requeue_after_s == instant.requeue_after_s
    assert third.plan.actions == instant.plan.actions
    assert [e.reason for e in w.cluster.events] == ["Trials"]  # one Event (the code in CamelCase), when it started

    w.cycle(third.status, after_s=third.requeue_after_s)
    assert w.advisor.calls == 2  # the next cycle decides afresh ...
    assert len(tester.handles) == 1  # ... from the recorded trial: SEQS128 is not trialled again
