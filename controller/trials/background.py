"""Trials in the background: a :class:`~controller.ports.TrialStarter` around a synchronous load tester.

:class:`BackgroundLoadTester` runs the wrapped tester's ``run`` on one worker thread (one trial at a time, in the
order they were started) and hands back a handle the control cycle polls, so a trial that takes minutes (a canary
Pod starting vLLM, warming up and measuring) does not hold the cycle. A trial whose operator restarts while it runs
is lost with the thread and run again by the next decision (trials are idempotent: they only measure).
"""

from __future__ import annotations

from concurrent.futures import Executor, Future, ThreadPoolExecutor

from controller.domain.trial import TrialResult
from controller.ports import LoadTester, TrialRequest


class BackgroundTrial:
    """The handle of one trial running on the worker thread."""

    def __init__(self, future: Future[TrialResult]) -> None:
        self.future = future

    def poll(self) -> TrialResult | None:
        """None while the trial runs; then its result (an error the load tester raised is raised here)."""
        if not self.future.done():
            return None
        return self.future.result()


class BackgroundLoadTester:
    """Starts ``inner``'s trials on a worker thread; ``run`` still runs one in the caller's thread."""

    def __init__(self, inner: LoadTester, *, executor: Executor | None = None) -> None:
        self.inner = inner
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="shiftlight-trial")

    @property
    def executor(self) -> Executor:
        """The worker the trials run on (runtimes of one TunedService's generations share one)."""
        return self._executor

    def start(self, request: TrialRequest) -> BackgroundTrial:
        return BackgroundTrial(self._executor.submit(self.inner.run, request))

    def run(self, request: TrialRequest) -> TrialResult:
        return self.inner.run(request)

    def close(self) -> None:
        """Stop taking trials; those not yet begun are dropped, the running one finishes on its thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)
