"""How the notifiers deliver without blocking a reconcile: a bounded queue drained by one background thread, and
the outbox in front of it that both notifiers share (deduplication, rate limit, counts).

``submit`` returns at once: ``True`` when the job is queued, ``False`` when the queue is full or closed (the caller
counts and logs that). ``flush`` waits until every queued job has been delivered or given up; ``close`` flushes,
then stops the thread. ``deliver`` must not raise for delivery problems (a job that raises is given up, logged and
counted as done, so ``flush`` never waits for it forever).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

Job = TypeVar("Job")

#: The worker's stop signal; never a caller's job.
_STOP = object()


class DeliveryQueue(Generic[Job]):
    """``deliver`` each submitted job on a thread named ``name``, at most ``size`` jobs waiting."""

    def __init__(self, deliver: Callable[[Job], None], *, name: str, size: int = 100) -> None:
        self._deliver = deliver
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._closed = threading.Event()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=size)
        self._worker = threading.Thread(target=self._run, name=name, daemon=True)
        self._worker.start()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def submit(self, job: Job) -> bool:
        """Queue ``job``; ``False`` (nothing queued) when the queue is closed or full."""
        if self._closed.is_set():
            return False
        with self._lock:
            self._pending += 1
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            with self._lock:
                self._pending -= 1
            return False
        return True

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            try:
                self._deliver(job)  # type: ignore[arg-type]  # every other item is a submitted Job
            except Exception:  # a deliverer's own bug must not stop delivery of the rest
                logger.exception("%s: delivery failed", self._worker.name)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._idle.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued job is delivered (or given up); ``False`` on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=timeout)

    def close(self, timeout: float = 10.0, *, before_join: Callable[[], None] | None = None) -> None:
        """Deliver what is queued (up to ``timeout``), refuse new jobs, then stop the thread. ``before_join`` runs
        once new jobs are refused and before waiting for the thread (a notifier cancels its retries there)."""
        self.flush(timeout)
        self._closed.set()
        if before_join is not None:
            before_join()
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=1.0)
        self._worker.join(timeout=max(timeout, 1.0))


class TokenBucket:
    """``capacity`` tokens, refilled continuously at ``rate_per_s``; ``clock`` is a monotonic seconds source."""

    def __init__(self, *, capacity: float, rate_per_s: float, clock: Callable[[], float]) -> None:
        if capacity < 1 or rate_per_s <= 0:
            raise ValueError("a token bucket needs capacity >= 1 and rate_per_s > 0")
        self.capacity = capacity
        self.rate_per_s = rate_per_s
        self._clock = clock
        self._tokens = capacity
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


@dataclass
class DeliveryStats:
    """What became of the notifications a notifier was given (never holds a secret)."""

    enqueued: int = 0
    sent: int = 0
    failed: int = 0
    dropped_duplicate: int = 0
    dropped_rate_limited: int = 0
    dropped_queue_full: int = 0


@dataclass(frozen=True)
class Voice:
    """How a notifier names itself in its logs: ``slack: rate limit reached; ... not sent``."""

    logger: logging.Logger
    channel: str  # "slack"
    sender: str  # "notifier"
    verb: str  # "sent"


class Outbox(Generic[Job]):
    """What every notifier does before delivery, on the caller's thread: drop a repeat of the same key within
    ``dedup_window_s``, drop a message over the rate (a :class:`TokenBucket`) unless it is urgent, then queue the job
    for the :class:`DeliveryQueue`'s thread. Each outcome is counted in ``stats`` and logged in the notifier's
    ``voice``."""

    def __init__(
        self,
        deliver: Callable[[Job], None],
        *,
        stats: DeliveryStats,
        voice: Voice,
        name: str,
        size: int,
        dedup_window_s: float,
        burst: int,
        rate_per_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.stats = stats
        self.voice = voice
        self.dedup_window_s = dedup_window_s
        self._clock = clock
        self._bucket = TokenBucket(capacity=burst, rate_per_s=rate_per_s, clock=clock)
        self._seen: dict[Hashable, float] = {}
        self._lock = threading.Lock()
        self._delivery = DeliveryQueue(deliver, name=name, size=size)

    def admit(self, key: Hashable, *, urgent: bool, title: str, target: object) -> bool:
        """Whether a message with ``key`` may go out now (not a recent repeat, within the rate or urgent)."""
        now = self._clock()
        v = self.voice
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if now - t < self.dedup_window_s}
            if key in self._seen:
                self.stats.dropped_duplicate += 1
                v.logger.debug("%s: duplicate %r for %s dropped", v.channel, title, target)
                return False
            if not self._bucket.take() and not urgent:
                self.stats.dropped_rate_limited += 1
                v.logger.warning("%s: rate limit reached; %r for %s not %s", v.channel, title, target, v.verb)
                return False
            self._seen[key] = now
        return True

    def count_duplicate(self) -> None:
        with self._lock:
            self.stats.dropped_duplicate += 1

    def submit(self, job: Job, label: str) -> None:
        """Queue ``job`` (``label`` names it in the logs); a closed or full queue drops it, counted and logged."""
        v = self.voice
        if self._delivery.closed:
            v.logger.warning("%s: %s closed; %s not %s", v.channel, v.sender, label, v.verb)
            return
        if not self._delivery.submit(job):
            with self._lock:
                self.stats.dropped_queue_full += 1
            v.logger.warning("%s: queue full; %s not %s", v.channel, label, v.verb)
            return
        with self._lock:
            self.stats.enqueued += 1

    def flush(self, timeout: float = 10.0) -> bool:
        return self._delivery.flush(timeout)

    def close(self, timeout: float = 10.0, *, before_join: Callable[[], None] | None = None) -> None:
        self._delivery.close(timeout, before_join=before_join)
