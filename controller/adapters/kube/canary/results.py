"""The trial result cache in the Kubernetes API: one ConfigMap per TunedService, so it outlives the operator's Pod.

Each entry is one data key of the ConfigMap: ``t-<sha256 of the trial key>`` holds
``{"key": <TrialKey.encode()>, "storedAt": <time>, "result": <TrialResult>, "mac": <hex>}``. The ConfigMap is owned
by the TunedService (collected with it) and labelled; it keeps the newest ``max_entries`` entries, and never more
than ``max_bytes`` of data (under the API server's 1 MiB object limit). An entry that does not fit (over
``MAX_ENTRY_BYTES``, or over what is left of ``max_bytes``) is skipped, and older ones that fit are still kept.
Stored log tails are bounded (:mod:`controller.domain.log_tail`). Saves are merge patches of the entries that
changed, so a save never drops an entry it did not read.

The ConfigMap lives in the tenant's namespace, where anyone with ConfigMap rights (Kubernetes' ``edit`` role) can
write it. So every entry carries an HMAC-SHA256 (``mac``) under the operator's key (:class:`EntrySigner`: a
mounted Secret only the admin configures, ``SHIFTLIGHT_TRIAL_CACHE_KEY_FILE``) over the cache's namespace and name,
the trial key, the time stored and the result; an entry without a valid one was not written by this operator and
is refused.

What is read back is validated entry by entry: one that is not JSON, does not match its data key, is not a valid
result or carries no valid MAC is dropped with a warning and removed at the next save; the other entries are
served as they are.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.adapters.kube.client import kube_errors
from controller.domain.log_tail import bounded_tail
from controller.domain.trial import TrialResult
from controller.errors import ClusterConflict, InvalidInput, NotFound

log = logging.getLogger(__name__)

JSON = dict[str, Any]

#: The most entries one TunedService's cache keeps (the oldest go first).
DEFAULT_MAX_ENTRIES = 200
#: The most bytes of entries one cache ConfigMap holds (the API server refuses objects over 1 MiB).
DEFAULT_MAX_BYTES = 900 * 1024
#: An entry larger than this is refused when read back (a result with its log tail is a few KiB).
MAX_ENTRY_BYTES = 64 * 1024

LABELS = {"app.kubernetes.io/managed-by": "shiftlight", "shiftlight.dev/role": "trial-cache"}

#: The fewest bytes of a signing key.
MIN_KEY_BYTES = 32
KEY_FILE_ENV = "SHIFTLIGHT_TRIAL_CACHE_KEY_FILE"


class EntrySigner:
    """HMAC-SHA256 of cache entries under the operator's key, which no tenant can read or set."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a trial cache key has at least {MIN_KEY_BYTES} bytes")
        self._key = bytes(key)

    @classmethod
    def from_file(cls, path: Path) -> EntrySigner:
        """The key in a mounted Secret file (surrounding whitespace ignored); refused naming the variable when the
        file cannot be read or holds fewer than :data:`MIN_KEY_BYTES` bytes."""
        try:
            key = Path(path).read_bytes().strip()
        except OSError as exc:
            raise InvalidInput(
                f"cannot read the trial cache key file: {exc.strerror}", source="environment", field=KEY_FILE_ENV
            ) from None
        if len(key) < MIN_KEY_BYTES:
            raise InvalidInput(
                f"the trial cache key file holds {len(key)} bytes; at least {MIN_KEY_BYTES} are needed",
                source="environment",
                field=KEY_FILE_ENV,
            )
        return cls(key)

    @classmethod
    def ephemeral(cls) -> EntrySigner:
        """A random key of this process: its entries are trusted by it alone (a restart measures them again)."""
        return cls(secrets.token_bytes(MIN_KEY_BYTES))

    def sign(self, where: str, key: str, stored_at: datetime, result_json: str) -> str:
        message = json.dumps([where, key, stored_at.astimezone(UTC).isoformat(), result_json])
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def verify(self, mac: str, where: str, key: str, stored_at: datetime, result_json: str) -> bool:
        return hmac.compare_digest(mac, self.sign(where, key, stored_at, result_json))


def data_key(key: str) -> str:
    """The ConfigMap data key of a trial key (data keys allow ``[-._a-zA-Z0-9]`` only)."""
    return "t-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def cache_name(service: str) -> str:
    return f"{service}-trial-cache"[:253]


class StoredEntry(BaseModel):
    """One cache entry as stored; anything else in the value is refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    key: str = Field(min_length=1, max_length=4096)
    stored_at: datetime = Field(alias="storedAt")
    result: TrialResult
    mac: str = Field(pattern=r"^[0-9a-f]{64}$", description="HMAC-SHA256 under the operator's key")


class ConfigMapResultStore:
    """A :class:`~controller.trials.cache.ResultStore` in ``namespace/name``, created on the first save."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str,
        owner_references: list[JSON],
        signer: EntrySigner,
        labels: Mapping[str, str] | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a trial cache keeps at least one entry")
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.name = name
        self.owner_references = owner_references
        self.signer = signer
        self.labels = {**LABELS, **dict(labels or {})}
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.now = now
        self._stored: dict[str, str] = {}  # data key -> value, as last read or written
        self._stamps: dict[str, datetime] = {}  # trial key -> when it was stored
        self._exists = False
        self.dropped: list[str] = []  # data keys refused when read back
        self.skipped: list[str] = []  # trial keys of the last save that did not fit

    @property
    def where(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    # ----- ResultStore ---------------------------------------------------------------------------
    def load(self) -> dict[str, str]:
        """Every valid entry, oldest first; invalid ones are dropped (logged) and removed at the next save."""
        try:
            with kube_errors(self.where):
                cm = self.core.read_namespaced_config_map(self.name, self.namespace)
        except NotFound:
            self._exists = False
            self._stored = {}
            return {}
        self._exists = True
        data = cm.data or {}
        self._stored = {str(k): str(v) for k, v in data.items()}
        valid: list[tuple[datetime, str, str]] = []
        for dkey, value in self._stored.items():
            entry = self._parse(dkey, value)
            if entry is not None:
                valid.append((entry.stored_at, entry.key, entry.result.model_dump_json()))
        valid.sort(key=lambda item: item[0])
        self._stamps = {key: stamp for stamp, key, _ in valid}
        return {key: raw for _, key, raw in valid}

    def save(self, entries: dict[str, str]) -> None:
        """Keep the newest entries of ``entries`` (last = newest) within the bounds; patch what changed. An entry
        that does not fit is skipped (logged), never the end of the save: older entries that fit are kept."""
        now = self.now()
        kept: dict[str, str] = {}
        size = 0
        self.skipped = []
        for key, raw in reversed(list(entries.items())):
            if len(kept) >= self.max_entries:
                break
            stamp = self._stamps.get(key) or now
            value = self._value(key, raw, stamp)
            if len(value) > MAX_ENTRY_BYTES or size + len(value) > self.max_bytes:
                log.warning("%s: skipped cache entry %s (%d bytes do not fit)", self.where, data_key(key), len(value))
                self.skipped.append(key)
                continue
            kept[data_key(key)] = value
            self._stamps[key] = stamp
            size += len(value)
        changes: dict[str, str | None] = {k: v for k, v in kept.items() if self._stored.get(k) != v}
        changes.update({k: None for k in self._stored if k not in kept})
        if not changes:
            return
        if self._exists or not self._create({k: v for k, v in changes.items() if v is not None}):
            with kube_errors(self.where):
                self.core.patch_namespaced_config_map(
                    self.name,
                    self.namespace,
                    {"data": changes},  # a null removes that entry (RFC 7386)
                    _content_type="application/merge-patch+json",
                )
        self._stored = dict(kept)
        self._stamps = {k: s for k, s in self._stamps.items() if data_key(k) in kept}

    # ----- internals -----------------------------------------------------------------------------
    def _value(self, key: str, raw: str, stamp: datetime) -> str:
        result = TrialResult.model_validate_json(raw)
        result = result.model_copy(update={"log_tail": bounded_tail(result.log_tail)})
        mac = self.signer.sign(self.where, key, stamp, result.model_dump_json())
        return StoredEntry(key=key, stored_at=stamp, result=result, mac=mac).model_dump_json(by_alias=True)

    def _parse(self, dkey: str, value: str) -> StoredEntry | None:
        why = ""
        entry = None
        if len(value) > MAX_ENTRY_BYTES:
            why = f"larger than {MAX_ENTRY_BYTES} bytes"
        else:
            try:
                entry = StoredEntry.model_validate_json(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                why = f"{'.'.join(str(p) for p in first['loc']) or 'value'}: {first['msg']}"
            if entry is not None and data_key(entry.key) != dkey:
                why, entry = "its key does not match the data key it is stored under", None
            if entry is not None and not self.signer.verify(
                entry.mac, self.where, entry.key, entry.stored_at, entry.result.model_dump_json()
            ):
                why, entry = "its MAC is not this operator's (not written by it, or changed since)", None
        if entry is None:
            log.warning("%s: dropped cache entry %s (%s)", self.where, dkey[:64], why)
            self.dropped.append(dkey)
        return entry

    def _create(self, data: dict[str, str]) -> bool:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                labels=self.labels,
                owner_references=[
                    client.V1OwnerReference(
                        api_version=o["apiVersion"],
                        kind=o["kind"],
                        name=o["name"],
                        uid=o["uid"],
                        controller=o.get("controller"),
                        block_owner_deletion=o.get("blockOwnerDeletion"),
                    )
                    for o in self.owner_references
                ],
            ),
            data=data,
        )
        try:
            with kube_errors(self.where):
                self.core.create_namespaced_config_map(self.namespace, body)
        except ClusterConflict:
            self._exists = True  # created meanwhile (another replica): patch it instead
            return False
        self._exists = True
        return True


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "ConfigMapResultStore",
    "EntrySigner",
    "StoredEntry",
    "cache_name",
    "data_key",
]
