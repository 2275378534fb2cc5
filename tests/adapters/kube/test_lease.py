"""Lease-based leader election against the fake API."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from controller.adapters.kube.lease import LeaderElector, LeaderSettings

pytestmark = pytest.mark.kube


def elector(api: client.ApiClient, identity: str, now: list[datetime]) -> LeaderElector:
    settings = LeaderSettings(
        identity=identity, lease_namespace="ops", lease_duration_s=15, renew_deadline_s=10, retry_period_s=2
    )
    return LeaderElector(api, settings, now=lambda: now[0])


def test_one_holder_renewal_expiry_and_release(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    clock = [datetime(2026, 11, 30, 10, 0, tzinfo=UTC)]
    a, b = elector(operator_api, "a", clock), elector(operator_api, "b", clock)
    assert a.try_acquire_or_renew()  # creates the Lease
    assert not b.try_acquire_or_renew()  # held and fresh
    assert a.is_leader() and not b.is_leader()
    clock[0] += timedelta(seconds=10)
    assert a.try_acquire_or_renew()  # renews
    clock[0] += timedelta(seconds=14)
    assert not b.try_acquire_or_renew()  # 14 s after the renewal: still a's
    clock[0] += timedelta(seconds=2)
    assert b.try_acquire_or_renew()  # expired: b takes over
    lease = client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "ops")
    assert lease.spec.holder_identity == "b"
    assert lease.spec.lease_transitions == 1
    assert lease.spec.lease_duration_seconds == 15
    assert not a.try_acquire_or_renew()  # a notices it lost the lease
    assert not a.is_leader()
    b.release()
    assert not b.is_leader()
    assert client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "ops").spec.holder_identity is None
    assert a.try_acquire_or_renew()  # released: taken at once, no expiry wait


def test_racing_replicas_one_wins(operator_api: client.ApiClient) -> None:
    clock = [datetime(2026, 11, 30, 10, 0, tzinfo=UTC)]
    electors = [elector(operator_api, f"r{i}", clock) for i in range(4)]
    results: list[bool] = []
    barrier = threading.Barrier(len(electors))

    def go(e: LeaderElector) -> None:
        barrier.wait()
        results.append(e.try_acquire_or_renew())

    threads = [threading.Thread(target=go, args=(e,)) for e in electors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    assert sum(e.is_leader() for e in electors) == 1


def test_run_loop_releases_on_stop(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    e = LeaderElector(operator_api, LeaderSettings(identity="solo", lease_namespace="ops", retry_period_s=0.05))
    stop = threading.Event()
    changes: list[bool] = []
    e.on_change = changes.append
    t = threading.Thread(target=e.run, args=(stop,))
    t.start()
    while not e.is_leader():
        stop.wait(0.01)
    stop.set()
    t.join()
    assert changes == [True, False]
    assert client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "ops").spec.holder_identity is None
