"""A spec change is answered by the next cycle, not after the requeue or a trial: the watch's new generation wakes
the TunedService's daemon (:meth:`ControlLoop.notice`, :meth:`ControlLoop.wait`), and the ``simulator`` backend runs
its trials beside the cycle on a few shared threads, a queue per TunedService that goes with it; while a spec change
waits for its cycle, the routine cycles of other TunedServices give way (at most a few seconds). What every fleet
reads and nobody changes (the traffic generator, the performance model and its estimates, the Event recorder) is
built once for all TunedServices."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client

from controller.adapters.simulated.fleet import SimulatedCluster
from controller.reactor.loop import ControlLoop, CycleReport
from controller.reactor.metrics import OperatorMetrics
from controller.reactor.runtime import EventingCluster
from controller.reactor.settings import ConnectionSettings, LoopSettings, OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend, TrialQueue
from controller.trials.background import BackgroundLoadTester

from .conftest import AlwaysLeader, G, V, tuned_service

pytestmark = pytest.mark.kube


def simulator_loop(kubeconfig: Path, policy_dir: Path, api: client.ApiClient, *, background: bool) -> ControlLoop:
    settings = OperatorSettings(
        connection=ConnectionSettings(kubeconfig=str(kubeconfig)),
        policy_dir=policy_dir,
        health_port=None,
        metrics_port=None,
        loop=LoopSettings(time_scale=300.0, idle_s=0.1, min_sleep_s=0.02),
    )
    backend = SimulatorBackend(settings, api, background_trials=background)
    return ControlLoop(settings, api, backend, AlwaysLeader(), OperatorMetrics())


class Stopped:
    """The daemon's ``stopped`` flag, counting how often the wait asked it."""

    def __init__(self, after: int) -> None:
        self.asked = 0
        self.after = after

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.after


def test_a_new_generation_wakes_the_daemon_and_the_same_one_does_not(
    api: client.ApiClient, operator_api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(route=None))
    loop = simulator_loop(operator_kubeconfig, policy_dir, operator_api, background=False)
    assert not loop.notice("prod", "workhorse", 1)  # no cycle yet: its daemon is starting and reads it anyway
    loop.cycle("prod", "workhorse")
    assert not loop.notice("prod", "workhorse", 1)  # the status write's own watch event: nothing new

    stopped = Stopped(after=3)
    loop.wait("prod", "workhorse", 3600.0, stopped)  # not woken: it sleeps (1 s at a time) until stopped
    assert stopped.asked == 4

    body = co.patch_namespaced_custom_object(
        G, V, "prod", "tunedservices", "workhorse", {"spec": {"replicas": {"minReplicas": 1, "maxReplicas": 4}}}
    )
    generation = body["metadata"]["generation"]
    assert generation == 2
    assert loop.notice("prod", "workhorse", generation)
    stopped = Stopped(after=100)
    loop.wait("prod", "workhorse", 3600.0, stopped)  # woken: back at once for the next cycle
    assert stopped.asked == 1

    loop.cycle("prod", "workhorse")
    stored = co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    assert stored["status"]["observedGeneration"] == generation
    assert not loop.notice("prod", "workhorse", generation)  # answered: nothing wakes it again

    co.delete_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    assert loop.cycle("prod", "workhorse").reason == "deleted"
    assert loop.held() == 0


def test_a_spec_change_is_answered_before_the_routine_cycles_of_others(
    api: client.ApiClient, operator_api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    co = client.CustomObjectsApi(api)
    for name in ("changed", "routine"):
        co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(name, route=None))
    loop = simulator_loop(operator_kubeconfig, policy_dir, operator_api, background=False)
    for name in ("changed", "routine"):
        loop.cycle("prod", name)
    order: list[str] = []
    cycle = loop._cycle

    def traced(namespace: str, name: str) -> CycleReport:
        order.append(name)
        return cycle(namespace, name)

    loop._cycle = traced  # type: ignore[method-assign]
    body = co.patch_namespaced_custom_object(
        G, V, "prod", "tunedservices", "changed", {"spec": {"replicas": {"minReplicas": 1, "maxReplicas": 4}}}
    )
    assert loop.notice("prod", "changed", body["metadata"]["generation"])
    routine = threading.Thread(target=loop.cycle, args=("prod", "routine"))
    routine.start()  # its cycle waits: a spec change is pending
    loop.cycle("prod", "changed")
    routine.join()
    assert order == ["changed", "routine"]
    assert loop._changed == set()


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
    runtimes = list(backend._runtimes.values())
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
    assert fleets[0].perf is fleets[1].perf and fleets[0]._estimates is fleets[1]._estimates
    queues = dict(backend._trial_workers)
    assert set(queues) <= {k for k in backend._runtimes}

    for name in ("one", "two"):
        co.delete_namespaced_custom_object(G, V, "prod", "tunedservices", name)
        assert loop.cycle("prod", name).reason == "deleted"
    assert loop.held() == 0
    assert backend._runtimes == {} and backend._trial_workers == {}
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
