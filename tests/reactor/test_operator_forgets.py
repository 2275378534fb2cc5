"""Bounded by construction: the operator holds nothing of a deleted TunedService (its runtime, trial worker,
mirrors, remembered Events, lock, metric series, its entry in the scheduler's queue), whether the watch reports the
deletion or a cycle finds it gone, and a new generation replaces its runtime instead of adding one."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from controller.reactor.kubernetes_backend import KubernetesBackend
from controller.reactor.scheduler import CycleQueue, CycleScheduler
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import G, V, free_port, kubernetes_loop, tuned_service

pytestmark = pytest.mark.kube

SERVICES = 100
NAMESPACES = 20


def names() -> list[tuple[str, str]]:
    return [(f"team-{i % NAMESPACES:02d}", f"svc-{i:03d}") for i in range(SERVICES)]


def test_a_hundred_deleted_tunedservices_leave_nothing_behind(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    co = client.CustomObjectsApi(api)
    for namespace, name in names():
        body = tuned_service(name, route=None)
        body["metadata"]["namespace"] = namespace
        co.create_namespaced_custom_object(G, V, namespace, "tunedservices", body)
    # no Prometheus answers here: each cycle freezes on missing metrics, after building everything it needs
    loop = kubernetes_loop(operator_kubeconfig, policy_dir, prometheus_url=f"http://127.0.0.1:{free_port()}")
    backend = loop.backend
    assert isinstance(backend, KubernetesBackend)
    now = [0.0]
    scheduler = CycleScheduler(loop, queue=CycleQueue(lambda: now[0]))  # the test takes each cycle itself
    queue = scheduler.queue
    for namespace, name in names():
        scheduler.notice(namespace, name, 1)  # the watch's listing
    for _ in names():
        key = queue.take(0.0)
        assert key is not None
        assert loop.cycle(*key).acted
        assert queue.done(key, 60.0)
    assert queue.take(0.0) is None  # every one cycled once, none due again yet
    assert loop.held() == SERVICES and len(queue.held()) == SERVICES
    workers = backend.trial_workers()
    assert len(backend.runtimes()) == len(workers) == SERVICES

    for namespace, name in names()[:2]:  # a spec change: a new generation, a new runtime in place of the old
        co.patch_namespaced_custom_object(
            G, V, namespace, "tunedservices", name, {"spec": {"replicas": {"minReplicas": 1, "maxReplicas": 4}}}
        )
        loop.cycle(namespace, name)
    assert len(backend.runtimes()) == SERVICES
    assert {k[3] for k in backend.runtimes() if k[:2] == names()[0]} == {2}  # the new generation's only
    assert backend.trial_workers() == workers  # the same worker across generations: trials one at a time

    for namespace, name in names():
        co.delete_namespaced_custom_object(G, V, namespace, "tunedservices", name)
    for namespace, name in names()[: SERVICES // 2]:
        scheduler.remove(namespace, name)  # the watch's DELETED event
    now[0] += 3600.0
    for _ in names()[SERVICES // 2 :]:  # the others' watch events were missed: their next cycle finds them gone
        key = queue.take(0.0)
        assert key is not None
        assert not scheduler.run_once(key)
    assert queue.take(0.0) is None
    assert loop.held() == 0 and queue.held() == set()
    assert backend.runtimes() == {} and backend.trial_workers() == {}  # and no lock: held() counts them
    assert loop.metrics.targets() == []
    assert "shiftlight_tunedservices_held 0.0" in loop.metrics.exposition().decode()
    for worker in workers.values():  # shut down: a thread pool takes no more work
        with pytest.raises(RuntimeError):
            worker.submit(int)
