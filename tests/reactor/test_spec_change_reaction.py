"""A spec change is answered by the next cycle, not after the requeue or a trial: the watch's new generation puts
the TunedService first in the scheduler's queue (:meth:`CycleScheduler.notice`, :meth:`ControlLoop.notice`), and
the ``simulator`` backend runs its trials beside the cycle on a few shared threads, a queue per TunedService that
goes with it; while a spec change waits for its cycle, the routine cycles of other TunedServices give way (at most
a few seconds). What every fleet reads and nobody changes (the traffic generator, the performance model and its
estimates, the Event recorder) is built once for all TunedServices."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client

from controller.adapters.kube.status import JSON
from controller.adapters.simulated.fleet import SimulatedCluster
from controller.reactor.loop import ControlLoop
from controller.reactor.metrics import OperatorMetrics
from controller.reactor.runtime import EventingCluster
from controller.reactor.scheduler import CycleQueue, CycleScheduler
from controller.reactor.simulator_backend import SimulatorBackend, TrialQueue
from controller.trials.background import BackgroundLoadTester
from tests.support.kube_operator import AlwaysLeader, G, V, tuned_service
from tests.support.operator_setup import simulator_settings

pytestmark = pytest.mark.kube


def simulator_loop(kubeconfig: Path, policy_dir: Path, api: client.ApiClient, *, background: bool) -> ControlLoop:
    settings = simulator_settings(kubeconfig, policy_dir)
    backend = SimulatorBackend(settings, api, background_trials=background)
    return ControlLoop(settings, api, backend, AlwaysLeader(), OperatorMetrics())


class Clock:
    """Monotonic seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_new_generation_is_taken_at_once_and_the_same_one_is_not(
    api: client.ApiClient, operator_api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(route=None))
    loop = simulator_loop(operator_kubeconfig, policy_dir, operator_api, background=False)
    clock = Clock()
    scheduler = CycleScheduler(loop, queue=CycleQueue(clock))  # not started: the test takes the cycles itself
    queue = scheduler.queue
    key = ("prod", "workhorse")
    assert not scheduler.notice(*key, 1)  # listed: held, its first cycle due now (it reads the spec anyway)
    assert queue.take(0.0) == key
    assert scheduler.run_once(key)
    assert not scheduler.notice(*key, 1)  # the status write's own watch event: nothing new
    assert queue.take(0.0) is None  # the next cycle is due after its requeue, which has not passed

    body = co.patch_namespaced_custom_object(
        G, V, "prod", "tunedservices", "workhorse", {"spec": {"replicas": {"minReplicas": 1, "maxReplicas": 4}}}
    )
    generation = body["metadata"]["generation"]
    assert generation == 2
    assert scheduler.notice(*key, generation)
    assert queue.take(0.0, changes_only=True) == key  # woken: taken now, before its requeue
    assert scheduler.run_once(key)
    stored = co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    assert stored["status"]["observedGeneration"] == generation
    assert not scheduler.notice(*key, generation)  # answered: nothing wakes it again
    assert queue.take(0.0) is None
    clock.now += 3600.0
    assert queue.take(0.0) == key  # its routine cycle, once due
    assert scheduler.run_once(key)

    co.delete_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    scheduler.remove(*key)  # the watch's DELETED event
    assert loop.held() == 0 and queue.held() == set()
    assert queue.take(0.0) is None
    clock.now += 3600.0
    assert queue.take(0.0) is None


def test_a_spec_change_is_answered_before_the_routine_cycles_of_others(
    api: client.ApiClient,
    operator_api: client.ApiClient,
    operator_kubeconfig: Path,
    policy_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    co = client.CustomObjectsApi(api)
    for name in ("changed", "routine"):
        co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(name, route=None))
    loop = simulator_loop(operator_kubeconfig, policy_dir, operator_api, background=False)
    for name in ("changed", "routine"):
        loop.cycle("prod", name)
    order: list[str] = []
    read = loop.store.read

    def traced(namespace: str, name: str) -> JSON:
        order.append(name)  # each cycle reads its TunedService first, once
        return read(namespace, name)

    monkeypatch.setattr(loop.store, "read", traced)
    body = co.patch_namespaced_custom_object(
        G, V, "prod", "tunedservices", "changed", {"spec": {"replicas": {"minReplicas": 1, "maxReplicas": 4}}}
    )
    assert loop.notice("prod", "changed", body["metadata"]["generation"])
    routine = threading.Thread(target=loop.cycle, args=("prod", "routine"))
    routine.start()  # its cycle waits: a spec change is pending
    loop.cycle("prod", "changed")
    routine.join()
    assert order == ["changed", "routine"]
    assert loop.changes_pending() == set()


def test_trials_run_beside_the_cycle_on_a_queue_that_goes_with_its_tunedservice(
    api: client.ApiClient, operator_api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    co = client.CustomObjectsApi(api)
    for name in ("one", "two"):
        co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(name, route=None))
    loop = simulator_loop(operator_kubeconfig, policy_dir, operator_api, background=True)
    backend = loop.backend
    assert isinstance(backend, SimulatorBackend)
    loop.cycle("prod", "one")
    loop.cycle("prod", "two")
    runtimes = list(backend.runtimes().values())
    assert len(runtimes) == 2
    assert all(isinstance(r.reconciler.ports.load_tester, BackgroundLoadTester) for r in runtimes)
    # built once: what the fleets read and nobody changes, and the Event recorder
    fleets = []
    for r in runtimes:
        assert isinstance(r.ports.cluster, EventingCluster) and isinstance(r.ports.cluster.inner, SimulatedCluster)
        assert r.ports.cluster.events is backend.events
        fleets.append(r.ports.cluster.inner.fleet)
    assert fleets[0] is not fleets[1]
    assert fleets[0].traffic is fleets[1].traffic
    assert fleets[0].perf is fleets[1].perf and fleets[0].estimates is fleets[1].estimates
    queues = backend.trial_workers()
    assert set(queues) <= set(backend.runtimes())

    for name in ("one", "two"):
        co.delete_namespaced_custom_object(G, V, "prod", "tunedservices", name)
        assert loop.cycle("prod", name).reason == "deleted"
    assert loop.held() == 0
    assert backend.runtimes() == {} and backend.trial_workers() == {}
    for queue in queues.values():  # shut down: it takes no more trials
        with pytest.raises(RuntimeError):
            queue.submit(int)


def test_a_tunedservices_queue_drops_its_waiting_trials_when_it_goes() -> None:
    pool = ThreadPoolExecutor(1)
    release = threading.Event()
    mine, other = TrialQueue(pool), TrialQueue(pool)
    running = other.submit(release.wait)  # holds the shared thread
    waiting = [mine.submit(int) for _ in range(3)]
    assert mine.pending() == 3
    mine.shutdown(wait=False, cancel_futures=True)
    release.set()
    assert running.result() is True
    for future in waiting:
        with pytest.raises(CancelledError):
            future.result()
    with pytest.raises(RuntimeError):
        mine.submit(int)
    assert other.submit(int).result() == 0  # the others' queues and the shared threads carry on
    pool.shutdown()
