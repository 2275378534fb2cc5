"""A bounded queue drained by one background thread: how the notifiers deliver without blocking a reconcile.

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
from collections.abc import Callable
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
