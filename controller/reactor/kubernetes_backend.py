"""The ``kubernetes`` backend: Prometheus metrics, Deployments per variant (:class:`KubeCluster`) and HTTPRoute
weights (:class:`GatewayRouter`, replica-ratio fallback; a candidate InferencePool next to an InferencePool backend).
Trials run as Pods on the canary pool beside the cycle (started, then polled; one at a time per TunedService); each
reports its progress in its Trial CR, and results are cached in a ConfigMap per TunedService
(``<name>-trial-cache``), so a restarted operator never re-runs a measured trial."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest
from controller.adapters.kube.canary.progress import ReportingLoadTester, TrialCRReporter
from controller.adapters.kube.canary.results import ConfigMapResultStore, EntrySigner, cache_name
from controller.adapters.kube.canary.trial_runner import canary_trials, tuned_service_owner
from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.crs import owner_references
from controller.adapters.kube.events import KubeEvents
from controller.adapters.kube.pod_template import baseline_config
from controller.adapters.notify.recording import NopNotifier
from controller.adapters.routing.gateway import GatewayRouter
from controller.crd.models import TunedServiceSpec
from controller.cycle import CycleSettings, cycle_for
from controller.decide import DigestRules
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.policy import Policy
from controller.ports import Clock, LoadTester, Notifier
from controller.reactor.gpu_price import api_price, gpu_price
from controller.reactor.policy_refusals import POLICY_REFUSALS
from controller.reactor.policy_source import resolve_policy
from controller.reactor.runtime import TargetRuntime
from controller.reactor.settings import OperatorSettings
from controller.reconcile import Ports
from controller.trials.background import BackgroundLoadTester
from controller.trials.cache import CachedTrials, TrialCache
from controller.trials.engine.launchers import Launcher

log = logging.getLogger(__name__)


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
        api: ApiClient,
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
        # one recorder for every TunedService, as client-go's: its bound on Events remembered for aggregation
        # then holds for the process, not per TunedService
        self.events = KubeEvents(api)
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
        """The TunedService's runtime for its generation (built once): its cluster and router, the policy rebased
        on the config its pods run today, the ports, and the cycle :func:`~controller.cycle.cycle_for` builds."""
        meta = body["metadata"]
        key = (target.namespace, target.name, str(meta.get("uid", "")), meta.get("generation"))
        if key in self._runtimes:
            return self._runtimes[key]
        policy = resolve_policy(self.api, self.settings, spec, body)
        cluster = self._cluster(target, spec)
        running, policy = self._rebased(target, cluster, policy)
        router, selectors = self._router(target, spec, meta, cluster)
        ports = self._ports(target, spec, body, policy, cluster, router, selectors)
        self._evict(target.namespace, target.name, keep_uid=key[2])  # earlier generations, an earlier object
        # the cycle starts a canary trial and polls it (a Pod starting vLLM takes minutes) instead of waiting for it
        worker = self._trial_worker(key[:3], target)
        background = replace(ports, load_tester=BackgroundLoadTester(ports.load_tester, executor=worker))
        # the daily digest, and a decision's cost in Slack at the GPU-hour price (None: GPU-hours only)
        settings = CycleSettings(digest=digest_rules(spec, self.settings), gpu_price=gpu_price(spec, self.settings))
        reconciler = cycle_for(spec, policy, settings, background)
        runtime = TargetRuntime(reconciler=reconciler, initial_config=running, ports=ports, notifier=ports.notifier)
        self._runtimes[key] = runtime
        return runtime

    def _cluster(self, target: TargetRef, spec: TunedServiceSpec) -> KubeCluster:
        """The workload's Deployments, Services and Events; a pod template Shiftlight cannot rewrite is refused
        here, before anything is deployed."""
        cluster = KubeCluster(
            self.api,
            port=spec.workload.port,
            template_deployment=spec.workload.deployments[0],
            candidate_service=f"{spec.workload.service}-candidate",
            events=self.events,
            container=spec.workload.container,
            served_model_name=spec.model.served_model_name,
            stable_service=spec.workload.service,
        )
        cluster.check_template(target)
        return cluster

    def _rebased(self, target: TargetRef, cluster: KubeCluster, policy: Policy) -> tuple[EngineConfig | None, Policy]:
        """The config the user's pods run today (None: none found), and the policy based on it: the starting point,
        and the value of every knob the policy does not tune (a Deployment's own --tensor-parallel-size stays)."""
        source = cluster.pod_source(target)
        running = baseline_config(source, fallback_model=target.model) if source is not None else None
        if running is not None:
            based, on = policy, running
            judged = ("rebased", hashlib.sha256(based.model_dump_json().encode()).hexdigest(), on.key())
            policy = POLICY_REFUSALS.judged(judged, lambda: based.based_on(on), namespace=target.namespace)
        return running, policy

    def _router(
        self, target: TargetRef, spec: TunedServiceSpec, meta: Mapping[str, Any], cluster: KubeCluster
    ) -> tuple[GatewayRouter, tuple[dict[str, str], ...]]:
        """The HTTPRoute weights (replica-ratio fallback), and the label sets that something other than the
        Deployment and its Service selects engine pods by (a router's own discovery selector, an InferencePool's):
        candidate and trial pods are kept out of them."""
        router = GatewayRouter(
            self.api,
            cluster,
            route=spec.workload.http_route,
            stable_service=spec.workload.service,
            candidate_service=f"{spec.workload.service}-candidate",
            owner=tuned_service_owner(target, meta),
        )
        foreign_selectors: tuple[dict[str, str], ...] = spec.workload.router_selectors
        cluster.selectors = (*cluster.selectors, *foreign_selectors)
        if router.use_gateway:
            cluster.on_promote.append(lambda t: router.set_weight(t, 0))  # all traffic to the new stable
            foreign_selectors = (*foreign_selectors, *route_through_pools(cluster, router, target))
        return router, foreign_selectors

    def _ports(
        self,
        target: TargetRef,
        spec: TunedServiceSpec,
        body: Mapping[str, Any],
        policy: Policy,
        cluster: KubeCluster,
        router: GatewayRouter,
        selectors: tuple[dict[str, str], ...],
    ) -> Ports:
        """Prometheus metrics and the load forecast drawn from them, the canary trials (cached), the advisors."""
        from controller.advisor.factory import advisors_for
        from controller.clock import SystemClock
        from controller.observe.profile_forecaster import ProfileForecaster
        from controller.observe.prometheus import PrometheusMetrics

        # the URL, timeout, token file, TLS and variant labels the admin set (errors name their variable)
        prom = self.settings.prometheus_settings()
        advisors = advisors_for(policy, self.settings.llm_advisors)
        metrics: PrometheusMetrics = self.settings.metrics_source(prom, slo=policy.slo)
        clock = SystemClock()
        load_tester = self._load_tester(target, spec, body, policy, cluster, selectors, clock)
        return Ports(
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

    def _load_tester(
        self,
        target: TargetRef,
        spec: TunedServiceSpec,
        body: Mapping[str, Any],
        policy: Policy,
        cluster: KubeCluster,
        selectors: tuple[dict[str, str], ...],
        clock: Clock,
    ) -> LoadTester:
        """Canary trial Pods, each reporting its progress in its Trial CR, behind the TunedService's trial cache."""
        meta = body["metadata"]
        runner = canary_trials(
            self.api,
            target,
            spec,
            meta,
            cluster.image,
            default_node_selector=self.settings.canary_node_selector,
            default_tolerations=self.settings.canary_tolerations,
            policy=policy,
            selectors=selectors,
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
        reporting: ReportingLoadTester | None = None
        if self.settings.mirror_crs:  # each trial's Trial CR, written by its reporter only
            reported = reporting = ReportingLoadTester(
                runner,
                TrialCRReporter(self.api, body),
                clock,
                min_interval_s=self.settings.trial_progress_interval_s,
            )
        # a cached result answers a request only when it holds for it: its config, shape bucket, SLO, engine image
        # and model, and a passed quality report for a config the quality gate covers; a hit starts nothing (its
        # Trial CR is recorded with the result)
        return CachedTrials(
            reported,
            cache,
            key=runner.key,
            gated=lambda c: runner.quality_gate is not None and (runner.gate_if is None or runner.gate_if(c)),
            gate=lambda: runner.quality_gate,  # a cached report is judged again against the gate's thresholds now
            on_hit=reporting.recorded if reporting is not None else None,
        )

    def _trial_worker(self, key: tuple[str, str, str], target: TargetRef) -> ThreadPoolExecutor:
        """The TunedService's one trial worker, kept across its generations."""
        worker = self._trial_workers.get(key)
        if worker is None:
            worker = self._trial_workers[key] = ThreadPoolExecutor(1, thread_name_prefix=f"trial-{target.name}")
        return worker

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
        self.events.forget(namespace, name)

    def runtimes(self) -> dict[tuple[str, str, str, int | None], TargetRuntime]:
        """The runtimes held now, by (namespace, name, uid, generation) (a copy)."""
        with self._evicting:
            return dict(self._runtimes)

    def trial_workers(self) -> dict[tuple[str, str, str], ThreadPoolExecutor]:
        """The trial workers held now, by (namespace, name, uid) (a copy)."""
        with self._evicting:
            return dict(self._trial_workers)

    def held(self) -> set[tuple[str, str]]:
        with self._evicting:
            return {(k[0], k[1]) for k in list(self._runtimes) + list(self._trial_workers)} | self.events.held()


def digest_rules(spec: TunedServiceSpec, settings: OperatorSettings) -> DigestRules | None:
    """The daily digest's hour: the TunedService's ``notifications.slack.digestHour``, or the operator's default
    (``SHIFTLIGHT_SLACK_DIGEST_HOUR``) when its spec has no Slack settings; None: no digest. Its schedule is priced
    at :func:`gpu_price` (0 when none is known) against the admin's API price."""
    slack = spec.notifications.slack
    hour = settings.slack_digest_hour if slack is None else slack.digest_hour
    if hour is None:
        return None
    price = gpu_price(spec, settings)
    return DigestRules(
        hour=hour, gpu_usd_per_hour=price.usd_per_hour if price is not None else 0.0, api=api_price(settings)
    )


__all__ = ["KubernetesBackend", "digest_rules", "route_through_pools"]
