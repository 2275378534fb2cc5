"""The ``simulator`` backend: an in-process :class:`SimulatedFleet` per TunedService plays production. Metrics, the
load tester, the router and the cluster act on that fleet; every action's Event still goes to the Kubernetes API,
and when the TunedService names an HTTPRoute (and the Gateway API is installed) the weights are mirrored onto the
route too. Simulated time moves by each cycle's ``requeue_after_s`` (compressed by ``loop.time_scale`` in real
time)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from controller.adapters.kube.canary.progress import ReportingLoadTester, TrialCRReporter
from controller.adapters.kube.canary.runner import tuned_service_owner
from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.events import KubeEvents
from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.routing.gateway import GatewayRouter, gateway_installed
from controller.crd.models import TunedServiceSpec
from controller.decide import Rules
from controller.domain.observation import TargetRef
from controller.ports import LoadTester, Notifier, TrafficRouter
from controller.reactor.policy_source import resolve_policy
from controller.reactor.runtime import EventingCluster, MirroredRouter, TargetRuntime
from controller.reactor.settings import OperatorSettings
from controller.reconcile import Ports, Reconciler

log = logging.getLogger(__name__)


class SimulatorBackend:
    """One simulated fleet per TunedService; production actions land on the fleet, Events in Kubernetes."""

    def __init__(self, settings: OperatorSettings, api: ApiClient, *, notifier: Notifier | None = None) -> None:
        self.settings = settings
        self.api = api
        self.notifier = notifier
        self._runtimes: dict[tuple[str, str, str], TargetRuntime] = {}
        self._lock = threading.Lock()
        self._gateway: bool | None = None

    def runtime(self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any]) -> TargetRuntime:
        uid = str(body["metadata"].get("uid", ""))
        generation = body["metadata"].get("generation")
        key = (target.namespace, target.name, uid)
        with self._lock:
            current = self._runtimes.get(key)
            if current is not None and current.generation == generation:
                return current
            built = self._build(target, spec, body, previous=current)
            built.generation = generation
            for other in [k for k in self._runtimes if k[:2] == key[:2] and k != key]:
                del self._runtimes[other]  # the same name deleted and created again: the old object's runtime
            self._runtimes[key] = built
            return built

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            for key in [k for k in self._runtimes if k[:2] == (namespace, name)]:
                del self._runtimes[key]

    def held(self) -> set[tuple[str, str]]:
        with self._lock:
            return {(k[0], k[1]) for k in self._runtimes}

    def _build(
        self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any], previous: TargetRuntime | None
    ) -> TargetRuntime:
        from controller.adapters.simulated.fleet import SimulatedCluster, SimulatedMetrics, SimulatedRouter
        from controller.adapters.simulated.loadtester import SimulatedLoadTester
        from controller.clock import FakeClock
        from controller.decide import OptimizerAdvisor
        from controller.decide.signals.window import MAX_ANALYSIS_WINDOW_S
        from controller.simulator.fleet import SimulatedFleet
        from controller.simulator.perf import PerformanceModel
        from controller.simulator.profiles import load_gpu, load_model
        from controller.simulator.traffic import DiurnalTraffic

        sim = self.settings.simulator
        policy = resolve_policy(self.api, self.settings, spec, body)
        model = policy.target.model or sim.model
        gpu = policy.target.gpu or sim.gpu
        try:
            perf = PerformanceModel(load_model(model), load_gpu(gpu))
        except Exception:  # the policy names hardware the simulator has no profile for
            model, gpu = sim.model, sim.gpu
            perf = PerformanceModel(load_model(model), load_gpu(gpu))
        if previous is not None and isinstance(previous.ports.cluster, EventingCluster):
            # a spec change keeps the simulated production fleet (it is the "cluster", not the operator's)
            inner = previous.ports.cluster.inner
            fleet = inner.fleet if isinstance(inner, SimulatedCluster) else None
        else:
            fleet = None
        if fleet is None:
            clock = FakeClock()
            traffic = DiurnalTraffic(sim.seed, sim.traffic_profile)
            fleet = SimulatedFleet(
                model,
                gpu,
                traffic,
                clock,
                sim.seed,
                slo=policy.slo,
                stable_replicas=max(1, spec.replicas.min_replicas),
                cold_start_s=sim.cold_start_s,
                history_s=MAX_ANALYSIS_WINDOW_S,  # the longest window a cycle reads: memory stays bounded
            )
            fleet.advance(300.0)  # a first observation window of traffic before the first cycle
        windows = spec.schedule or fleet.traffic.windows
        router: TrafficRouter = SimulatedRouter(fleet)
        events = KubeEvents(self.api)
        if spec.workload.http_route:
            if self._gateway is None:
                self._gateway = gateway_installed(self.api)
            if self._gateway:
                kube_cluster = KubeCluster(self.api, events=events)
                mirror = GatewayRouter(
                    self.api,
                    kube_cluster,
                    route=spec.workload.http_route,
                    stable_service=spec.workload.service,
                    candidate_service=f"{spec.workload.service}-candidate",
                    use_gateway=True,
                    manage_pools=False,
                    owner=tuned_service_owner(target, body["metadata"]),
                )
                router = MirroredRouter(router, mirror)
        cluster = EventingCluster(SimulatedCluster(fleet), events)
        if isinstance(router, MirroredRouter):
            mirrored = router.mirror
            cluster.on_promote.append(lambda t: mirrored.set_weight(t, 0))  # the route follows the promotion
        load_tester: LoadTester = SimulatedLoadTester(model, gpu)
        if self.settings.mirror_crs:  # each trial's Trial CR, written by its reporter only
            load_tester = ReportingLoadTester(
                load_tester,
                TrialCRReporter(self.api, body),
                fleet.clock,
                min_interval_s=self.settings.trial_progress_interval_s,
            )
        ports = Ports(
            metrics=SimulatedMetrics(fleet),
            load_tester=load_tester,
            router=router,
            advisor=OptimizerAdvisor(policy, prior=lambda c, s: perf.estimate(c, s).output_tokens_per_s, seed=sim.seed),
            notifier=self.notifier or RecordingNotifier(),
            cluster=cluster,
            clock=fleet.clock,
        )
        rules = Rules.from_policy(policy, windows)
        reconciler = Reconciler(ports, policy, rules=rules)
        log.info("%s: simulator runtime (%s on %s, policy %s)", target, model, gpu, policy.name)
        return TargetRuntime(reconciler=reconciler, ports=ports, advance=fleet.advance, notifier=ports.notifier)


__all__ = ["SimulatorBackend"]
