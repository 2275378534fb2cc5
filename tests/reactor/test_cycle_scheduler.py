"""Every TunedService's cycles on a few shared threads (:class:`CycleQueue`, :class:`CycleScheduler`): a cycle is
handed out when it is due, a spec change before every routine cycle, one TunedService never twice at once, and a
TunedService removed (deleted) holds nothing, even when its cycle was running at the time. Driven on a clock that
moves only when the test says."""

from __future__ import annotations

import pytest

from controller.reactor.loop import CycleReport
from controller.reactor.scheduler import CycleQueue, CycleScheduler

pytestmark = pytest.mark.kube


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


A, B, C = ("team-a", "a"), ("team-b", "b"), ("team-c", "c")


def test_cycles_are_handed_out_when_due_and_a_spec_change_first() -> None:
    clock = Clock()
    queue = CycleQueue(clock)
    for key in (A, B, C):
        assert queue.add(key)
    assert not queue.add(A)  # already held: one entry per TunedService
    assert [queue.take(0.0) for _ in range(3)] == [A, B, C]  # due now, in the order they came
    assert queue.take(0.0) is None  # each is running: none is handed out twice
    assert queue.done(A, 30.0) and queue.done(B, 10.0) and queue.done(C, 20.0)
    assert queue.take(0.0) is None  # none due yet
    clock.now = 25.0
    assert [queue.take(0.0), queue.take(0.0), queue.take(0.0)] == [B, C, None]  # by when they are due
    assert queue.done(B, 10.0) and queue.done(C, 10.0)

    assert queue.wake(A)  # a spec change: due now, before the routine cycles due earlier
    assert not queue.wake(A)  # already woken
    clock.now = 40.0
    assert queue.take(0.0, changes_only=True) == A
    assert queue.take(0.0, changes_only=True) is None  # the changes-only taker leaves routine cycles alone
    assert queue.take(0.0) == B
    assert not queue.wake(("team-x", "unknown"))  # not held: nothing to wake


def test_a_change_seen_while_its_cycle_runs_gets_another_cycle_at_once() -> None:
    clock = Clock()
    queue = CycleQueue(clock)
    queue.add(A)
    assert queue.take(0.0) == A
    assert queue.wake(A)  # the running cycle may have read the old generation
    assert queue.take(0.0) is None  # not handed out twice at once
    assert queue.done(A, 600.0)
    assert queue.take(0.0) == A  # not after its requeue: now


def test_a_tunedservice_removed_holds_nothing_even_mid_cycle() -> None:
    clock = Clock()
    queue = CycleQueue(clock)
    for key in (A, B):
        queue.add(key)
    assert queue.remove(B)  # idle: forget it now
    assert not queue.remove(B)  # not held any more
    assert queue.take(0.0) == A
    assert not queue.remove(A)  # its cycle runs: forgotten when it ends, not now
    assert not queue.done(A, 1.0)  # ... which says so
    assert queue.held() == set()
    clock.now = 100.0
    assert queue.take(0.0) is None

    queue.add(C)
    assert queue.take(0.0) == C
    assert not queue.done(C, 1.0, gone=True)  # the cycle found it deleted
    assert queue.held() == set()


def test_a_tunedservice_created_again_while_the_old_ones_cycle_ran_is_cycled_afresh() -> None:
    clock = Clock()
    queue = CycleQueue(clock)
    queue.add(A)
    assert queue.take(0.0) == A
    queue.remove(A)  # deleted mid-cycle ...
    assert queue.add(A)  # ... and created again under the same name
    assert not queue.done(A, 600.0)  # the old one's state is forgotten
    assert queue.held() == {A}
    assert queue.take(0.0) == A  # the new one's first cycle, due now


def test_a_closed_queue_hands_out_nothing_until_opened() -> None:
    queue = CycleQueue(Clock())
    queue.add(A)
    queue.close()
    assert queue.take(0.0) is None
    queue.open()
    assert queue.take(0.0) == A


class FakeLoop:
    """The control loop as the scheduler sees it: cycles answered from a script, what was forgotten."""

    def __init__(self, reports: dict[tuple[str, str], CycleReport]) -> None:
        self.reports = reports
        self.holders: list[object] = []
        self.forgotten: list[tuple[str, str]] = []
        self.cycles: list[tuple[str, str]] = []
        self.generations: dict[tuple[str, str], int] = {}

    def cycle(self, namespace: str, name: str) -> CycleReport:
        self.cycles.append((namespace, name))
        return self.reports[(namespace, name)]

    def notice(self, namespace: str, name: str, generation: int | None) -> bool:
        seen = self.generations.get((namespace, name))
        return seen is not None and seen != generation

    def forget(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))


def test_the_scheduler_reschedules_by_each_cycles_requeue_and_forgets_the_deleted() -> None:
    clock = Clock()
    loop = FakeLoop(
        {A: CycleReport(acted=True, sleep_s=60.0), B: CycleReport(acted=False, sleep_s=1.0, reason="deleted")}
    )
    scheduler = CycleScheduler(loop, queue=CycleQueue(clock))  # type: ignore[arg-type]
    assert loop.holders == [scheduler.queue.held]  # its entries count in the loop's held gauge
    scheduler.add(*A)
    scheduler.add(*B)
    for _ in range(2):
        key = scheduler.queue.take(0.0)
        assert key is not None
        scheduler.run_once(key)
    assert loop.forgotten == [B]  # the cycle found it gone
    assert scheduler.queue.held() == {A}
    clock.now = 59.0
    assert scheduler.queue.take(0.0) is None
    clock.now = 60.0
    assert scheduler.queue.take(0.0) == A
    scheduler.remove(*A)  # deleted while its cycle runs
    assert loop.forgotten == [B]
    assert not scheduler.run_once(A)
    assert loop.forgotten == [B, A]
    assert scheduler.queue.held() == set()

    loop.generations[C] = 1
    assert not scheduler.notice(*C, 1)  # held from its first event; nothing new
    assert scheduler.queue.held() == {C}
    assert scheduler.notice(*C, 2)  # a new generation: woken
    assert scheduler.queue.take(0.0, changes_only=True) == C
