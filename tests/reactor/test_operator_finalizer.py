"""kopf keeps nothing on a TunedService: no finalizer, no progress annotations (the watch feeds the scheduler and
holds no handler of its own per object). A TunedService an earlier operator left kopf's finalizer on (one daemon per
TunedService needed it) gets it removed, so its deletion is never blocked. A deleted TunedService, reported by the
watch, leaves nothing held by the operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend
from tests.support.kube_operator import G, V, operator, tuned_service, wait_for

pytestmark = pytest.mark.kube

KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def test_no_finalizer_an_old_one_removed_and_a_deletion_leaves_nothing(
    api: client.ApiClient, operator_api: client.ApiClient, settings_for: Callable[[str], OperatorSettings]
) -> None:
    co = client.CustomObjectsApi(api)
    fresh = tuned_service("fresh", route=None)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", fresh)
    upgraded = tuned_service("upgraded", route=None)
    upgraded["metadata"]["finalizers"] = [KOPF_FINALIZER]
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", upgraded)

    def stored(name: str) -> Any:
        return dict(co.get_namespaced_custom_object(G, V, "prod", "tunedservices", name))

    settings = settings_for("replica-a")
    with operator(settings, operator_api, backend=SimulatorBackend(settings, operator_api)) as replica:
        for name in ("fresh", "upgraded"):
            wait_for(f"a status on {name}", lambda name=name: stored(name).get("status"))
        wait_for("the old finalizer removed", lambda: not stored("upgraded")["metadata"].get("finalizers"))
        assert not stored("fresh")["metadata"].get("finalizers")
        annotations = stored("fresh")["metadata"].get("annotations") or {}
        assert not [a for a in annotations if a.startswith("kopf.")]
        wait_for("both held", lambda: replica.loop.held() == 2)

        for name in ("fresh", "upgraded"):
            co.delete_namespaced_custom_object(G, V, "prod", "tunedservices", name)
        assert co.list_namespaced_custom_object(G, V, "prod", "tunedservices")["items"] == []
        wait_for("nothing held", lambda: replica.loop.held() == 0)
        assert replica.scheduler.queue.held() == set()
