"""Server-side numbers of a trial: scrape vLLM's ``/metrics`` before and after, and take the deltas.

Counters (``vllm:spec_decode_*``, ``vllm:num_preemptions``, token counters) are summed over label sets (DP engines)
and differenced; ``vllm:kv_cache_usage_perc`` is a gauge, so the trial samples it while the load runs and keeps
the peak. Parsing is prometheus_client's own text parser. A scrape is one bounded read
(:mod:`controller.http_bounded`): a total deadline and :data:`MAX_EXPOSITION_BYTES`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from controller import http_bounded
from controller.domain.scrub import strip_userinfo
from controller.domain.trial import SpecDecodeStats
from controller.errors import MetricsUnavailable

SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
PREEMPTIONS = "vllm:num_preemptions"
KV_USAGE = "vllm:kv_cache_usage_perc"
GENERATION_TOKENS = "vllm:generation_tokens"
PROMPT_TOKENS = "vllm:prompt_tokens"
PREFIX_HITS = "vllm:prefix_cache_hits"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
REQUEST_SUCCESS = "vllm:request_success"
#: The longest ``/metrics`` page read (vLLM's is some hundred kilobytes, with every histogram).
MAX_EXPOSITION_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class MetricsSnapshot:
    """Counter totals (keyed by family name without ``_total``), per-position acceptance and gauges."""

    counters: dict[str, float]
    per_position: dict[int, float]
    gauges: dict[str, float]

    def has(self, family: str) -> bool:
        return family in self.counters


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse a Prometheus text exposition into summed counters and gauges."""
    counters: dict[str, float] = defaultdict(float)
    gauges: dict[str, float] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError, RecursionError) as exc:
        # the parser's message may quote the line it choked on: only its type is repeated
        raise MetricsUnavailable(
            f"unparseable /metrics exposition ({type(exc).__name__})", delay_s=5, kind="malformed"
        ) from None
    for fam in families:
        for s in fam.samples:
            # counters: every ``*_total`` sample, whether the TYPE line names the family with or without ``_total``
            if s.name.endswith("_total") and fam.type in ("counter", "unknown", "untyped"):
                base = s.name[: -len("_total")]
                if base == SPEC_PER_POS:
                    per_pos[int(s.labels.get("position", "0"))] += s.value
                else:
                    counters[base] += s.value
            elif fam.type == "gauge" and s.name == fam.name:
                gauges[fam.name] += s.value
    return MetricsSnapshot(counters=dict(counters), per_position=dict(per_pos), gauges=dict(gauges))


def scrape(base_url: str, *, timeout_s: float = 10.0, max_bytes: int = MAX_EXPOSITION_BYTES) -> MetricsSnapshot:
    """GET ``/metrics`` within ``timeout_s`` in all and ``max_bytes``, and parse it; every failure is a
    :class:`MetricsUnavailable` whose ``kind`` says how (its message quotes nothing of the answer)."""
    url = base_url.rstrip("/") + "/metrics"
    shown = strip_userinfo(url)
    try:
        answer = http_bounded.request("GET", url, limits=http_bounded.Limits(timeout_s, max_bytes=max_bytes))
    except http_bounded.ReadFailed as exc:
        raise MetricsUnavailable(f"{shown}: {exc.describe()}", delay_s=5, kind=exc.kind) from None
    if answer.status != 200:
        raise MetricsUnavailable(f"{shown}: HTTP {answer.status}", delay_s=5, kind="http-status")
    try:
        text = answer.body.decode("utf-8")
    except UnicodeDecodeError:
        raise MetricsUnavailable(f"{shown}: the exposition is not UTF-8", delay_s=5, kind="malformed") from None
    return parse_metrics(text)


@dataclass(frozen=True)
class MetricsDelta:
    """What the server counted between two snapshots."""

    spec_enabled: bool
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...]
    preemptions: float
    generation_tokens: float
    prompt_tokens: float
    prefix_cache_hits: float
    prefix_cache_queries: float
    requests_finished: float
    kv_cache_usage_peak: float | None

    def spec_decode(self) -> SpecDecodeStats | None:
        """Acceptance stats, only when speculation is configured and something was drafted."""
        if not self.spec_enabled or self.drafts <= 0 or self.draft_tokens <= 0:
            return None
        return SpecDecodeStats(
            acceptance_rate=min(1.0, self.accepted_tokens / self.draft_tokens),
            mean_acceptance_length=1.0 + self.accepted_tokens / self.drafts,
            per_position=tuple(min(1.0, a / self.drafts) for a in self.accepted_per_position),
        )


def delta(before: MetricsSnapshot, after: MetricsSnapshot, *, kv_peak: float | None = None) -> MetricsDelta:
    def d(name: str) -> float:
        return max(0.0, after.counters.get(name, 0.0) - before.counters.get(name, 0.0))

    positions = sorted(after.per_position)
    per_pos = tuple(max(0.0, after.per_position[p] - before.per_position.get(p, 0.0)) for p in positions)
    kv = kv_peak if kv_peak is not None else after.gauges.get(KV_USAGE)
    return MetricsDelta(
        spec_enabled=after.has(SPEC_DRAFTS) or after.has(SPEC_DRAFT_TOKENS),
        drafts=d(SPEC_DRAFTS),
        draft_tokens=d(SPEC_DRAFT_TOKENS),
        accepted_tokens=d(SPEC_ACCEPTED),
        accepted_per_position=per_pos,
        preemptions=d(PREEMPTIONS),
        generation_tokens=d(GENERATION_TOKENS),
        prompt_tokens=d(PROMPT_TOKENS),
        prefix_cache_hits=d(PREFIX_HITS),
        prefix_cache_queries=d(PREFIX_QUERIES),
        requests_finished=d(REQUEST_SUCCESS),
        kv_cache_usage_peak=None if kv is None else min(1.0, max(0.0, kv)),
    )


class GaugeSampler:
    """Polls ``/metrics`` in a background thread while load runs, keeping the peak KV-cache usage."""

    def __init__(self, base_url: str, *, interval_s: float = 1.0) -> None:
        self.base_url = base_url
        self.interval_s = interval_s
        self.kv_peak: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kv-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                snap = scrape(self.base_url, timeout_s=self.interval_s * 5)
            except MetricsUnavailable:
                continue
            kv = snap.gauges.get(KV_USAGE)
            if kv is not None:
                self.kv_peak = kv if self.kv_peak is None else max(self.kv_peak, kv)

    def __enter__(self) -> GaugeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
