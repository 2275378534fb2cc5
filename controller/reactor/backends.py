"""Per-TunedService runtimes: the Ports and Reconciler the loop drives, built from the operator settings.

* ``simulator`` (default): an in-process :class:`SimulatedFleet` per TunedService plays production. Metrics, the
  load tester, the router and the cluster act on that fleet; every action's Event still goes to the Kubernetes
  API, and when the TunedService names an HTTPRoute (and the Gateway API is installed) the weights are mirrored
  onto the route too. Simulated time moves by each cycle's ``requeue_after_s`` (compressed by
  ``loop.time_scale`` in real time).
* ``kubernetes``: Prometheus metrics, Deployments per variant (:class:`KubeCluster`) and HTTPRoute weights
  (:class:`GatewayRouter`, replica-ratio fallback; a candidate InferencePool next to an InferencePool backend).
  Trials run as Pods on the canary pool beside the cycle (started, then polled; one at a time per TunedService);
  each reports its progress in its Trial CR, and results are cached in a ConfigMap per TunedService
  (``<name>-trial-cache``), so a restarted operator never re-runs a measured trial.

Runtimes live as long as the operator process; all decision state lives in the CR status.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest
from controller.adapters.kube.canary.progress import ReportingLoadTester, TrialCRReporter
from controller.adapters.kube.canary.results import ConfigMapResultStore, EntrySigner, cache_name
from controller.adapters.kube.canary.runner import canary_trials, tuned_service_owner
from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.crs import owner_references
from controller.adapters.kube.events import KubeEvents
from controller.adapters.kube.pod_template import baseline_config
from controller.adapters.notify.recording import NopNotifier, RecordingNotifier
from controller.adapters.routing.gateway import GatewayRouter, gateway_installed
from controller.crd.models import TunedServiceSpec
from controller.decide import DigestRules, Rules, ScalingRules
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput, NotFound
from controller.policy import Policy, load_policy, parse_policy, profile_feasibility
from controller.ports import Cluster, LoadTester, Notifier, TrafficRouter
from controller.reactor.policy_refusals import POLICY_REFUSALS, PolicyRefusals
from controller.reactor.settings import OperatorSettings
from controller.reconcile import Ports, Reconciler
from controller.trials.background import BackgroundLoadTester
from controller.trials.cache import CachedTrials, TrialCache
from controller.trials.launchers import Launcher

log = logging.getLogger(__name__)


@dataclass
class TargetRuntime:
    """What the loop needs for one TunedService."""

    reconciler: Reconciler
    ports: Ports
    advance: Callable[[float], object] = field(default=lambda seconds: None)
    """Move (simulated) time forward by the previous cycle's requeue, before the next cycle."""
    generation: int | None = None
    notifier: Notifier | None = None
    initial_config: EngineConfig | None = None
    """What the workload runs before Shiftlight changed anything (a TunedService without a status starts there)."""


class Backend(Protocol):
    def runtime(self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any]) -> TargetRuntime: ...

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted TunedService's runtimes and shut down its workers."""
        ...

    def held(self) -> set[tuple[str, str]]:
        """The TunedServices (namespace, name) this backend holds a runtime or a worker for."""
        ...


# ----- shared pieces ---------------------------------------------------------------------------------------


class EventingCluster:
    """A Cluster that delegates to ``inner`` and writes every ``record_event`` as a Kubernetes Event."""

    def __init__(self, inner: Cluster, events: KubeEvents) -> None:
        self.inner = inner
        self.events = events
        self.on_promote: list[Callable[[TargetRef], None]] = []

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        self.inner.deploy(target, variant, config, replicas)

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        self.inner.scale(target, variant, replicas)

    def retire(self, target: TargetRef, variant: str) -> None:
        self.inner.retire(target, variant)

    def promote(self, target: TargetRef) -> None:
        self.inner.promote(target)
        for hook in self.on_promote:
            hook(target)

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        return self.inner.ready_replicas(target, variant)

    def external_autoscaler(self, target: TargetRef) -> str | None:
        return self.inner.external_autoscaler(target)

    def record_event(self, target: TargetRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.inner.record_event(target, reason, message, warning=warning)
        self.events.record(target, reason, message, warning=warning)


class MirroredRouter:
    """A TrafficRouter that routes on ``primary`` and mirrors every weight onto ``mirror`` (e.g. an HTTPRoute)."""

    def __init__(self, primary: TrafficRouter, mirror: TrafficRouter) -> None:
        self.primary = primary
        self.mirror = mirror

    def get_weight(self, target: TargetRef) -> int:
        return self.primary.get_weight(target)

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        self.primary.set_weight(target, candidate_weight)
        self.mirror.set_weight(target, candidate_weight)


#: What a preset is called: a name, never a path.
PRESET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def preset_path(settings: OperatorSettings, preset: str) -> Path:
    """The file of the policy preset named ``preset``, inside the admin's policy directory and nowhere else.

    A preset is a name (``[a-z0-9][a-z0-9-]*``): a tenant cannot reach another file of the operator's Pod with
    ``../`` or an absolute path, and a symlink that leaves the directory is refused too."""
    if not PRESET_NAME.fullmatch(preset):
        raise InvalidInput(
            f"a preset is a name ([a-z0-9][a-z0-9-]*, at most 63 characters), got {preset!r}",
            field="spec.policy.preset",
        )
    root = Path(settings.policy_dir).resolve()
    path = (root / f"{preset}.yaml").resolve()
    if path.parent != root or not path.is_file():
        offered = sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []
        raise InvalidInput(
            f"unknown policy preset {preset!r}; presets: {', '.join(offered)}", field="spec.policy.preset"
        )
    return path


def resolve_policy(
    api: client.ApiClient,
    settings: OperatorSettings,
    spec: TunedServiceSpec,
    body: Mapping[str, Any],
    *,
    refusals: PolicyRefusals = POLICY_REFUSALS,
) -> Policy:
    """The TunedService's policy: a preset file or a ConfigMap key, with the spec's approval/dry-run/SLO on top.
    A ConfigMap policy refused before, at the same resourceVersion and text, is refused again without re-judging it."""
    namespace = body["metadata"]["namespace"]
    if spec.policy.config_map_ref is not None:
        ref = spec.policy.config_map_ref
        with kube_errors(f"configmap {namespace}/{ref.name}"):
            cm = client.CoreV1Api(api).read_namespaced_config_map(ref.name, namespace)
        text = (cm.data or {}).get(ref.key)
        if text is None:
            raise InvalidInput(f"key {ref.key!r} not found", source=f"configmap {namespace}/{ref.name}")
        source = f"configmap {namespace}/{ref.name}:{ref.key}"
        version = (cm.metadata.resource_version if cm.metadata else None, hashlib.sha256(text.encode()).hexdigest())
        policy = refusals.judged(("configmap", source, *version), lambda: parse_policy(text, source=source))
        policy = policy.with_feasibility(profile_feasibility(policy))
    else:
        policy = load_policy(preset_path(settings, spec.policy.preset or settings.default_policy))
    size, budget = policy.space.product_size(), settings.max_space_combinations
    if size > budget:
        raise InvalidInput(
            f"the space has {size:,} combinations, more than the {budget:,} this operator allows one TunedService "
            "(SHIFTLIGHT_MAX_SPACE_COMBINATIONS); list fewer values or use coarser ranges",
            source=f"policy {policy.name}",
            field="space",
        )
    raw_spec = body.get("spec") or {}
    update: dict[str, object] = {
        "approval": spec.approval_mode,
        "dry_run": bool(spec.dry_run or policy.dry_run),
    }
    if "slo" in raw_spec:
        update["slo"] = spec.slo
    return policy.model_copy(update=update).with_feasibility(policy.feasibility)


# ----- simulator backend ---------------------------------------------------------------------------------


class SimulatorBackend:
    """One simulated fleet per TunedService; production actions land on the fleet, Events in Kubernetes."""

    def __init__(self, settings: OperatorSettings, api: client.ApiClient, *, notifier: Notifier | None = None) -> None:
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
        ports = Ports(
            metrics=SimulatedMetrics(fleet),
            load_tester=SimulatedLoadTester(model, gpu),
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


# ----- kubernetes backend --------------------------------------------------------------------------------


def route_through_pools(cluster: KubeCluster, router: GatewayRouter, target: TargetRef) -> tuple[dict[str, str], ...]:
    """Where the route's stable backend is an InferencePool: candidate pods stay out of the stable pool (its
    selector joins the cluster's), and the candidate is reached through its own pool, so no ``<service>-candidate``
    Service is made. Returns the stable pool's selectors (trial pods stay out of it too); () without a pool."""
    selectors = router.stable_pool_selectors(target)
    cluster.selectors = (*cluster.selectors, *selectors)
    if router.routes_to_pool(target):
        cluster.candidate_service = None
    return selectors


class KubernetesBackend:
    """Production actions on the cluster: Deployments, HTTPRoute weights, Events; metrics from Prometheus."""

    def __init__(
        self,
        settings: OperatorSettings,
        api: client.ApiClient,
        *,
        notifier: Notifier | None = None,
        trial_launcher: Callable[[KubernetesTrialManifest], Launcher] | None = None,
    ) -> None:
        """``trial_launcher`` starts the trial engines (default: Pods on the canary pool)."""
        self.settings = settings
        self.api = api
        self.notifier = notifier
        self.trial_launcher = trial_launcher
        self._runtimes: dict[tuple[str, str, str, int | None], TargetRuntime] = {}
        # trial cache entries live in the tenant's namespace: each is signed with the admin's key (a mounted
        # Secret), or, with none configured, with a key of this process (a restart measures them again)
        key_file = settings.trial_cache_key_file
        self.cache_signer = EntrySigner.from_file(key_file) if key_file is not None else EntrySigner.ephemeral()
        if key_file is None:
            log.warning("no trial cache key file (SHIFTLIGHT_TRIAL_CACHE_KEY_FILE): cached trials last one process")
        # one trial worker per TunedService, kept across its generations: trials run beside the cycle, one at a
        # time, so a spec change while a trial runs queues the next behind it instead of a second canary engine
        self._trial_workers: dict[tuple[str, str, str], ThreadPoolExecutor] = {}
        self._evicting = threading.Lock()

    def runtime(self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any]) -> TargetRuntime:
        from controller.advisor.factory import advisors_for
        from controller.clock import SystemClock
        from controller.observe.profile_forecaster import ProfileForecaster
        from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings

        meta = body["metadata"]
        key = (target.namespace, target.name, str(meta.get("uid", "")), meta.get("generation"))
        if key in self._runtimes:
            return self._runtimes[key]
        policy = resolve_policy(self.api, self.settings, spec, body)
        events = KubeEvents(self.api)
        cluster = KubeCluster(
            self.api,
            port=spec.workload.port,
            template_deployment=spec.workload.deployments[0],
            candidate_service=f"{spec.workload.service}-candidate",
            events=events,
            container=spec.workload.container,
            served_model_name=spec.model.served_model_name,
            stable_service=spec.workload.service,
        )
        cluster.check_template(target)  # a pod template Shiftlight cannot rewrite: refused, nothing deployed
        # the config the user's pods run today: the starting point, and the value of every knob the policy does not
        # tune (a Deployment's own --tensor-parallel-size stays as it is)
        source = cluster.pod_source(target)
        running = baseline_config(source, fallback_model=target.model) if source is not None else None
        if running is not None:
            based, on = policy, running
            policy = POLICY_REFUSALS.judged(("rebased", based.model_dump_json(), on.key()), lambda: based.based_on(on))
        router = GatewayRouter(
            self.api,
            cluster,
            route=spec.workload.http_route,
            stable_service=spec.workload.service,
            candidate_service=f"{spec.workload.service}-candidate",
            owner=tuned_service_owner(target, meta),
        )
        # the label sets that something other than the Deployment and its Service selects engine pods by: a
        # router's own discovery selector, an InferencePool's; candidate and trial pods are kept out of them
        foreign_selectors: tuple[dict[str, str], ...] = spec.workload.router_selectors
        cluster.selectors = (*cluster.selectors, *foreign_selectors)
        if router.use_gateway:
            cluster.on_promote.append(lambda t: router.set_weight(t, 0))  # all traffic to the new stable
            foreign_selectors = (*foreign_selectors, *route_through_pools(cluster, router, target))
        try:
            prom = PrometheusSettings.model_validate(
                {"url": self.settings.prometheus_url, "timeout_s": self.settings.prometheus_timeout_s}
            )
        except ValueError as exc:
            raise InvalidInput(str(exc), source="environment", field="SHIFTLIGHT_PROMETHEUS_URL") from None
        advisors = advisors_for(policy, self.settings.llm_advisors)
        metrics: PrometheusMetrics = self.settings.metrics_source(prom, slo=policy.slo)
        clock = SystemClock()
        runner = canary_trials(
            self.api,
            target,
            spec,
            meta,
            cluster.image,
            default_node_selector=self.settings.canary_node_selector,
            default_tolerations=self.settings.canary_tolerations,
            policy=policy,
            selectors=foreign_selectors,
            launcher=self.trial_launcher,
        )
        cache = TrialCache(
            ConfigMapResultStore(
                self.api,
                namespace=target.namespace,
                name=cache_name(target.name),
                owner_references=owner_references(body),
                signer=self.cache_signer,
                labels={"shiftlight.dev/tuned-service": target.name},
                max_entries=self.settings.trial_cache_max_entries,
                now=clock.now,
            )
        )
        reported: LoadTester = runner
        if self.settings.mirror_crs:
            reported = ReportingLoadTester(
                runner,
                TrialCRReporter(self.api, body),
                clock,
                min_interval_s=self.settings.trial_progress_interval_s,
            )
        # a cached result answers a request only when it holds for it: its config, shape bucket, SLO, engine image
        # and model, and a passed quality report for a config the quality gate covers; a hit starts nothing
        load_tester: LoadTester = CachedTrials(
            reported,
            cache,
            key=runner.key,
            gated=lambda c: runner.quality_gate is not None and (runner.gate_if is None or runner.gate_if(c)),
        )
        ports = Ports(
            metrics=metrics,
            forecaster=ProfileForecaster.from_prometheus(metrics),
            load_tester=load_tester,
            router=router,
            advisor=advisors.advisor,
            fallback_advisor=advisors.fallback,
            notifier=self.notifier or NopNotifier(),
            cluster=cluster,
            clock=clock,
        )
        scaling = ScalingRules(min_replicas=spec.replicas.min_replicas, max_replicas=spec.replicas.max_replicas)
        rules = Rules.from_policy(policy, spec.schedule, scaling=scaling, digest=digest_rules(spec, self.settings))
        self._evict(target.namespace, target.name, keep_uid=key[2])  # earlier generations, an earlier object
        worker = self._trial_workers.get(key[:3])
        if worker is None:
            worker = self._trial_workers[key[:3]] = ThreadPoolExecutor(1, thread_name_prefix=f"trial-{target.name}")
        # the cycle starts a canary trial and polls it (a Pod starting vLLM takes minutes) instead of waiting for it
        background = replace(ports, load_tester=BackgroundLoadTester(load_tester, executor=worker))
        runtime = TargetRuntime(
            reconciler=Reconciler(background, policy, windows=spec.schedule, rules=rules),
            initial_config=running,
            ports=ports,
            notifier=ports.notifier,
        )
        self._runtimes[key] = runtime
        return runtime

    def _evict(self, namespace: str, name: str, *, keep_uid: str | None) -> None:
        """Drop the runtimes of ``namespace/name`` (a new generation replaces them; its in-flight decision goes with
        them, as before) and shut down the trial workers of any object but ``keep_uid`` (the worker of the same
        object is kept across its generations, so trials stay one at a time)."""
        with self._evicting:
            for key in [k for k in list(self._runtimes) if k[:2] == (namespace, name)]:
                self._runtimes.pop(key, None)
            stale = [k for k in list(self._trial_workers) if k[:2] == (namespace, name) and k[2] != keep_uid]
            workers = [w for w in (self._trial_workers.pop(k, None) for k in stale) if w is not None]
        for worker in workers:
            worker.shutdown(wait=False, cancel_futures=True)

    def forget(self, namespace: str, name: str) -> None:
        self._evict(namespace, name, keep_uid=None)

    def held(self) -> set[tuple[str, str]]:
        with self._evicting:
            return {(k[0], k[1]) for k in list(self._runtimes) + list(self._trial_workers)}


def digest_rules(spec: TunedServiceSpec, settings: OperatorSettings) -> DigestRules | None:
    """The daily digest's hour: the TunedService's ``notifications.slack.digestHour``, or the operator's default
    (``SHIFTLIGHT_SLACK_DIGEST_HOUR``) when its spec has no Slack settings; None: no digest."""
    slack = spec.notifications.slack
    hour = settings.slack_digest_hour if slack is None else slack.digest_hour
    return None if hour is None else DigestRules(hour=hour)


def make_backend(settings: OperatorSettings, api: client.ApiClient, *, notifier: Notifier | None = None) -> Backend:
    if settings.backend == "simulator":
        return SimulatorBackend(settings, api, notifier=notifier)
    if settings.backend == "kubernetes":
        return KubernetesBackend(settings, api, notifier=notifier)
    raise NotFound(f"unknown backend {settings.backend!r}")


__all__ = [
    "Backend",
    "EventingCluster",
    "KubernetesBackend",
    "MirroredRouter",
    "SimulatorBackend",
    "TargetRuntime",
    "make_backend",
    "preset_path",
    "resolve_policy",
]
