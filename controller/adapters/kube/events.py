"""Kubernetes Events about a TunedService, aggregated as client-go's recorder does."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.manifests import JSON, TS_GROUP, TS_PLURAL, TS_VERSION, event_manifest
from controller.domain.observation import TargetRef
from controller.domain.scrub import scrub_known
from controller.errors import NotFound, ShiftlightError

log = logging.getLogger(__name__)


#: Events remembered for aggregation, as client-go's recorder does (its ``maxLruCacheEntries``).
EVENT_CACHE_ENTRIES = 4096


@dataclass
class _Seen:
    name: str
    count: int


class KubeEvents:
    """Writes Kubernetes Events about a TunedService (each action's reason), aggregated as client-go's recorder
    does: an Event that repeats one already written (same object, type, reason and message) raises that Event's
    ``count`` and ``lastTimestamp`` instead of creating another. The Events remembered are bounded
    (:data:`EVENT_CACHE_ENTRIES`, least recently seen first out) and :meth:`forget` drops a deleted object's."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_entries: int = EVENT_CACHE_ENTRIES,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._uids: dict[tuple[str, str], str] = {}
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._now = now
        self.max_entries = max_entries
        self._lock = threading.Lock()  # one writer serves every TunedService's cycle (each on its own thread)

    def _uid(self, target: TargetRef) -> str | None:
        key = (target.namespace, target.name)
        if key not in self._uids:
            try:
                with kube_errors(f"tunedservice {target}"):
                    body: JSON = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                        TS_GROUP, TS_VERSION, target.namespace, TS_PLURAL, target.name
                    )
            except ShiftlightError:  # an Event without its object's uid is still an Event
                return None
            with self._lock:
                self._uids[key] = str(body.get("metadata", {}).get("uid", ""))
        return self._uids.get(key) or None

    def record(self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = "") -> None:
        now = self._now()
        uid = self._uid(target)
        message = scrub_known(message)  # tenants read Events: no operator credential, no URL userinfo
        body = event_manifest(target, reason=reason, message=message, warning=warning, uid=uid, now=now, action=action)
        key = (target.namespace, target.name, uid or "", body["type"], body["reason"], body["message"])
        try:
            with self._lock:
                seen = self._seen.get(key)
            if seen is not None and self._repeat(target.namespace, seen, body["lastTimestamp"]):
                with self._lock:
                    if key in self._seen:
                        self._seen.move_to_end(key)
                return
            with kube_errors(f"event {target}"):
                created = self.core.create_namespaced_event(target.namespace, client.CoreV1Event.model_validate(body))
            name = getattr(getattr(created, "metadata", None), "name", None)
            if name:
                with self._lock:
                    self._seen[key] = _Seen(str(name), 1)
                    while len(self._seen) > self.max_entries:
                        self._seen.popitem(last=False)
        except ShiftlightError as exc:  # an Event is best effort: never fail the cycle for it
            log.warning("could not record event %s on %s: %s", reason, target, exc)

    def _repeat(self, namespace: str, seen: _Seen, stamp: str) -> bool:
        """Count one more occurrence on the Event already written; False when it is gone (Events expire)."""
        patch = {"count": seen.count + 1, "lastTimestamp": stamp}
        try:
            with kube_errors(f"event {namespace}/{seen.name}"):
                self.core.patch_namespaced_event(seen.name, namespace, patch)
        except NotFound:
            return False
        seen.count += 1
        return True

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered about ``namespace/name`` (a deleted TunedService)."""
        with self._lock:
            self._uids.pop((namespace, name), None)
            for key in [k for k in self._seen if k[0] == namespace and k[1] == name]:
                del self._seen[key]

    def remembered(self) -> int:
        """How many objects and Events this writer remembers (for tests and the scale bench)."""
        with self._lock:
            return len(self._uids) + len(self._seen)

    def held(self) -> set[tuple[str, str]]:
        """The objects (namespace, name) this writer remembers anything about."""
        with self._lock:
            return set(self._uids) | {(k[0], k[1]) for k in self._seen}


__all__ = ["EVENT_CACHE_ENTRIES", "KubeEvents"]
