"""The trial result cache in the Kubernetes API: one ConfigMap per TunedService, so it outlives the operator's Pod.

Each entry is one data key of the ConfigMap: ``t-<sha256 of the trial key>`` holds
``{"key": <TrialKey.encode()>, "storedAt": <time>, "seq": <n>, "result": <TrialResult>, "mac": <hex>}``, and the
data key ``index`` holds ``{"sequence": <N>, "entries": {<data key>: <n>}, "mac": <hex>}``. The ConfigMap is owned
by the TunedService (collected with it) and labelled; it keeps the newest ``max_entries`` entries, and never more
than ``max_bytes`` of data (under the API server's 1 MiB object limit). An entry that does not fit (over
``MAX_ENTRY_BYTES``, or over what is left of ``max_bytes``) is skipped, and older ones that fit are still kept.
Stored log tails are bounded (:mod:`controller.domain.log_tail`). Saves are merge patches of the entries that
changed, so a save never drops an entry it did not read.

The ConfigMap lives in the tenant's namespace, where anyone with ConfigMap rights (Kubernetes' ``edit`` role) can
write it. So every entry carries an HMAC-SHA256 (``mac``) under the operator's key (:class:`EntrySigner`: a
mounted Secret only the admin configures, ``SHIFTLIGHT_TRIAL_CACHE_KEY_FILE``) over the cache's namespace and name,
the owning TunedService's uid, the trial key, the entry's sequence number, the time stored and the result; an entry
without a valid one was not written by this operator for this TunedService and is refused (a TunedService deleted
and created again under the same name has a new uid: the old entries are refused).

A signed entry can still be an old one put back. So every save takes the next sequence number ``N``: the entries it
writes carry ``N``, the signed ``index`` lists the sequence number of every entry the cache holds, and the operator
keeps ``N`` in the TunedService's status (``status.trialCache.sequence``, which tenants cannot write: the admission
policy lets them write the rollout's approvals only), so it survives restarts. An index older than the status's
sequence, or an entry whose sequence is not the one the index lists, is refused: an older signed result put back
after the operator measured again is never served.

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

from controller.adapters.kube.canary.ledger import SequenceLedger, owner_ledger
from controller.adapters.kube.client import kube_errors
from controller.domain.log_tail import bounded_tail
from controller.domain.trial import TrialResult
from controller.errors import ClusterConflict, InvalidInput, NotFound, ShiftlightError

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

    def sign(self, where: str, uid: str, key: str, seq: int, stored_at: datetime, result_json: str) -> str:
        message = json.dumps([where, uid, key, seq, stored_at.astimezone(UTC).isoformat(), result_json])
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def verify(self, mac: str, where: str, uid: str, key: str, seq: int, stored_at: datetime, result_json: str) -> bool:
        return hmac.compare_digest(mac, self.sign(where, uid, key, seq, stored_at, result_json))

    def sign_index(self, where: str, uid: str, sequence: int, entries: Mapping[str, int]) -> str:
        message = json.dumps([where, uid, "index", sequence, sorted(entries.items())])
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def verify_index(self, mac: str, where: str, uid: str, sequence: int, entries: Mapping[str, int]) -> bool:
        return hmac.compare_digest(mac, self.sign_index(where, uid, sequence, entries))


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
    seq: int = Field(ge=1, description="the sequence number of the save that wrote it")
    result: TrialResult
    mac: str = Field(pattern=r"^[0-9a-f]{64}$", description="HMAC-SHA256 under the operator's key")


#: The data key of the signed index of a cache's entries (no entry's data key: those start with ``t-``).
INDEX_KEY = "index"


class StoredIndex(BaseModel):
    """The sequence number of the last save and of every entry it kept, signed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sequence: int = Field(ge=1)
    entries: dict[str, int] = Field(max_length=10_000)
    mac: str = Field(pattern=r"^[0-9a-f]{64}$")


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
        ledger: SequenceLedger | None = None,
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
        self.ledger = ledger if ledger is not None else owner_ledger(api, namespace, owner_references)
        # the owning TunedService's uid: signed into every entry, so a TunedService created again under the same
        # name (a new uid) is served none of the old one's entries
        self.uid = next((str(o["uid"]) for o in owner_references if o.get("kind") == "TunedService"), "")
        self.labels = {**LABELS, **dict(labels or {})}
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.now = now
        self._stored: dict[str, str] = {}  # data key -> value, as last read or written
        self._stamps: dict[str, datetime] = {}  # trial key -> when it was stored
        self._seqs: dict[str, int] = {}  # trial key -> the sequence number of the save that wrote it
        self._raws: dict[str, str] = {}  # trial key -> its result as last read or written
        self._sequence = 0  # the last save's sequence number
        self._recorded_known = False  # whether the ledger's sequence has been read
        self._exists = False
        self.dropped: list[str] = []  # data keys refused when read back
        self.skipped: list[str] = []  # trial keys of the last save that did not fit

    @property
    def where(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    # ----- ResultStore ---------------------------------------------------------------------------
    def load(self) -> dict[str, str]:
        """Every valid entry, oldest first; invalid ones are dropped (logged) and removed at the next save. With no
        valid index at least as new as the ledger's sequence, no entry is served (each is measured again)."""
        try:
            recorded: int | None = self.ledger.read()
        except ShiftlightError as exc:
            log.warning("%s: cannot read the cache's sequence (serving no entry): %s", self.where, exc)
            recorded = None
        self._recorded_known = recorded is not None
        try:
            with kube_errors(self.where):
                cm = self.core.read_namespaced_config_map(self.name, self.namespace)
        except NotFound:
            self._exists = False
            self._stored = {}
            self._sequence = recorded or 0
            return {}
        self._exists = True
        data = cm.data or {}
        self._stored = {str(k): str(v) for k, v in data.items()}
        index = self._index(self._stored.get(INDEX_KEY), recorded)
        self._sequence = max(recorded or 0, index.sequence if index is not None else 0)
        valid: list[tuple[datetime, str, str, int]] = []
        for dkey, value in self._stored.items():
            if dkey == INDEX_KEY:
                continue
            entry = self._parse(dkey, value, index)
            if entry is not None:
                valid.append((entry.stored_at, entry.key, entry.result.model_dump_json(), entry.seq))
        valid.sort(key=lambda item: item[0])
        self._stamps = {key: stamp for stamp, key, _, _ in valid}
        self._seqs = {key: seq for _, key, _, seq in valid}
        self._raws = {key: raw for _, key, raw, _ in valid}
        return dict(self._raws)

    def save(self, entries: dict[str, str]) -> None:
        """Keep the newest entries of ``entries`` (last = newest) within the bounds; patch what changed. An entry
        that does not fit is skipped (logged), never the end of the save: older entries that fit are kept. The
        entries this save writes, and the index, carry the next sequence number, recorded in the ledger after."""
        now = self.now()
        if not self._recorded_known:  # never go below the recorded sequence: raises when still unreadable
            self._sequence = max(self._sequence, self.ledger.read())
            self._recorded_known = True
        sequence = self._sequence + 1
        kept: dict[str, str] = {}
        seqs: dict[str, int] = {}
        size = 0
        self.skipped = []
        for key, raw in reversed(list(entries.items())):
            if len(kept) >= self.max_entries:
                break
            same = self._raws.get(key) == raw and key in self._seqs
            stamp = (self._stamps.get(key) if same else None) or now
            seq = self._seqs[key] if same else sequence
            value = self._value(key, raw, stamp, seq)
            if len(value) > MAX_ENTRY_BYTES or size + len(value) > self.max_bytes:
                log.warning("%s: skipped cache entry %s (%d bytes do not fit)", self.where, data_key(key), len(value))
                self.skipped.append(key)
                continue
            kept[data_key(key)] = value
            seqs[key] = seq
            self._stamps[key] = stamp
            size += len(value)
        entry_changes: dict[str, str | None] = {k: v for k, v in kept.items() if self._stored.get(k) != v}
        entry_changes.update({k: None for k in self._stored if k not in kept and k != INDEX_KEY})
        if not entry_changes:
            return
        listed = {data_key(k): s for k, s in seqs.items()}
        index = StoredIndex(
            sequence=sequence,
            entries=listed,
            mac=self.signer.sign_index(self.where, self.uid, sequence, listed),
        )
        kept[INDEX_KEY] = index.model_dump_json()
        changes = {**entry_changes, INDEX_KEY: kept[INDEX_KEY]}
        if self._exists or not self._create({k: v for k, v in changes.items() if v is not None}):
            with kube_errors(self.where):
                self.core.patch_namespaced_config_map(
                    self.name,
                    self.namespace,
                    {"data": changes},  # a null removes that entry (RFC 7386)
                    _content_type="application/merge-patch+json",
                )
        self._stored = dict(kept)
        self._sequence = sequence
        self._seqs = seqs
        self._raws = {k: entries[k] for k in seqs}
        self._stamps = {k: s for k, s in self._stamps.items() if k in seqs}
        try:
            self.ledger.write(sequence)
        except ShiftlightError as exc:  # the entries stay served by this process; a restart may measure them again
            log.warning("%s: cannot record the cache's sequence %d: %s", self.where, sequence, exc)

    # ----- internals -----------------------------------------------------------------------------
    def _value(self, key: str, raw: str, stamp: datetime, seq: int) -> str:
        result = TrialResult.model_validate_json(raw)
        result = result.model_copy(update={"log_tail": bounded_tail(result.log_tail)})
        mac = self.signer.sign(self.where, self.uid, key, seq, stamp, result.model_dump_json())
        return StoredEntry(key=key, stored_at=stamp, seq=seq, result=result, mac=mac).model_dump_json(by_alias=True)

    def _index(self, value: str | None, recorded: int | None) -> StoredIndex | None:
        """The signed index when it is this operator's, for this TunedService, and not older than the ledger's
        sequence (``recorded``; None: unknown, so no index is trusted)."""
        why = ""
        index = None
        if value is None:
            why = "no index"
        elif len(value) > self.max_bytes:
            why = "an index larger than the cache"
        else:
            try:
                index = StoredIndex.model_validate_json(value)
            except ValidationError as exc:
                why = f"index: {exc.errors()[0]['msg']}"
        if index is not None and not self.signer.verify_index(
            index.mac, self.where, self.uid, index.sequence, index.entries
        ):
            why, index = "an index whose MAC is not this operator's for this TunedService", None
        if index is not None and (recorded is None or index.sequence < recorded):
            why = f"an index of sequence {index.sequence}, older than the recorded {recorded}"
            index = None
        if index is None and any(k != INDEX_KEY for k in self._stored):
            log.warning("%s: serving no cache entry (%s)", self.where, why)
        return index

    def _parse(self, dkey: str, value: str, index: StoredIndex | None) -> StoredEntry | None:
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
                entry.mac, self.where, self.uid, entry.key, entry.seq, entry.stored_at, entry.result.model_dump_json()
            ):
                why, entry = "its MAC is not this operator's for this TunedService (or it changed since)", None
            if entry is not None and (index is None or index.entries.get(dkey) != entry.seq):
                listed = index.entries.get(dkey) if index is not None else None
                why, entry = f"its sequence {entry.seq} is not the one the signed index lists ({listed})", None
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
    "INDEX_KEY",
    "ConfigMapResultStore",
    "EntrySigner",
    "StoredEntry",
    "StoredIndex",
    "cache_name",
    "data_key",
]
