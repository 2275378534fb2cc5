"""Trial result cache: an identical trial is never run twice.

Key: (model, GPU type, engine version (the canary image), config key, shape bucket). Values are
:class:`TrialResult` JSON. Stores implement :class:`ResultStore` (``load`` / ``save`` of a ``{key: json}`` mapping,
oldest entry first); :class:`JsonFileStore` keeps it in a local file, and the operator keeps it in a ConfigMap per
TunedService (:mod:`controller.adapters.kube.canary.results`, each entry signed with the operator's key), so it
outlives the operator's Pod.

A stored result is evidence, and evidence is checked before it is served (:func:`refusal`): its config and shape
bucket must be the key's, its SLO the request's (goodput is counted per request under the SLO, so a result judged
under another SLO is measured again, never re-scored), and a result of a config the quality gate covers must carry
a quality report that passes the gate as it is now (its thresholds may have been raised since the report was judged:
the report is judged again, and one that fails the current thresholds is measured again). :class:`CachedTrials` is
the ``LoadTester`` that serves only such hits.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape
from controller.domain.trial import QualityReport, TrialResult, TrialStatus
from controller.errors import InvalidInput, ShiftlightError
from controller.ports import LoadTester, TrialRequest

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


def mismatch(key: TrialKey, result: TrialResult) -> str:
    """Why ``result`` cannot be the result stored under ``key`` (empty: it can): its config or shape bucket differ."""
    if result.config.key() != key.config_key:
        return f"it holds config {result.config.key()} under the key of config {key.config_key}"
    if result.shape.bucket() != key.shape_bucket:
        return f"it holds shape bucket {result.shape.bucket()} under the key of bucket {key.shape_bucket}"
    return ""


class GateThresholds(Protocol):
    """The thresholds of a quality gate as it is now.

    :class:`controller.trials.verdict.quality.QualityGate` has them.
    """

    @property
    def min_exact_match(self) -> float: ...

    @property
    def max_logprob_divergence(self) -> float: ...


def fails_gate(report: QualityReport, gate: GateThresholds) -> str:
    """Why ``report`` does not pass ``gate``'s current thresholds (empty: it does)."""
    if report.exact_match_rate < gate.min_exact_match:
        return f"exact match {report.exact_match_rate:.0%} is under the gate's {gate.min_exact_match:.0%} now"
    if report.mean_logprob_divergence > gate.max_logprob_divergence:
        return (
            f"log-prob divergence {report.mean_logprob_divergence:.4f} is over the gate's "
            f"{gate.max_logprob_divergence:.4f} now"
        )
    return ""


def refusal(
    key: TrialKey, result: TrialResult, request: TrialRequest, *, gated: bool, gate: GateThresholds | None = None
) -> str:
    """Why the stored ``result`` must not answer ``request`` (empty: it may). ``gated``: the quality gate covers the
    request's config (a lossy config), so a measured result must carry a passed quality report; ``gate``, when
    given, judges that report again against the gate's current thresholds."""
    if why := mismatch(key, result):
        return why
    if result.config.key() != request.config.key():
        return "its config is not the requested one"
    if result.shape.bucket() != request.shape.bucket():
        return "its shape bucket is not the requested one"
    if result.slo != request.slo:
        return "judged under another SLO"
    if gated and result.status is TrialStatus.MEASURED and not (result.quality is not None and result.quality.passed):
        return "a lossy config's result without a passed quality report"
    if gated and gate is not None and result.quality is not None and (why := fails_gate(result.quality, gate)):
        return f"its quality report fails the current gate: {why}"
    return ""


class TrialCache:
    """Get/put trial results by :class:`TrialKey`; failed measurements are never cached (they say nothing)."""

    def __init__(self, store: ResultStore | None = None) -> None:
        self.store: ResultStore = store or MemoryStore()
        self._lock = threading.Lock()
        self._entries = self.store.load()
        self.hits = 0
        self.misses = 0
        self.refused = 0  # stored results that did not hold for the request (see refusal)

    def _stored(self, key: TrialKey) -> TrialResult | None:
        """The valid result stored under ``key``; an entry that is not one (or holds another config or shape bucket
        than its key's) is dropped: a miss, so the trial runs again and replaces it, never an error of the cycle."""
        with self._lock:
            raw = self._entries.get(key.encode())
        if raw is None:
            return None
        why = ""
        try:
            result: TrialResult | None = TrialResult.model_validate_json(raw)
        except ValidationError as exc:
            result, why = None, f"not a trial result: {exc.errors()[:1]}"
        if result is not None and (wrong := mismatch(key, result)):
            result, why = None, wrong
        if result is None:
            log.warning("dropped the cached trial result for %s: %s", key.encode(), why)
            with self._lock:
                self._entries.pop(key.encode(), None)
        return result

    def get(self, key: TrialKey) -> TrialResult | None:
        result = self._stored(key)
        with self._lock:
            if result is None:
                self.misses += 1
            else:
                self.hits += 1
        return result

    def lookup(
        self, key: TrialKey, request: TrialRequest, *, gated: bool, gate: GateThresholds | None = None
    ) -> TrialResult | None:
        """The stored result for ``request`` when it may answer it (:func:`refusal`, its quality report judged again
        by ``gate`` when given), with the request's exact shape; None (a miss) otherwise: the trial runs and its
        result replaces the entry."""
        result = self._stored(key)
        why = "" if result is None else refusal(key, result, request, gated=gated, gate=gate)
        with self._lock:
            if result is None or why:
                self.misses += 1
                self.refused += bool(why)
            else:
                self.hits += 1
        if result is None or why:
            if why:
                log.info("not serving the cached trial result for %s: %s", key.encode(), why)
            return None
        return result.model_copy(update={"shape": request.shape, "slo": request.slo})

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


class CachedTrials:
    """A ``LoadTester`` in front of ``inner`` (a trial runner without a cache of its own): a request is answered
    from ``cache`` only by a result that holds for it (:meth:`TrialCache.lookup`), otherwise ``inner`` measures it
    and the result is stored. A fresh request always measures; failed and invalid results are never stored.

    ``key`` gives a request's :class:`TrialKey` (the runner's model, GPU type and engine image), ``gated`` whether
    the quality gate covers a config (its served results must carry a passed quality report), ``gate`` (optional)
    the quality gate as it is now (a served result's report must pass its current thresholds), ``on_hit``
    (optional) is told of each request answered from the cache."""

    def __init__(
        self,
        inner: LoadTester,
        cache: TrialCache,
        *,
        key: Callable[[TrialRequest], TrialKey],
        gated: Callable[[EngineConfig], bool],
        gate: Callable[[], GateThresholds | None] | None = None,
        on_hit: Callable[[TrialRequest, TrialResult], None] | None = None,
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.key = key
        self.gated = gated
        self.gate = gate
        self.on_hit = on_hit
        """Told of each request answered from the cache (the Trial CR's writer records it)."""

    def run(self, request: TrialRequest) -> TrialResult:
        key = self.key(request)
        if not request.fresh:
            gate = self.gate() if self.gate is not None else None
            hit = self.cache.lookup(key, request, gated=self.gated(request.config), gate=gate)
            if hit is not None:
                if self.on_hit is not None:
                    self.on_hit(request, hit)
                return hit
        result = self.inner.run(request)
        if result.status not in (TrialStatus.FAILED, TrialStatus.INVALID):
            self.cache.put(key, result)
        return result
