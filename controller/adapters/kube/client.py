"""The Kubernetes API client and the adapter boundary for its errors.

* :data:`ApiClient`: the official client's API client, the handle every Kubernetes adapter is built from (the
  operator's composition passes it along without importing ``kubernetes`` itself).
* :func:`load_api_client`: in-cluster config, or a kubeconfig (and context).
* :func:`kube_errors`: translates ``ApiException`` / urllib3 errors into :mod:`controller.errors` types
  (404 -> NotFound, 409/422 -> ClusterConflict, 403 -> KubeForbidden, 401 -> KubeUnauthorized,
  connection failures -> KubeUnavailable).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from controller.errors import (
    ClusterConflict,
    NotFound,
    PermanentError,
    ShiftlightError,
    TemporaryError,
)

ApiClient = client.ApiClient


class KubeForbidden(PermanentError):
    """RBAC refused the request (HTTP 403)."""


class KubeUnauthorized(PermanentError):
    """The API server did not accept the credentials (HTTP 401)."""


class KubeUnavailable(TemporaryError):
    """The API server could not be reached or answered 5xx."""


def api_message(exc: ApiException) -> str:
    """The API server's own message from a Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def translate(exc: BaseException, what: str = "") -> ShiftlightError:
    """One :mod:`controller.errors` exception for a ``kubernetes``/urllib3 failure."""
    prefix = f"{what}: " if what else ""
    if isinstance(exc, ApiException):
        msg = prefix + api_message(exc)
        if exc.status == 404:
            return NotFound(msg)
        if exc.status in (409, 422):
            return ClusterConflict(msg, delay_s=0.5)
        if exc.status == 403:
            return KubeForbidden(msg)
        if exc.status == 401:
            return KubeUnauthorized(msg)
        if exc.status == 0 or exc.status is None or exc.status >= 500:
            return KubeUnavailable(msg, delay_s=5.0)
        return PermanentError(msg)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        reason = getattr(exc, "reason", None) or exc
        return KubeUnavailable(f"{prefix}cannot reach the Kubernetes API: {reason}", delay_s=5.0)
    return ShiftlightError(prefix + str(exc))


@contextmanager
def kube_errors(what: str = "") -> Iterator[None]:
    """Translate client exceptions raised inside the block (the adapter boundary)."""
    try:
        yield
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate(exc, what) from None


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """An API client: the given kubeconfig/context, else in-cluster config, else the default kubeconfig."""
    import os

    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return client.ApiClient(cfg)
    try:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context
        )
        return api
    except (config.ConfigException, OSError, yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError) as exc:
        # missing, unreadable, not YAML or misshapen: one line naming the file
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        if isinstance(exc, OSError):
            reason = f"cannot read it ({exc.strerror or exc})"
        elif isinstance(exc, yaml.YAMLError):
            reason = f"not valid YAML: {' '.join(str(exc).split())}"
        elif isinstance(exc, config.ConfigException):
            reason = " ".join(str(exc).split())
        else:
            reason = f"not a valid kubeconfig: {' '.join(str(exc).split())}"
        raise PermanentError(f"kubeconfig {where}: {reason}") from None


__all__ = [
    "ApiClient",
    "KubeForbidden",
    "KubeUnauthorized",
    "KubeUnavailable",
    "api_message",
    "kube_errors",
    "load_api_client",
    "translate",
]
