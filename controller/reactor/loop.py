"""The per-TunedService control loop, independent of kopf: read -> reconcile -> one guarded status write.

:meth:`ControlLoop.cycle` is one cycle for one TunedService and returns how long to sleep before the next.
It does nothing unless this replica is the leader. Everything the next cycle needs is in the status it writes,
so a restarted operator (or a new leader) continues exactly where the last status write left off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from controller.adapters.kube.approvals import ApprovalGate
from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.events import KubeEvents
from controller.adapters.kube.mirror import CRMirror, rollout_ended, rollout_outcome
from controller.adapters.kube.status import Refusal, StatusStore
from controller.crd.models import parse_tuned_service
from controller.domain.actions import Rollback
from controller.domain.codes import Code
from controller.domain.observation import TargetRef
from controller.domain.status import TargetStatus
from controller.errors import (
    ClusterConflict,
    InvalidInput,
    NotFound,
    PermanentError,
    ShiftlightError,
    TemporaryError,
)
from controller.reactor.metrics import OperatorMetrics
from controller.reactor.runtime import Backend
from controller.reactor.settings import OperatorSettings
from controller.reactor.stats import DurationHistogram
from controller.reconcile import CycleResult

log = logging.getLogger(__name__)

#: Longest a routine cycle waits for the cycles that answer spec changes (:meth:`ControlLoop.notice`).
CHANGE_FIRST_S = 5.0


class Leadership(Protocol):
    def is_leader(self) -> bool: ...


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did (for logs and tests)."""

    acted: bool
    sleep_s: float
    reason: str = ""
    phase: str = ""
    duration_s: float = 0.0


class ControlLoop:
    def __init__(
        self,
        settings: OperatorSettings,
        api: ApiClient,
        backend: Backend,
        leadership: Leadership,
        metrics: OperatorMetrics,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.leadership = leadership
        self.metrics = metrics
        self.store = StatusStore(api, retries=settings.loop.status_retries)
        self.mirror = CRMirror(api)
        self.events = KubeEvents(api)
        self.gate = ApprovalGate(api) if settings.verify_approvals else None
        self._now = now
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()
        self.holders: list[Callable[[], set[tuple[str, str]]]] = []
        """Others that hold TunedServices for this loop (the scheduler's queue): counted in :meth:`held`."""
        self._generations: dict[tuple[str, str], int | None] = {}
        """The generation each TunedService's last cycle read: a newer one seen on the watch is a spec change."""
        self._changed: set[tuple[str, str]] = set()
        """TunedServices woken for a spec change whose cycle has not run yet: other cycles wait for them."""
        self._answered = threading.Condition(self._guard)
        metrics.held.set_function(self.held)
        self.durations = DurationHistogram()
        """Each cycle's wall time in fixed-size buckets (exported as ``shiftlight_reconcile_duration_seconds`` too)."""

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def changes_pending(self) -> set[tuple[str, str]]:
        """The TunedServices woken for a spec change whose cycle has not run yet (a copy)."""
        with self._guard:
            return set(self._changed)

    def forget(self, namespace: str, name: str) -> None:
        """Drop everything held about ``namespace/name`` (the TunedService was deleted): its runtime, trial worker,
        mirrors, remembered Events and metric series."""
        with self._guard:
            self._locks.pop((namespace, name), None)
            self._generations.pop((namespace, name), None)
            self._changed.discard((namespace, name))
            self._answered.notify_all()
        self.backend.forget(namespace, name)
        self.mirror.forget(namespace, name)
        self.events.forget(namespace, name)
        self.metrics.forget(f"{namespace}/{name}")
        log.info("%s/%s: deleted; its state is dropped", namespace, name)

    def held(self) -> int:
        """How many TunedServices this loop holds anything about (locks, runtimes, mirrors, Events, metric series,
        the scheduler's entries)."""
        with self._guard:
            names: set[tuple[str, str]] = set(self._locks) | set(self._generations)
        for holder in self.holders:
            names |= holder()
        names |= set(self.backend.held())
        names |= set(self.mirror.held())
        names |= set(self.events.held())
        for target in self.metrics.targets():
            namespace, _, name = target.partition("/")
            names.add((namespace, name))
        return len(names)

    def notice(self, namespace: str, name: str, generation: int | None) -> bool:
        """A TunedService as the watch saw it: True for a generation its last cycle did not read (a spec change),
        which is then answered by a cycle now rather than after the requeue (the scheduler takes it first, and
        routine cycles give way to it). False when nothing is new, or it has not cycled yet (its first cycle reads
        it anyway)."""
        with self._guard:
            if (namespace, name) not in self._generations or self._generations[(namespace, name)] == generation:
                return False
            self._changed.add((namespace, name))
        return True

    def _give_way(self, namespace: str, name: str) -> None:
        """A cycle of a TunedService without a pending spec change waits (at most ``CHANGE_FIRST_S``) while others
        have one: on busy cores, a spec change is answered before the routine cycles of everyone else."""
        deadline = time.monotonic() + CHANGE_FIRST_S
        with self._guard:
            while self._changed and (namespace, name) not in self._changed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._answered.wait(left)

    def _answer(self, namespace: str, name: str) -> None:
        with self._guard:
            if (namespace, name) in self._changed:
                self._changed.discard((namespace, name))
                self._answered.notify_all()

    def _idle(self, reason: str) -> CycleReport:
        return CycleReport(acted=False, sleep_s=self.settings.loop.idle_s, reason=reason)

    def cycle(self, namespace: str, name: str) -> CycleReport:
        """One observe -> decide -> act cycle for ``namespace/name`` (a no-op unless we lead)."""
        if not self.leadership.is_leader():
            self._answer(namespace, name)
            return self._idle("not the leader")
        self._give_way(namespace, name)
        with self._lock(namespace, name):
            try:
                return self._cycle(namespace, name)
            except NotFound:
                return self._idle("deleted")
            except TemporaryError as exc:
                self.metrics.errors.labels(kind=type(exc).__name__).inc()
                log.warning("%s/%s: %s (retrying in %.1fs)", namespace, name, exc, exc.delay_s)
                return CycleReport(acted=False, sleep_s=self._sleep(exc.delay_s), reason=str(exc))
            except ShiftlightError as exc:
                self.metrics.errors.labels(kind=type(exc).__name__).inc()
                log.error("%s/%s: %s", namespace, name, exc)
                return CycleReport(acted=False, sleep_s=self._sleep(60.0), reason=str(exc))
            except Exception as exc:  # a bug must not kill the daemon: count it, say where, try again later
                self.metrics.errors.labels(kind=type(exc).__name__).inc()
                log.exception("%s/%s: unexpected error in a cycle", namespace, name)
                return CycleReport(acted=False, sleep_s=self._sleep(60.0), reason=f"unexpected error: {exc}")
            finally:
                self._answer(namespace, name)

    def _sleep(self, virtual_s: float) -> float:
        loop = self.settings.loop
        return max(loop.min_sleep_s, min(virtual_s, loop.max_requeue_s) / max(loop.time_scale, 1e-9))

    def _cycle(self, namespace: str, name: str) -> CycleReport:
        try:
            body = self.store.read(namespace, name)
        except NotFound:
            self.forget(namespace, name)
            raise
        try:
            spec, status = parse_tuned_service(body)
        except InvalidInput as exc:
            return self._refuse(
                body, TargetRef(namespace=namespace, name=name, model=""), Code.INVALID_SPEC.event_reason, exc
            )
        target = TargetRef(namespace=namespace, name=name, model=spec.model.name)
        with self._guard:
            self._generations[(namespace, name)] = body["metadata"].get("generation")
        if spec.paused:
            return self._idle("paused by spec.paused")
        try:
            runtime = self.backend.runtime(target, spec, body)
        except InvalidInput as exc:
            # the policy (a preset name, a tenant's ConfigMap, an advisor name) was refused: nothing was built,
            # so nothing is contacted; the stored status stays, with the refusal in its conditions
            return self._refuse(body, target, getattr(exc, "reason", Code.INVALID_POLICY.event_reason), exc)
        if runtime.initial_config is not None and "active_config" not in status.model_fields_set:
            status = status.model_copy(update={"active_config": runtime.initial_config})  # a first cycle
        started = time.perf_counter()
        decided_from = status
        if self.gate is not None:
            decided_from, refused = self.gate.screen(namespace, status)
            for approval, why in refused:
                verb = "approval" if approval.decision == "approved" else "rejection"
                message = f"ignored the {verb} of step {approval.step + 1} by {approval.by}: {why}"
                log.warning("%s: %s", target, message)
                self.events.record(target, Code.APPROVAL_REFUSED.event_reason, message, warning=True)
                self.metrics.errors.labels(kind=Code.APPROVAL_REFUSED.event_reason).inc()
        result = runtime.reconciler.reconcile(target, decided_from)
        if not self.leadership.is_leader():
            # Leadership lapsed mid-cycle: the actions are done, so still record them (the write is guarded).
            log.warning("%s: lost leadership during a cycle; recording its outcome", target)
        writes = self.store.writes
        self.store.write(body, status, result.status, now=self._now())
        (self.metrics.status_writes if self.store.writes > writes else self.metrics.status_unchanged).inc()
        decide_s, runtime.reconciler.last_decide_s = runtime.reconciler.last_decide_s, None
        decide_cpu_s, runtime.reconciler.last_decide_cpu_s = runtime.reconciler.last_decide_cpu_s, None
        if decide_s is not None:
            self.metrics.decide.observe(decide_s)
        if decide_cpu_s is not None:
            self.metrics.decide_cpu.observe(decide_cpu_s)
        duration = time.perf_counter() - started
        self.durations.observe(duration)
        self.metrics.duration.observe(duration)
        self.metrics.cycles.inc()
        self._account(target, status, result)
        self._mirror(body, status, result)
        runtime.advance(result.requeue_after_s)
        return CycleReport(
            acted=True,
            sleep_s=self._sleep(result.requeue_after_s),
            reason="; ".join(result.plan.reasons()[:3]),
            phase=result.status.phase.value,
            duration_s=duration,
        )

    def _refuse(self, body: Mapping[str, Any], target: TargetRef, reason: str, exc: InvalidInput) -> CycleReport:
        """A refused spec or policy: a warning Event and ``Accepted=False`` naming the field; nothing else."""
        self.metrics.errors.labels(kind=reason).inc()
        message = str(exc)
        log.warning("%s: %s: %s", target, reason, message)
        self.events.record(target, reason, message, warning=True)
        try:
            self.store.write_refusal(body, Refusal(reason, message), now=self._now())
        except (ClusterConflict, TemporaryError) as write_error:  # the next cycle refuses (and writes) again
            log.warning("%s: could not record the refusal in status (%s)", target, write_error)
        return CycleReport(acted=False, sleep_s=self._sleep(60.0), reason=f"{reason}: {message}")

    def _account(self, target: TargetRef, before: TargetStatus, result: CycleResult) -> None:
        m = self.metrics
        for action in result.plan.actions:
            m.decisions.labels(action=type(action).__name__, code=action.code or "").inc()
            if isinstance(action, Rollback):
                m.rollbacks.inc()
        for effect in result.effects:
            m.effects.labels(effect=type(effect).__name__, code=effect.code or "").inc()
        for trial in result.trials:
            m.trials.labels(status=trial.status.value).inc()
        after = result.status
        ended = rollout_ended(before, after)
        if ended is not None:
            m.rollouts.labels(outcome=rollout_outcome(ended, after)).inc()
        weight = after.rollout.weight if after.rollout is not None and after.phase.value != "Observing" else 0
        m.weight.labels(target=str(target)).set(weight)

    def _mirror(self, body: Mapping[str, Any], before: TargetStatus, result: CycleResult) -> None:
        if not self.settings.mirror_crs:
            return
        try:  # Trial CRs have their own writer (the trials' load tester reports each one as it runs)
            self.mirror.rollout(body, before, result.status, self._now())
        except (ClusterConflict, PermanentError, TemporaryError) as exc:  # mirrors are for people; never fatal
            self.metrics.errors.labels(kind=Code.MIRROR_FAILED.event_reason).inc()
            log.warning("could not mirror the rollout: %s", exc)


__all__ = ["ControlLoop", "CycleReport", "Leadership"]
