"""Trial result cache: an identical trial is never run twice.

Key: (model, GPU type, engine version, config key, shape bucket). Values are :class:`TrialResult` JSON. Stores
implement :class:`ResultStore` (``load`` / ``save`` of a ``{key: json}`` mapping, oldest entry first);
:class:`JsonFileStore` keeps it in a local file, and the operator keeps it in a ConfigMap per TunedService
(:mod:`controller.adapters.kube_result_store`), so it outlives the operator's Pod.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult
from controller.errors import InvalidInput, ShiftlightError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialKey:
    model: str
    gpu_type: str
    engine_version: str
    config_key: str
    shape_bucket: str

    @classmethod
    def of(
        cls, *, model: str, gpu_type: str, engine_version: str, config: EngineConfig, shape: TrafficShape
    ) -> TrialKey:
        return cls(model, gpu_type, engine_version, config.key(), shape.bucket())

    def encode(self) -> str:
        return "|".join((self.model, self.gpu_type, self.engine_version, self.config_key, self.shape_bucket))


@runtime_checkable
class ResultStore(Protocol):
    def load(self) -> dict[str, str]:
        """Every stored entry: encoded key -> TrialResult JSON."""
        ...

    def save(self, entries: dict[str, str]) -> None:
        """Persist the whole mapping (atomically where the backend allows)."""
        ...


class MemoryStore:
    def __init__(self) -> None:
        self.entries: dict[str, str] = {}

    def load(self) -> dict[str, str]:
        return dict(self.entries)

    def save(self, entries: dict[str, str]) -> None:
        self.entries = dict(entries)


class JsonFileStore:
    """``{"version": 1, "entries": {key: result_json}}`` in one file, replaced atomically on save."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"unreadable trial cache: {exc}", source=str(self.path)) from exc
        entries = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise InvalidInput(
                "expected an object with 'entries' of JSON strings", source=str(self.path), field="entries"
            )
        return {str(k): v for k, v in entries.items()}

    def save(self, entries: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": 1, "entries": entries}, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


class TrialCache:
    """Get/put trial results by :class:`TrialKey`; failed measurements are never cached (they say nothing)."""

    def __init__(self, store: ResultStore | None = None) -> None:
        self.store: ResultStore = store or MemoryStore()
        self._lock = threading.Lock()
        self._entries = self.store.load()
        self.hits = 0
        self.misses = 0

    def get(self, key: TrialKey) -> TrialResult | None:
        with self._lock:
            raw = self._entries.get(key.encode())
            if raw is None:
                self.misses += 1
                return None
        try:
            result = TrialResult.model_validate_json(raw)
        except ValidationError as exc:
            # a bad entry is a miss (the trial runs again and replaces it), never an error of the cycle
            log.warning("dropped an invalid cached trial result for %s: %s", key.encode(), exc.errors()[:1])
            with self._lock:
                self._entries.pop(key.encode(), None)
                self.misses += 1
            return None
        self.hits += 1
        return result

    def put(self, key: TrialKey, result: TrialResult) -> None:
        """Remember ``result``; a store that cannot be written keeps it in memory (logged), never fails the trial."""
        with self._lock:
            self._entries.pop(key.encode(), None)  # re-inserted last: the newest entry
            self._entries[key.encode()] = result.model_dump_json()
            try:
                self.store.save(dict(self._entries))
            except ShiftlightError as exc:
                log.warning("could not save the trial cache (kept in memory): %s", exc)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, TrialKey) and key.encode() in self._entries
