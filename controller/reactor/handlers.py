"""kopf wiring: login from the same client configuration as the rest of the operator, and the watch of
TunedServices feeding the :class:`CycleScheduler`, which runs every TunedService's cycles on a few shared threads
(each cycle chooses when the next is due). A new generation (a spec change) is answered first; a deletion drops the
TunedService. kopf keeps no daemon, thread or handler progress per TunedService, and writes nothing on them.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from controller.adapters.kube.client import ApiClient
from controller.crd.models import GROUP, PLURAL_TUNED_SERVICE, VERSION
from controller.reactor.scheduler import CycleScheduler

log = logging.getLogger(__name__)


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


def build_registry(scheduler: CycleScheduler, api: ApiClient) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING  # our Events carry the reasons; kopf's own only for problems
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        scheduler.start()

    @kopf.on.cleanup(registry=registry)
    def stop(**_: Any) -> None:
        scheduler.stop()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(api)

    @kopf.on.event(GROUP, VERSION, PLURAL_TUNED_SERVICE, registry=registry)
    async def seen(*, type: str | None, body: kopf.Body, **_: Any) -> None:
        """Every watch event of a TunedService (and each one listed): held and cycled from then on, a new
        generation (a spec change) taken first, a deletion dropped with all its state. Event handlers keep no state
        on the object, so this writes nothing; it runs on kopf's event loop and only touches the queue."""
        meta = body.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not namespace or not name:
            return
        if type == "DELETED":
            scheduler.remove(namespace, name)
        else:
            scheduler.notice(namespace, name, meta.get("generation"))

    return registry


__all__ = ["build_registry", "connection_info"]
