"""The notifiers' background delivery: bounded, never blocks the caller, flushes and closes cleanly."""

from __future__ import annotations

import threading

from controller.adapters.notify.delivery_queue import DeliveryQueue


def test_jobs_are_delivered_in_order_and_flush_waits_for_them() -> None:
    delivered: list[int] = []
    q: DeliveryQueue[int] = DeliveryQueue(delivered.append, name="t-order", size=10)
    assert all(q.submit(i) for i in range(5))
    assert q.flush(5.0)
    assert delivered == [0, 1, 2, 3, 4]
    q.close(1.0)


def test_a_full_queue_refuses_without_blocking_and_flush_times_out_while_delivery_is_stuck() -> None:
    release = threading.Event()
    started = threading.Event()

    def stuck(job: str) -> None:
        started.set()
        release.wait(10)

    q: DeliveryQueue[str] = DeliveryQueue(stuck, name="t-full", size=2)
    assert q.submit("in delivery")
    assert started.wait(5)
    assert q.submit("waiting 1") and q.submit("waiting 2")
    assert q.submit("over the bound") is False
    assert q.flush(0.05) is False
    release.set()
    assert q.flush(5.0)
    q.close(1.0)


def test_a_deliverer_that_raises_does_not_stop_the_rest_and_close_refuses_new_jobs() -> None:
    delivered: list[str] = []

    def deliver(job: str) -> None:
        if job == "bad":
            raise RuntimeError("a bug in the deliverer")
        delivered.append(job)

    q: DeliveryQueue[str] = DeliveryQueue(deliver, name="t-raise", size=10)
    for job in ("a", "bad", "b"):
        assert q.submit(job)
    assert q.flush(5.0)
    assert delivered == ["a", "b"]
    cancelled: list[bool] = []
    q.close(1.0, before_join=lambda: cancelled.append(q.closed))
    assert cancelled == [True]  # new jobs are refused before the thread is joined
    assert q.closed and q.submit("late") is False
    assert delivered == ["a", "b"]
