"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two operator replicas never both act.

Every replica tries to acquire or renew the Lease every ``retry_period_s``. A replica holds the lease while it is
the ``holderIdentity`` and its last renewal is younger than ``leaseDurationSeconds``; another replica may take
over only after that. A leader that could not renew for ``renew_deadline_s`` (shorter than the lease duration)
stops acting on its own, so there is never a moment with two actors. Writes are replaces (PUT) guarded by the
Lease's resourceVersion: of two replicas racing for an expired lease, exactly one wins (the other gets 409).
On a clean shutdown the leader releases the lease (empty holder), so a successor takes over at once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.errors import ClusterConflict, NotFound, ShiftlightError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderSettings:
    """Lease-based leader election (``coordination.k8s.io/v1``)."""

    enabled: bool = True
    lease_name: str = "shiftlight-leader"
    lease_namespace: str = "default"
    identity: str = field(default_factory=socket.gethostname)
    lease_duration_s: float = 15.0
    """How long a lease stays valid after its last renewal; other replicas take over after that."""
    renew_deadline_s: float = 10.0
    """A leader that could not renew for this long stops acting (before anyone else may take over)."""
    retry_period_s: float = 2.0
    """How often every replica tries to acquire or renew."""


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        settings: LeaderSettings,
        *,
        on_change: Callable[[bool], None] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.settings = settings
        self.on_change = on_change
        self._now = now
        self._renewed_at: float | None = None  # monotonic time of our last successful acquire/renew
        self._was_leader = False
        self._lock = threading.Lock()
        self.transitions = 0
        self.release_on_exit = True

    @property
    def identity(self) -> str:
        return self.settings.identity

    def is_leader(self) -> bool:
        """True while our last renewal is younger than the renew deadline."""
        with self._lock:
            return self._renewed_at is not None and time.monotonic() - self._renewed_at < self.settings.renew_deadline_s

    def _lease_body(self, *, acquire: datetime, renew: datetime, transitions: int) -> client.V1Lease:
        return client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.settings.lease_name, namespace=self.settings.lease_namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=max(1, round(self.settings.lease_duration_s)),
                acquire_time=acquire,
                renew_time=renew,
                lease_transitions=transitions,
            ),
        )

    def try_acquire_or_renew(self) -> bool:
        """One attempt; returns whether we hold the lease now."""
        started = time.monotonic()
        now = self._now()
        name, ns = self.settings.lease_name, self.settings.lease_namespace
        try:
            try:
                with kube_errors(f"lease {ns}/{name}"):
                    lease = self.coord.read_namespaced_lease(name, ns)
            except NotFound:
                with kube_errors(f"lease {ns}/{name}"):
                    self.coord.create_namespaced_lease(ns, self._lease_body(acquire=now, renew=now, transitions=0))
                return self._held(started)
            spec = lease.spec or client.V1LeaseSpec()
            holder = spec.holder_identity or ""
            duration = timedelta(seconds=spec.lease_duration_seconds or self.settings.lease_duration_s)
            renewed = spec.renew_time or spec.acquire_time
            expired = renewed is None or renewed + duration <= now
            if holder and holder != self.identity and not expired:
                return self._lost()
            ours = holder == self.identity
            transitions = (spec.lease_transitions or 0) + (0 if ours else 1)
            acquire = spec.acquire_time if ours and spec.acquire_time else now
            body = self._lease_body(acquire=acquire, renew=now, transitions=transitions)
            body.metadata.resource_version = lease.metadata.resource_version  # type: ignore[union-attr]
            with kube_errors(f"lease {ns}/{name}"):
                self.coord.replace_namespaced_lease(name, ns, body)
            if not ours:
                self.transitions += 1
                log.info("%s acquired lease %s/%s (previous holder %r)", self.identity, ns, name, holder or None)
            return self._held(started)
        except ClusterConflict:
            return self._lost()  # someone else wrote the lease in between
        except ShiftlightError as exc:
            log.warning("leader election: %s", exc)
            return self.is_leader()

    def _held(self, started: float) -> bool:
        with self._lock:
            self._renewed_at = started
        self._notify(True)
        return True

    def _lost(self) -> bool:
        with self._lock:
            self._renewed_at = None
        self._notify(False)
        return False

    def _notify(self, leader: bool) -> None:
        if leader != self._was_leader:
            self._was_leader = leader
            log.info("%s is %s", self.identity, "the leader" if leader else "not the leader")
            if self.on_change is not None:
                self.on_change(leader)

    def release(self) -> None:
        """Give the lease up (only if we hold it) so a successor takes over without waiting for expiry."""
        with self._lock:
            self._renewed_at = None
        name, ns = self.settings.lease_name, self.settings.lease_namespace
        try:
            with kube_errors(f"lease {ns}/{name}"):
                lease = self.coord.read_namespaced_lease(name, ns)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.renew_time = self._now()
                self.coord.replace_namespaced_lease(name, ns, lease)
            log.info("%s released lease %s/%s", self.identity, ns, name)
        except ShiftlightError as exc:
            log.warning("could not release the lease: %s", exc)
        finally:
            self._notify(False)

    def run(self, stop: threading.Event) -> None:
        """Acquire/renew every retry period until ``stop`` is set; then release."""
        while not stop.is_set():
            self.try_acquire_or_renew()
            stop.wait(self.settings.retry_period_s)
        if self.release_on_exit:
            self.release()
        else:
            with self._lock:
                self._renewed_at = None  # a crash: the lease stays until it expires


class AlwaysLeader:
    """Leader election switched off (a single replica)."""

    identity = "single"

    def is_leader(self) -> bool:
        return True

    def run(self, stop: threading.Event) -> None:
        stop.wait()
