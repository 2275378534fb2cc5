"""TrafficRouter on Gateway API ``HTTPRoute`` backendRef weights, with a replica-ratio fallback.

With a route: every rule's backendRefs get ``stable = 100 - w`` and ``candidate = w`` (the candidate backendRef is
added next to the stable one when missing, with the same port). The route is replaced (PUT) under its
resourceVersion, retried on a conflict.

When the stable backendRef is an ``InferencePool`` (Gateway API Inference Extension), the split is between the
stable pool and a candidate pool in the same rule (:mod:`controller.adapters.routing.inference_pool`): the candidate
pool (and its endpoint picker clone) is created before the route gives it weight, and at weight 0 (rollback, promote)
the route goes back to the stable pool only, after which the candidate pool is removed.

Without the Gateway API installed (no ``gateway.networking.k8s.io/v1 httproutes`` in discovery) or without a
route named in the TunedService, traffic is split by replica ratio: of the variants' total replicas,
``round(total * w / 100)`` run the candidate (at least one while ``w > 0``, at least one stable while ``w < 100``).
"""

from __future__ import annotations

import logging
from typing import Any

from controller.adapters.checks import check_weight
from controller.adapters.kube.canary.manifest import OwnerRef
from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.objects import KubeObjects
from controller.adapters.routing.inference_pool import InferencePools
from controller.adapters.routing.pool_manifests import candidate_name, stable_pool_name
from controller.domain.observation import TargetRef
from controller.errors import ClusterConflict, NotFound

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"

JSON = dict[str, Any]


def gateway_installed(api: ApiClient) -> bool:
    """Whether the API server serves HTTPRoutes (the Gateway API CRDs are installed)."""
    try:
        return PLURAL in KubeObjects(api).served(GROUP, VERSION, what="discovery")
    except NotFound:
        return False


def set_route_weights(
    route: JSON, *, stable: str, candidate: str, candidate_weight: int, drop_candidate_at_zero: bool = False
) -> JSON:
    """A copy of ``route`` with the stable/candidate backendRef weights set (pure). With
    ``drop_candidate_at_zero``, weight 0 removes the candidate backendRef (the stable backend only)."""
    out: JSON = {**route, "spec": {**route.get("spec", {})}}
    rules = []
    for rule in route.get("spec", {}).get("rules", []) or []:
        refs = [dict(r) for r in rule.get("backendRefs", []) or []]
        if drop_candidate_at_zero and candidate_weight == 0:
            refs = [r for r in refs if r.get("name") != candidate]
        names = [r.get("name") for r in refs]
        if stable in names and candidate not in names and (candidate_weight or not drop_candidate_at_zero):
            template = refs[names.index(stable)]
            refs.append({k: v for k, v in template.items() if k != "weight"} | {"name": candidate})
        for ref in refs:
            if ref.get("name") == stable:
                ref["weight"] = 100 - candidate_weight
            elif ref.get("name") == candidate:
                ref["weight"] = candidate_weight
        rules.append({**rule, "backendRefs": refs})
    out["spec"]["rules"] = rules
    return out


def route_weight(route: JSON, *, stable: str, candidate: str) -> int:
    """Percent of the route's weight on ``candidate`` (first rule that references either backend)."""
    for rule in route.get("spec", {}).get("rules", []) or []:
        weights = {r.get("name"): int(r.get("weight", 1)) for r in rule.get("backendRefs", []) or []}
        if stable in weights or candidate in weights:
            total = weights.get(stable, 0) + weights.get(candidate, 0)
            return round(100 * weights.get(candidate, 0) / total) if total else 0
    return 0


def replica_split(total: int, candidate_weight: int) -> tuple[int, int]:
    """(stable, candidate) replicas that approximate ``candidate_weight`` percent by replica ratio."""
    total = max(total, 1 if candidate_weight in (0, 100) else 2)
    cand = round(total * candidate_weight / 100)
    if candidate_weight > 0:
        cand = max(cand, 1)
    if candidate_weight < 100:
        cand = min(cand, total - 1)
    return total - cand, cand


class GatewayRouter:
    """TrafficRouter on an HTTPRoute; falls back to replica ratios when there is no route or no Gateway API."""

    def __init__(
        self,
        api: ApiClient,
        cluster: KubeCluster,
        *,
        route: str | None,
        stable_service: str,
        candidate_service: str,
        use_gateway: bool | None = None,
        retries: int = 5,
        owner: OwnerRef | None = None,
        manage_pools: bool = True,
    ) -> None:
        """``manage_pools=False`` (the simulator backend's mirror): a route whose stable backend is an InferencePool
        is left alone, since no candidate pods exist for a candidate pool to select."""
        self.objects = KubeObjects(api)
        self.pools = InferencePools(api, owner=owner)
        """Candidate InferencePools, when the route's stable backend is one (owned by ``owner``)."""
        self.cluster = cluster
        self.route = route
        self.stable_service = stable_service
        self.candidate_service = candidate_service
        self.use_gateway = (gateway_installed(api) if use_gateway is None else use_gateway) and route is not None
        self.retries = retries
        self.manage_pools = manage_pools

    def _read(self, target: TargetRef) -> JSON:
        assert self.route is not None
        return self.objects.get(
            GROUP, VERSION, target.namespace, PLURAL, self.route, what=f"httproute {target.namespace}/{self.route}"
        )

    def _backends(self, route: JSON) -> tuple[str, str, bool]:
        """(stable, candidate, whether they are InferencePools) as the route names them."""
        pool = stable_pool_name(route, self.stable_service)
        if pool is not None:
            return pool, candidate_name(pool), True
        return self.stable_service, self.candidate_service, False

    def stable_pool_selectors(self, target: TargetRef) -> tuple[dict[str, str], ...]:
        """The stable InferencePool's ``matchLabels`` (candidate and trial pods must stay out of it); () when the
        route's stable backend is not a pool, or there is no route."""
        if not self.use_gateway:
            return ()
        try:
            stable, _, pool = self._backends(self._read(target))
        except NotFound:
            return ()
        selector = self.pools.selector(target, stable) if pool else {}
        return (selector,) if selector else ()

    def routes_to_pool(self, target: TargetRef) -> bool:
        """Whether the route's stable backend is an InferencePool (candidates then get a candidate pool, not a
        Service); False without a route."""
        if not self.use_gateway:
            return False
        try:
            return self._backends(self._read(target))[2]
        except NotFound:
            return False

    def get_weight(self, target: TargetRef) -> int:
        if not self.use_gateway:
            stable = self.cluster.replicas(target, "stable")
            cand = self.cluster.replicas(target, "candidate")
            return round(100 * cand / (stable + cand)) if stable + cand else 0
        route = self._read(target)
        stable_ref, candidate_ref, _ = self._backends(route)
        return route_weight(route, stable=stable_ref, candidate=candidate_ref)

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        check_weight(candidate_weight)
        if not self.use_gateway:
            total = self.cluster.replicas(target, "stable") + self.cluster.replicas(target, "candidate")
            stable, cand = replica_split(total, candidate_weight)
            if cand or self.cluster.replicas(target, "candidate"):
                self.cluster.scale(target, "candidate", cand)
            self.cluster.scale(target, "stable", stable)
            log.info("%s: replica split stable=%d candidate=%d (%d%%)", target, stable, cand, candidate_weight)
            return
        assert self.route is not None
        route = self._read(target)
        stable_ref, candidate_ref, pool = self._backends(route)
        if pool and not self.manage_pools:
            log.info(
                "%s: route %s routes to InferencePool %s; not mirroring weights onto it", target, self.route, stable_ref
            )
            return
        if pool and candidate_weight > 0:
            self.pools.ensure_candidate(target, stable_ref)  # before the route gives it traffic
        self._write_weights(target, route, stable_ref, candidate_ref, candidate_weight, pool)
        if pool and candidate_weight == 0:
            self.pools.remove_candidate(target, stable_ref)  # once the route no longer names it

    def _write_weights(
        self, target: TargetRef, route: JSON, stable: str, candidate: str, candidate_weight: int, pool: bool
    ) -> None:
        assert self.route is not None
        for attempt in range(self.retries):
            if attempt:
                route = self._read(target)
            updated = set_route_weights(
                route,
                stable=stable,
                candidate=candidate,
                candidate_weight=candidate_weight,
                drop_candidate_at_zero=pool,
            )
            try:
                self.objects.replace(
                    GROUP,
                    VERSION,
                    target.namespace,
                    PLURAL,
                    self.route,
                    updated,
                    what=f"httproute {target.namespace}/{self.route}",
                )
            except ClusterConflict:
                if attempt == self.retries - 1:
                    raise
                continue
            log.info("%s: route %s candidate weight %d%%", target, self.route, candidate_weight)
            return


__all__ = ["GatewayRouter", "gateway_installed", "replica_split", "route_weight", "set_route_weights"]
