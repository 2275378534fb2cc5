"""Trial progress in the Trial CR: created when the trial starts (Running), its progress patched while it runs,
finished with the result.

:class:`TrialCRReporter` is the one writer of Trial CRs: their spec (config, shape, SLO, budget, seed, the reason the
trial was decided and who proposed its config) and their status. :class:`ReportingLoadTester` is the ``LoadTester``
the operator hands the reconciler: it runs each trial on its load tester (a
:class:`~controller.trials.runner.TrialRunner` on the ``kubernetes`` backend, the simulated one on the
``simulator`` backend) and reports it through a :class:`TrialReporter` (the port). A result that started nothing
(served from a cache) is reported once, as recorded.

The runner's progress callback runs inside the load generator, so it only records the latest figures; a publisher
thread sends them, at most one status patch per ``min_interval_s``, and the last figures once more before the
result. A report that cannot be written is logged and never fails the trial.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.crs import owner_references, trial_name_for, trial_phase
from controller.crd import models as crd
from controller.domain.log_tail import bounded_log_tails, clip_utf8
from controller.domain.trial import TrialResult
from controller.errors import ClusterConflict
from controller.ports import Clock, LoadTester, TrialRequest
from controller.trials.runner import TrialRunner

log = logging.getLogger(__name__)

#: The least time between two progress patches of one Trial CR (``SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS``).
DEFAULT_PROGRESS_INTERVAL_S = 5.0


@dataclass(frozen=True)
class ProgressUpdate:
    """Where a running trial is: its stage, replay requests done of planned, time since start, live tokens/s."""

    stage: str = "launch"
    requests_done: int = 0
    requests_planned: int = 0
    elapsed_s: float = 0.0
    output_tokens_per_s: float | None = None
    at: datetime | None = None


class TrialReporter(Protocol):
    """Where trial progress goes (a port: the Trial CR in the operator, a fake in tests)."""

    def started(self, request: TrialRequest, at: datetime) -> None: ...

    def progress(self, request: TrialRequest, update: ProgressUpdate) -> None: ...

    def finished(self, request: TrialRequest, result: TrialResult, at: datetime) -> None: ...

    def recorded(self, request: TrialRequest, result: TrialResult, at: datetime) -> None:
        """A result that started nothing (a cache hit): its Trial, unless one already holds a result."""
        ...


class _Tracker:
    """The runner's progress callback: records the latest figures (cheap, no I/O: it runs in the load generator)."""

    def __init__(self, request: TrialRequest, clock: Clock) -> None:
        self.clock = clock
        self.started_at = clock.now()
        self.mean_output = float(request.shape.output_tokens.mean)
        self._lock = threading.Lock()
        self._replay_from: datetime | None = None
        self.latest = ProgressUpdate(at=self.started_at)
        self.version = 0
        self.changed = threading.Event()

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = self.clock.now()
        with self._lock:
            update = replace(self.latest, stage=phase, elapsed_s=(now - self.started_at).total_seconds(), at=now)
            if phase == "replay":
                if self._replay_from is None:
                    self._replay_from = now
                replay_s = (now - self._replay_from).total_seconds()
                rate = done * self.mean_output / replay_s if replay_s > 0 and done > 0 else update.output_tokens_per_s
                update = replace(update, requests_done=done, requests_planned=total, output_tokens_per_s=rate)
            self.latest = update
            self.version += 1
        self.changed.set()

    def snapshot(self) -> tuple[int, ProgressUpdate]:
        with self._lock:
            return self.version, self.latest


class ReportingLoadTester:
    """A ``LoadTester``: trials on ``runner``, each reported (start, throttled progress, result) to ``reporter``.

    Progress comes from a :class:`TrialRunner`'s callback (another load tester reports its start and result only).
    A trial served from the runner's cache starts nothing and is reported as recorded (:meth:`recorded`, which a
    cache in front of this tester calls for its own hits)."""

    def __init__(
        self,
        runner: LoadTester,
        reporter: TrialReporter,
        clock: Clock,
        *,
        min_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S,
    ) -> None:
        self.runner = runner
        self.reporter = reporter
        self.clock = clock
        self.min_interval_s = max(0.0, min_interval_s)
        self.report_errors = 0

    def _safe(self, what: str, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except Exception as exc:  # reporting is for people: a failed write never fails the trial
            self.report_errors += 1
            log.warning("could not record trial %s: %s", what, exc)

    def recorded(self, request: TrialRequest, result: TrialResult) -> None:
        """Report a result that started nothing (a cache hit)."""
        self._safe("result", self.reporter.recorded, request, result, self.clock.now())

    def run(self, request: TrialRequest) -> TrialResult:
        runner = self.runner if isinstance(self.runner, TrialRunner) else None
        cache = runner.cache if runner is not None else None
        if runner is not None and cache is not None and not request.fresh and runner.key(request) in cache:
            result = runner.run(request)  # a repeat (fresh) measures even when a result is cached
            self.recorded(request, result)
            return result
        tracker = _Tracker(request, self.clock)
        self._safe("start", self.reporter.started, request, tracker.started_at)
        stop = threading.Event()
        sent = [0]

        def publish() -> None:
            version, update = tracker.snapshot()
            if version != sent[0]:
                sent[0] = version
                self._safe("progress", self.reporter.progress, request, update)

        def publisher() -> None:
            while not stop.is_set():
                tracker.changed.wait()
                tracker.changed.clear()
                if stop.is_set():
                    return
                publish()
                stop.wait(self.min_interval_s)

        thread = threading.Thread(target=publisher, name="trial-progress", daemon=True)
        previous = runner.progress if runner is not None else None
        if runner is not None:
            runner.progress = tracker
        thread.start()
        try:
            result = self.runner.run(request)
        finally:
            if runner is not None:
                runner.progress = previous
            stop.set()
            tracker.changed.set()
            thread.join()
        publish()  # the last figures (requests done of planned at the end), then the result
        self._safe("result", self.reporter.finished, request, result, self.clock.now())
        return result


class TrialCRReporter:
    """Trial CRs of one TunedService, and their only writer: created when a trial starts (the spec says what is
    measured, with which budget and seed, why and on whose proposal), status patched with progress and the result."""

    def __init__(self, api: client.ApiClient, owner: Mapping[str, Any]) -> None:
        self.custom = client.CustomObjectsApi(api)
        meta = owner["metadata"]
        self.namespace: str = meta["namespace"]
        self.service: str = meta["name"]
        # only what the Trial CRs' owner references name: the whole body (spec, status, managed fields) would stay
        # in memory for as long as the TunedService's runtime lives
        self.owner = {"metadata": {"name": meta["name"], "uid": meta.get("uid", "")}}
        self._started: dict[str, datetime] = {}
        self._last: dict[str, ProgressUpdate] = {}

    def name(self, request: TrialRequest) -> str:
        return trial_name_for(self.service, request.config, request.shape)

    def _patch(self, name: str, status: crd.TrialCRStatus) -> None:
        with kube_errors(f"{crd.PLURAL_TRIAL} {self.namespace}/{name} status"):
            self.custom.patch_namespaced_custom_object_status(
                crd.GROUP,
                crd.VERSION,
                self.namespace,
                crd.PLURAL_TRIAL,
                name,
                {"status": bounded_log_tails(status.to_wire())},  # the engine's log tail, bounded
            )

    def spec(self, request: TrialRequest) -> crd.TrialSpec:
        budget = request.budget
        return crd.TrialSpec(
            target=self.service,
            config=request.config,
            shape=request.shape,
            slo=request.slo,
            budget=crd.TrialBudgetSpec(
                duration_seconds=budget.duration_s,
                warmup_seconds=budget.warmup_s,
                max_requests=budget.max_requests,
                startup_timeout_seconds=budget.startup_timeout_s,
            ),
            seed=request.seed,
            reason=clip_utf8(request.reason, 4096),
            proposed_by=request.proposed_by[:253] or "optimizer",
        )

    def _create(self, request: TrialRequest) -> bool:
        """Create the Trial of ``request``; False when it exists (the same config and shape measured before)."""
        name = self.name(request)
        body = {
            "apiVersion": crd.API_VERSION,
            "kind": crd.KIND_TRIAL,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {"shiftlight.dev/tuned-service": self.service},
                "ownerReferences": owner_references(self.owner),
            },
            "spec": self.spec(request).to_wire(),
        }
        try:
            with kube_errors(f"{crd.PLURAL_TRIAL} {self.namespace}/{name}"):
                self.custom.create_namespaced_custom_object(
                    crd.GROUP, crd.VERSION, self.namespace, crd.PLURAL_TRIAL, body
                )
        except ClusterConflict:
            return False
        return True

    def _finished(self, name: str) -> bool:
        """Whether the stored Trial already carries its result (Succeeded or Failed)."""
        with kube_errors(f"{crd.PLURAL_TRIAL} {self.namespace}/{name}"):
            body = self.custom.get_namespaced_custom_object(
                crd.GROUP, crd.VERSION, self.namespace, crd.PLURAL_TRIAL, name
            )
        status = body.get("status") if isinstance(body, Mapping) else None
        return (
            isinstance(status, Mapping)
            and status.get("phase") in ("Succeeded", "Failed")
            and bool(status.get("result"))
        )

    def started(self, request: TrialRequest, at: datetime) -> None:
        name = self.name(request)
        self._create(request)  # False: the same config and shape measured again (its result is replaced at its end)
        self._started[name] = at
        self._patch(name, self._running(request, ProgressUpdate(at=at)))

    def _running(self, request: TrialRequest, update: ProgressUpdate) -> crd.TrialCRStatus:
        name = self.name(request)
        return crd.TrialCRStatus(
            phase="Running",
            config_label=request.config.label(),
            started_at=self._started.get(name),
            message=update.stage
            if not update.requests_planned
            else f"{update.stage}: {update.requests_done}/{update.requests_planned} requests",
            progress=crd.TrialProgress(
                stage=update.stage[:32],
                requests_done=update.requests_done,
                requests_planned=update.requests_planned,
                elapsed_seconds=max(0.0, update.elapsed_s),
                output_tokens_per_s=update.output_tokens_per_s,
                updated_at=update.at,
            ),
        )

    def progress(self, request: TrialRequest, update: ProgressUpdate) -> None:
        self._last[self.name(request)] = update
        self._patch(self.name(request), self._running(request, update))

    def finished(self, request: TrialRequest, result: TrialResult, at: datetime) -> None:
        name = self.name(request)
        started = self._started.pop(name, None)
        last = self._last.pop(name, ProgressUpdate())
        elapsed = (at - started).total_seconds() if started is not None else 0.0
        status = crd.TrialCRStatus(
            phase=trial_phase(result),
            config_label=result.config.label(),
            started_at=started,
            finished_at=at,
            message=clip_utf8(result.reason or result.summary(), 4096),
            result=result,
            progress=crd.TrialProgress(
                stage="done",
                requests_done=result.completed,
                requests_planned=max(last.requests_planned, result.completed + result.failed),
                elapsed_seconds=max(0.0, elapsed),
                output_tokens_per_s=result.output_tokens_per_s if result.ok else None,
                updated_at=at,
            ),
        )
        self._patch(name, status)

    def recorded(self, request: TrialRequest, result: TrialResult, at: datetime) -> None:
        """A result that started nothing: a new Trial gets it; one created when the trial started and left unfinished
        (its final write failed, or the operator restarted mid-trial) gets it once; a finished Trial is left as it
        is."""
        name = self.name(request)
        if not self._create(request) and self._finished(name):
            return
        status = crd.TrialCRStatus(
            phase=trial_phase(result),
            config_label=result.config.label(),
            finished_at=at,
            message=clip_utf8(result.reason or result.summary(), 4096),
            result=result,
        )
        self._patch(name, status)


__all__ = [
    "DEFAULT_PROGRESS_INTERVAL_S",
    "ProgressUpdate",
    "ReportingLoadTester",
    "TrialCRReporter",
    "TrialReporter",
]
