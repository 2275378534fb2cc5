"""Every TunedService's cycles on a few shared threads: :class:`CycleQueue` keeps when each one's next cycle is due
(a spec change first), :class:`CycleScheduler` runs the due ones on ``workers`` threads.

The cost of a TunedService is then its entry in the queue, not a thread and a kopf daemon of its own for as long as
it lives. The watch (kopf's event handler) adds TunedServices, wakes one whose generation changed and removes a
deleted one; a cycle that finds its TunedService gone drops it too. A TunedService removed while its cycle runs is
forgotten once that cycle ends, so nothing of it is recorded again after it was dropped.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from controller.reactor.loop import ControlLoop

log = logging.getLogger(__name__)

Key = tuple[str, str]

#: Threads running cycles: two, so one cycle waiting on the API does not hold the others up, and no more, since
#: cycles are mostly Python (one interpreter lock) and each runnable thread lengthens the others' cycles. One more
#: answers spec changes only (:meth:`CycleQueue.take`).
CYCLE_WORKERS = 2


class CycleQueue:
    """When each TunedService's next cycle is due. Thread-safe; ``clock`` is monotonic seconds.

    :meth:`take` hands out the TunedService woken for a spec change first (in the order they were woken), then
    the one due earliest; one TunedService is never handed out twice at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._due: dict[Key, float] = {}
        """Every TunedService held, with when its next cycle is due (a running one: when it was taken)."""
        self._heap: list[tuple[float, int, Key]] = []
        """(due, tie-break, key); an entry whose due no longer matches ``_due`` is stale and skipped."""
        self._changed: dict[Key, None] = {}
        """Woken for a spec change, not yet taken, in order."""
        self._running: set[Key] = set()
        self._gone: set[Key] = set()
        """Removed while their cycle ran: forgotten when it ends."""
        self._again: set[Key] = set()
        """Removed while their cycle ran, then added again (a new object of the same name)."""
        self._seq = itertools.count()
        self._closed = False

    def _push(self, key: Key, due: float) -> None:
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._cond.notify_all()

    def add(self, key: Key) -> bool:
        """Hold ``key`` with a cycle due now; True when it was not held (or was being removed)."""
        with self._cond:
            if key in self._gone:
                self._again.add(key)
                return True
            if key in self._due:
                return False
            self._push(key, self._clock())
            return True

    def wake(self, key: Key) -> bool:
        """``key``'s next cycle is due now, ahead of every routine one. True when it is held and was not woken."""
        with self._cond:
            if key not in self._due or key in self._gone or key in self._changed:
                return False
            self._changed[key] = None
            self._cond.notify_all()
            return True

    def remove(self, key: Key) -> bool:
        """Stop cycling ``key``. True when its state can be forgotten now; False when it was not held, or its cycle
        is running (:meth:`done` says to forget it when that ends)."""
        with self._cond:
            self._changed.pop(key, None)
            self._again.discard(key)
            if key in self._running:
                self._gone.add(key)
                return False
            return self._due.pop(key, None) is not None

    def take(self, timeout: float, *, changes_only: bool = False) -> Key | None:
        """The next TunedService to cycle, marked running; None when none is due within ``timeout`` seconds (or
        the queue is closed). ``changes_only``: only one woken for a spec change."""
        deadline = self._clock() + timeout
        with self._cond:
            while not self._closed:
                key = self._next(changes_only)
                if key is not None:
                    self._running.add(key)
                    self._due[key] = self._clock()
                    return key
                now = self._clock()
                wait = deadline - now
                if not changes_only and self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if deadline - now <= 0:
                    return None
                self._cond.wait(max(wait, 0.0))
            return None

    def _next(self, changes_only: bool) -> Key | None:
        for key in self._changed:
            if key not in self._running:
                del self._changed[key]
                return key
        if changes_only:
            return None
        now = self._clock()
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) != due or key in self._running:
                heapq.heappop(self._heap)  # stale: rescheduled, removed, or taken as a spec change
                continue
            if due > now:
                return None
            heapq.heappop(self._heap)
            return key
        return None

    def done(self, key: Key, delay_s: float, *, gone: bool = False) -> bool:
        """``key``'s cycle ended; its next is due in ``delay_s`` seconds. ``gone``: the cycle found it deleted.
        False when it is no longer held, so its state is to be forgotten (the caller does that)."""
        with self._cond:
            self._running.discard(key)
            removed = key in self._gone or gone
            self._gone.discard(key)
            if removed:
                self._due.pop(key, None)
                self._changed.pop(key, None)
                if key in self._again:
                    self._again.discard(key)
                    self._push(key, self._clock())
                return False
            self._push(key, self._clock() + max(delay_s, 0.0))
            return True

    def held(self) -> set[Key]:
        with self._cond:
            return set(self._due) | self._running

    def close(self) -> None:
        """Wake every :meth:`take` with None, until :meth:`open`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self._closed = False


class CycleScheduler:
    """Runs :meth:`ControlLoop.cycle` for every TunedService in ``queue`` on ``workers`` threads, and one more
    that takes spec changes only (so a change never waits for a routine cycle to free a thread)."""

    def __init__(self, loop: ControlLoop, *, workers: int = CYCLE_WORKERS, queue: CycleQueue | None = None) -> None:
        self.loop = loop
        self.queue = queue or CycleQueue()
        self.workers = max(1, workers)
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._started = threading.Lock()
        loop.holders.append(self.queue.held)

    def add(self, namespace: str, name: str) -> None:
        self.queue.add((namespace, name))

    def notice(self, namespace: str, name: str, generation: int | None) -> bool:
        """A TunedService as the watch saw it: held from now on, and woken first when its generation is one its
        last cycle did not read (:meth:`ControlLoop.notice`). True when it was woken."""
        self.queue.add((namespace, name))
        return self.loop.notice(namespace, name, generation) and self.queue.wake((namespace, name))

    def remove(self, namespace: str, name: str) -> None:
        """The TunedService was deleted: no more cycles, and nothing of it held once a running one ends."""
        if self.queue.remove((namespace, name)) or (namespace, name) not in self.queue.held():
            self.loop.forget(namespace, name)

    def run_once(self, key: tuple[str, str]) -> bool:
        """One cycle of ``key`` (taken from the queue); False when it is no longer held afterwards."""
        report = self.loop.cycle(*key)
        if self.queue.done(key, report.sleep_s, gone=report.reason == "deleted"):
            return True
        self.loop.forget(*key)
        return False

    def _work(self, changes_only: bool) -> None:
        while not self._stop.is_set():
            key = self.queue.take(1.0, changes_only=changes_only)
            if key is not None:
                self.run_once(key)

    def start(self) -> CycleScheduler:
        with self._started:
            if self._threads:
                return self
            self._stop.clear()
            self.queue.open()
            for i in range(self.workers + 1):
                changes = i == self.workers
                thread = threading.Thread(
                    target=self._work,
                    args=(changes,),
                    name="shiftlight-changes" if changes else f"shiftlight-cycles-{i}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking cycles and wait (up to ``timeout`` seconds in all) for those running."""
        with self._started:
            self._stop.set()
            self.queue.close()
            deadline = time.monotonic() + timeout
            for thread in self._threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            self._threads.clear()


__all__ = ["CYCLE_WORKERS", "CycleQueue", "CycleScheduler"]
