"""The ``simulator`` backend: an in-process :class:`SimulatedFleet` per TunedService plays production. Metrics, the
load tester, the router and the cluster act on that fleet; every action's Event still goes to the Kubernetes API,
and when the TunedService names an HTTPRoute (and the Gateway API is installed) the weights are mirrored onto the
route too. Simulated time moves by each cycle's ``requeue_after_s`` (compressed by ``loop.time_scale`` in real
time)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from controller.adapters.kube.canary.progress import ReportingLoadTester, TrialCRReporter
from controller.adapters.kube.canary.trial_runner import tuned_service_owner
from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.events import KubeEvents
from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.routing.gateway import GatewayRouter, gateway_installed
from controller.crd.models import TunedServiceSpec
from controller.cycle import CycleSettings, CycleSpec, cycle_for
from controller.domain.codes import Code
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.ports import LoadTester, Notifier, TrafficRouter
from controller.reactor.policy_source import resolve_policy
from controller.reactor.runtime import MirroredRouter, TargetRuntime
from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_fleet import Hardware, eventing_cluster, kept_fleet, load_calibration_setting
from controller.reconcile import Ports, Reconciler
from controller.trials.background import BackgroundLoadTester

if TYPE_CHECKING:
    from controller.policy import Policy
    from controller.simulator.fleet.service import SimulatedFleet
    from controller.simulator.perf import PerformanceModel

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Most performance-model estimates the fleets of one model and GPU keep together (a few KB each).
SHARED_ESTIMATES = 4_096


#: Threads that run the simulated trials of every TunedService.
TRIAL_THREADS = 2


class TrialQueue(Executor):
    """One TunedService's trials on a pool shared with others; :meth:`shutdown` drops those not yet begun."""

    def __init__(self, pool: Executor) -> None:
        self.pool = pool
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new trials after shutdown")
            future = self.pool.submit(fn, *args, **kwargs)
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        if cancel_futures:
            for future in pending:
                future.cancel()


class SimulatorRefusal(InvalidInput):
    """The simulator cannot play what a TunedService runs: it has no profile for the model or GPU its spec names,
    or the policy targets others. ``code`` is the machine-readable why; ``field`` names the spec field."""

    #: The refusal's condition and Event reason.
    reason = Code.SIMULATOR_UNSUPPORTED.event_reason

    def __init__(self, code: Code, message: str, *, field: str) -> None:
        super().__init__(f"{code}: {message}", source="simulator", field=field)
        self.code = code


#: Suffixes of a checkpoint's name that do not change its architecture (``Llama-3.1-8B-Instruct``).
_VARIANT_SUFFIXES = ("-instruct", "-chat", "-hf", "-it")


def model_profile(spec: TunedServiceSpec, names: Sequence[str]) -> str | None:
    """The simulator's model profile for ``spec.model``: ``spec.model.profile`` when it names one, else the
    checkpoint's name without its organisation and an instruct/chat suffix (``meta-llama/Llama-3.1-8B-Instruct``
    is ``llama-3.1-8b``); None when no profile has that name."""
    if spec.model.profile in names:
        return spec.model.profile
    base = spec.model.name.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in _VARIANT_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base if base in names else None


def gpu_profile(gpu_type: str, names: Sequence[str]) -> str | None:
    """The simulator's GPU profile for ``spec.gpuType``: the profile of that name, or of its part before the first
    ``-`` (``H200-141GB`` is ``h200``); None when there is none."""
    wanted = gpu_type.lower()
    if wanted in names:
        return wanted
    head = wanted.split("-", 1)[0]
    return head if head in names else None


def simulated_hardware(spec: TunedServiceSpec, policy_model: str | None, policy_gpu: str | None) -> tuple[str, str]:
    """The model and GPU profiles that play ``spec``; :class:`SimulatorRefusal` where the simulator has none, or
    where the policy's target names other ones (it never simulates another model or GPU than the spec's)."""
    from controller.simulator.profiles import gpu_names, model_names

    models, gpus = model_names(), gpu_names()
    model = model_profile(spec, models)
    if model is None:
        raise SimulatorRefusal(
            Code.SIMULATOR_UNKNOWN_MODEL,
            f"the simulator has no profile for model {spec.model.name!r} (profiles: {', '.join(models)}); name one "
            "in spec.model.profile, or use the kubernetes backend",
            field="spec.model.name",
        )
    gpu = gpu_profile(spec.gpu_type, gpus)
    if gpu is None:
        raise SimulatorRefusal(
            Code.SIMULATOR_UNKNOWN_GPU,
            f"the simulator has no profile for GPU {spec.gpu_type!r} (profiles: {', '.join(gpus)}); "
            "use the kubernetes backend",
            field="spec.gpuType",
        )
    if policy_model is not None and policy_model != model:
        raise SimulatorRefusal(
            Code.SIMULATOR_MODEL_MISMATCH,
            f"the spec's model is profile {model!r}, the policy targets {policy_model!r}",
            field="spec.model.name",
        )
    if policy_gpu is not None and policy_gpu != gpu:
        raise SimulatorRefusal(
            Code.SIMULATOR_GPU_MISMATCH,
            f"the spec's GPU is profile {gpu!r}, the policy targets {policy_gpu!r}",
            field="spec.gpuType",
        )
    return model, gpu


class SimulatorBackend:
    """One simulated fleet per TunedService; production actions land on the fleet, Events in Kubernetes."""

    def __init__(
        self,
        settings: OperatorSettings,
        api: ApiClient,
        *,
        notifier: Notifier | None = None,
        background_trials: bool = True,
        forecast: bool = True,
    ) -> None:
        """``background_trials``: trials run on each TunedService's worker thread beside the cycle (as the
        ``kubernetes`` backend's canary Pods do); False runs each inside the cycle that starts it (a cycle's outcome
        then depends on nothing but the calls made, as tests driving ``loop.cycle`` need). ``forecast``: each
        window's load is forecast from the simulated traffic (what weeks of its history would show, as the
        ``kubernetes`` backend's forecast draws on Prometheus' history), so windows are tuned ahead and pre-warmed;
        False: no forecast."""
        self.settings = settings
        self.background_trials = background_trials
        self.forecast = forecast
        self.api = api
        self.notifier = notifier
        self._runtimes: dict[tuple[str, str, str], TargetRuntime] = {}
        # simulated trials (seconds of CPU each) run beside the cycles, so a spec change is read and answered by the
        # next cycle instead of after a trial: on a few threads shared by every TunedService (a thread each would
        # hold its stack for as long as the TunedService lives), through a view per TunedService kept across its
        # generations, which drops its queued trials when the TunedService goes
        self._trial_pool = ThreadPoolExecutor(TRIAL_THREADS, thread_name_prefix="shiftlight-trial")
        self._trial_workers: dict[tuple[str, str, str], TrialQueue] = {}
        self._lock = threading.Lock()
        # one recorder for every TunedService, as client-go's: its bound on Events remembered for aggregation
        # then holds for the process, not per TunedService
        self.events = KubeEvents(api)
        self._gateway: bool | None = None
        # what every TunedService's fleet reads and nobody changes is built once and shared: the traffic generator
        # (its profile and noise), the performance model of a model and GPU and the cache of its estimates
        self._shared: dict[tuple[str, ...], Any] = {}
        self.calibration = load_calibration_setting(settings.simulator.calibration_file)

    def _once(self, key: tuple[str, ...], build: Callable[[], T]) -> T:
        found = self._shared.get(key)
        if found is None:
            found = self._shared[key] = build()
        return cast(T, found)

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
            stale = [self._trial_workers.pop(k) for k in list(self._trial_workers) if k[:2] == key[:2] and k != key]
        for worker in stale:
            worker.shutdown(wait=False, cancel_futures=True)
        return built

    def _worker(self, key: tuple[str, str, str]) -> TrialQueue:
        worker = self._trial_workers.get(key)
        if worker is None:
            worker = self._trial_workers[key] = TrialQueue(self._trial_pool)
        return worker

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            for key in [k for k in self._runtimes if k[:2] == (namespace, name)]:
                del self._runtimes[key]
            workers = [self._trial_workers.pop(k) for k in list(self._trial_workers) if k[:2] == (namespace, name)]
        self.events.forget(namespace, name)
        for worker in workers:
            worker.shutdown(wait=False, cancel_futures=True)

    def runtimes(self) -> dict[tuple[str, str, str], TargetRuntime]:
        """The runtimes held now, by (namespace, name, uid) (a copy)."""
        with self._lock:
            return dict(self._runtimes)

    def trial_workers(self) -> dict[tuple[str, str, str], TrialQueue]:
        """The trial queues held now, by (namespace, name, uid) (a copy)."""
        with self._lock:
            return dict(self._trial_workers)

    def held(self) -> set[tuple[str, str]]:
        with self._lock:
            return {(k[0], k[1]) for k in [*self._runtimes, *self._trial_workers]} | self.events.held()

    def _build(
        self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any], previous: TargetRuntime | None
    ) -> TargetRuntime:
        from controller.adapters.simulated.fleet import SimulatedForecaster, SimulatedMetrics
        from controller.decide import OptimizerAdvisor

        policy = resolve_policy(self.api, self.settings, spec, body)
        model, gpu = simulated_hardware(spec, policy.target.model, policy.target.gpu)
        hardware = Hardware.of(model, gpu, self.calibration)
        perf = self._once(("perf", model, gpu, hardware.curves), hardware.performance)
        fleet = kept_fleet(previous)
        if fleet is None:
            fleet = self._new_fleet(spec, policy, hardware, perf)
        router = self._router(target, spec, body, fleet)
        cluster = eventing_cluster(fleet, router, self.events)
        load_tester = self._load_tester(hardware, body, fleet)
        ports = Ports(
            metrics=SimulatedMetrics(fleet),
            load_tester=load_tester,
            router=router,
            advisor=OptimizerAdvisor(
                policy, prior=lambda c, s: perf.estimate(c, s).output_tokens_per_s, seed=self.settings.simulator.seed
            ),
            notifier=self.notifier or RecordingNotifier(),
            cluster=cluster,
            clock=fleet.clock,
            forecaster=SimulatedForecaster(fleet.traffic) if self.forecast else None,
        )
        reconciler = self._reconciler(target, spec, body, policy, fleet, ports)
        log.info("%s: simulator runtime (%s on %s, %s, policy %s)", target, model, gpu, hardware.curves, policy.name)
        return TargetRuntime(reconciler=reconciler, ports=ports, advance=fleet.advance, notifier=ports.notifier)

    def _new_fleet(
        self, spec: TunedServiceSpec, policy: Policy, hardware: Hardware, perf: PerformanceModel
    ) -> SimulatedFleet:
        """The simulated production fleet of a new TunedService: its minimum replicas (at least one), on the shared
        traffic, performance model and estimates, with a first observation window of traffic behind it."""
        from controller.clock import FakeClock
        from controller.decide.signals.window import MAX_ANALYSIS_WINDOW_S
        from controller.simulator.fleet.estimates import EstimateCache
        from controller.simulator.fleet.service import SimulatedFleet
        from controller.simulator.traffic.diurnal import DiurnalTraffic

        sim = self.settings.simulator
        model, gpu = hardware.model, hardware.gpu
        clock = FakeClock()
        traffic = self._once(("traffic",), lambda: DiurnalTraffic(sim.seed, sim.traffic_profile))
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
            perf=perf,
            estimates=self._once(("estimates", model, gpu, hardware.curves), lambda: EstimateCache(SHARED_ESTIMATES)),
        )
        fleet.advance(300.0)  # a first observation window of traffic before the first cycle
        return fleet

    def _router(
        self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any], fleet: SimulatedFleet
    ) -> TrafficRouter:
        """The fleet's router; mirrored onto the spec's HTTPRoute when it names one and the Gateway API is
        installed (asked once)."""
        from controller.adapters.simulated.fleet import SimulatedRouter

        router: TrafficRouter = SimulatedRouter(fleet)
        if not spec.workload.http_route:
            return router
        if self._gateway is None:
            self._gateway = gateway_installed(self.api)
        if not self._gateway:
            return router
        mirror = GatewayRouter(
            self.api,
            KubeCluster(self.api, events=self.events),
            route=spec.workload.http_route,
            stable_service=spec.workload.service,
            candidate_service=f"{spec.workload.service}-candidate",
            use_gateway=True,
            manage_pools=False,
            owner=tuned_service_owner(target, body["metadata"]),
        )
        return MirroredRouter(router, mirror)

    def _load_tester(self, hardware: Hardware, body: Mapping[str, Any], fleet: SimulatedFleet) -> LoadTester:
        """The simulated trials, on the fleet's curves; each reports its progress in its Trial CR when the operator
        mirrors CRs."""
        from controller.adapters.simulated.loadtester import SimulatedLoadTester

        tester = SimulatedLoadTester(hardware.model, hardware.gpu)
        # with a calibration, trials run on the same curves as the fleet (a model of their own: one per thread)
        if hardware.calibration is not None:
            tester.perf = hardware.performance()
        if not self.settings.mirror_crs:
            return tester
        return ReportingLoadTester(  # each trial's Trial CR, written by its reporter only
            tester,
            TrialCRReporter(self.api, body),
            fleet.clock,
            min_interval_s=self.settings.trial_progress_interval_s,
        )

    def _reconciler(
        self,
        target: TargetRef,
        spec: TunedServiceSpec,
        body: Mapping[str, Any],
        policy: Policy,
        fleet: SimulatedFleet,
        ports: Ports,
    ) -> Reconciler:
        """The cycle of the spec's windows (the traffic profile's when it names none) and, when it sets them, its
        replica bounds, which Shiftlight then manages on the simulated fleet as on a cluster (a spec that sets none
        keeps the fleet's replicas as they start); a decision's cost in Slack (None: GPU-hours only). Its trials run
        on the TunedService's worker, started by one cycle and collected by a later one, with background trials."""
        from controller.reactor.gpu_price import gpu_price  # it maps GPU types with this module's gpu_profile

        bounded = "replicas" in spec.model_fields_set
        cycle = CycleSpec(
            windows=tuple(spec.schedule) or tuple(fleet.traffic.windows), replicas=spec.replicas if bounded else None
        )
        settings = CycleSettings(gpu_price=gpu_price(spec, self.settings))
        if not self.background_trials:
            return cycle_for(cycle, policy, settings, ports)
        worker = self._worker((target.namespace, target.name, str(body["metadata"].get("uid", ""))))
        background = replace(ports, load_tester=BackgroundLoadTester(ports.load_tester, executor=worker))
        return cycle_for(cycle, policy, settings, background)


__all__ = ["SimulatorBackend"]
