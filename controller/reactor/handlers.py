"""kopf wiring: login from the same client configuration as the rest of the operator, and one daemon per
TunedService that runs :meth:`ControlLoop.cycle` and sleeps for the cycle's requeue (a timer whose interval each
cycle chooses), woken early when the watch sees a new generation of its TunedService (a spec change)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from controller.adapters.kube.client import ApiClient
from controller.crd.models import GROUP, PLURAL_TUNED_SERVICE, VERSION
from controller.reactor.loop import ControlLoop

log = logging.getLogger(__name__)

#: Threads for kopf's sync handlers. Each TunedService's daemon holds one for as long as it lives, so kopf's default
#: (``min(32, CPUs + 4)``: 6 on a 2-core node) would leave every TunedService after the sixth waiting forever.
DAEMON_THREADS = 1024


def connection_info(api: ApiClient) -> kopf.ConnectionInfo:
    """kopf credentials equivalent to an official-client configuration (kubeconfig or in-cluster)."""
    cfg = api.configuration
    auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken") or ""
    prefix = (cfg.api_key_prefix or {}).get("authorization", "")
    token = auth.split(" ", 1)[1] if " " in auth else auth
    scheme = auth.split(" ", 1)[0] if " " in auth else (prefix or ("Bearer" if token else None))
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme if token else None,
        token=token or None,
        username=cfg.username or None,
        password=cfg.password or None,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


def build_registry(loop: ControlLoop, api: ApiClient) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING  # our Events carry the reasons; kopf's own only for problems
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.execution.max_workers = DAEMON_THREADS

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(api)

    @kopf.daemon(GROUP, VERSION, PLURAL_TUNED_SERVICE, registry=registry, cancellation_timeout=30.0)
    def tuned_service(*, name: str, namespace: str | None, stopped: kopf.DaemonStopped, **_: Any) -> None:
        if namespace is None:
            return
        while not stopped:
            report = loop.cycle(namespace, name)
            if report.acted:
                log.debug("%s/%s: %s (%s) next in %.2fs", namespace, name, report.phase, report.reason, report.sleep_s)
            loop.wait(namespace, name, report.sleep_s, lambda: bool(stopped))
        reason = stopped.reason
        if reason is not None and reason & kopf.DaemonStoppingReason.RESOURCE_DELETED:
            loop.forget(namespace, name)  # deleted: nothing of it stays in the operator

    @kopf.on.event(GROUP, VERSION, PLURAL_TUNED_SERVICE, registry=registry)
    async def seen(*, body: kopf.Body, **_: Any) -> None:
        """Every watch event of a TunedService: a new generation (a spec change) wakes its daemon at once. Event
        handlers keep no state on the object, so this writes nothing; it runs on kopf's event loop (a sync handler
        would take a thread of kopf's pool for each event, and every TunedService's daemon already holds one)."""
        meta = body.get("metadata") or {}
        if meta.get("namespace") and meta.get("name"):
            loop.notice(meta["namespace"], meta["name"], meta.get("generation"))

    return registry


__all__ = ["build_registry", "connection_info"]
