"""Where the operator keeps the sequence number of a trial cache's last save (see
:mod:`controller.adapters.kube.canary.results`): out of the tenant's reach, and across restarts."""

from __future__ import annotations

from typing import Any, Protocol

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.manifests import TS_GROUP, TS_PLURAL, TS_VERSION

JSON = dict[str, Any]


class SequenceLedger(Protocol):
    """Where the operator keeps the sequence number of a cache's last save, out of the tenant's reach."""

    def read(self) -> int:
        """The last sequence number recorded (0: none yet). Raises a :class:`ShiftlightError` when unreadable."""
        ...

    def write(self, sequence: int) -> None:
        """Record ``sequence``. Raises a :class:`ShiftlightError` when it cannot be written."""
        ...


class MemoryLedger:
    """A ledger in this process's memory (a cache with no TunedService to keep it in)."""

    def __init__(self, sequence: int = 0) -> None:
        self.sequence = sequence

    def read(self) -> int:
        return self.sequence

    def write(self, sequence: int) -> None:
        self.sequence = sequence


class TunedServiceLedger:
    """The sequence number in the TunedService's status (``status.trialCache.sequence``), which the operator's
    status writes carry over and the admission policy lets no tenant write."""

    def __init__(self, api: client.ApiClient, *, namespace: str, name: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.name = name

    @property
    def where(self) -> str:
        return f"tunedservice {self.namespace}/{self.name}"

    def read(self) -> int:
        with kube_errors(self.where):
            body: JSON = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                TS_GROUP, TS_VERSION, self.namespace, TS_PLURAL, self.name
            )
        raw = ((body.get("status") or {}).get("trialCache") or {}).get("sequence")
        return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else 0

    def write(self, sequence: int) -> None:
        with kube_errors(self.where):
            self.custom.patch_namespaced_custom_object_status(
                TS_GROUP,
                TS_VERSION,
                self.namespace,
                TS_PLURAL,
                self.name,
                {"status": {"trialCache": {"sequence": sequence}}},
                _content_type="application/merge-patch+json",
            )


def owner_ledger(api: client.ApiClient, namespace: str, owner_references: list[JSON]) -> SequenceLedger:
    """The ledger of the TunedService that owns the cache (its status); one in memory when none does."""
    for owner in owner_references:
        if owner.get("kind") == "TunedService" and owner.get("name"):
            return TunedServiceLedger(api, namespace=namespace, name=str(owner["name"]))
    return MemoryLedger()


__all__ = ["MemoryLedger", "SequenceLedger", "TunedServiceLedger", "owner_ledger"]
