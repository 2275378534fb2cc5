"""Synthetic vLLM series as OpenMetrics text, for backfilling a real Prometheus (benchmarks and profile tests).

Each :class:`SyntheticTarget` exports the vLLM families the observe queries read, with vLLM's names, labels and
bucket boundaries, as deterministic functions of an arrival-rate curve: counters grow by ``rate * step`` requests
per step, histograms split each step's requests over buckets by fixed log-normal shares. Load the file with
:func:`tests.support.prometheus_server.backfill_openmetrics`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controller.observe import promql

INF = math.inf
#: vLLM's 1-2-5 request-token buckets capped at max_model_len 4096, and its latency buckets.
TOKEN_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, INF)
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
    INF,
)  # fmt: skip
TPOT_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, INF,
)  # fmt: skip


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def lognormal_shares(mean: float, cv: float, bounds: Sequence[float]) -> tuple[float, ...]:
    """Cumulative share of a log-normal(mean, cv) at or below each bound."""
    if cv <= 0:
        return tuple(1.0 if b >= mean else 0.0 for b in bounds)
    s2 = math.log1p(cv * cv)
    mu, sigma = math.log(mean) - s2 / 2, math.sqrt(s2)
    return tuple(1.0 if math.isinf(b) else _phi((math.log(b) - mu) / sigma) for b in bounds)


def _fmt_le(b: float) -> str:
    return "+Inf" if math.isinf(b) else repr(float(b))


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{promql.escape_label_value(v)}"' for k, v in pairs) + "}"


@dataclass(frozen=True)
class SyntheticTarget:
    model_name: str
    namespace: str = "prod"
    variant: str = "stable"
    rate: Callable[[float], float] = field(default=lambda t: 2.0)
    prompt_mean: float = 512.0
    prompt_cv: float = 0.5
    output_mean: float = 128.0
    output_cv: float = 0.5
    latency_s: float = 4.0
    ttft_s: float = 0.3
    tpot_s: float = 0.03
    acceptance: float = 0.6
    spec_k: int = 3


def _per_request(factor: float) -> Callable[[float, float], float]:
    def value(n: float, r: float) -> float:
        return n * factor

    return value


def _series(t: SyntheticTarget) -> Iterator[tuple[str, Callable[[float, float], float]]]:
    """(series line prefix, value(cumulative requests, instantaneous rate)) for one target."""
    base = [("model_name", t.model_name), ("engine", "0"), ("namespace", t.namespace), ("variant", t.variant)]

    def name(metric: str, extra: Sequence[tuple[str, str]] = ()) -> str:
        return metric + _labels([*base, *extra])

    yield name(promql.REQUEST_SUCCESS, [("finished_reason", "length")]), lambda n, r: n
    yield name(promql.REQUEST_SUCCESS, [("finished_reason", "error")]), lambda n, r: 0.0
    yield name(f"{promql.E2E_LATENCY}_sum"), lambda n, r: n * t.latency_s
    yield name(f"{promql.E2E_LATENCY}_count"), lambda n, r: n
    yield name(promql.RUNNING), lambda n, r: r * (t.latency_s - 0.05)
    yield name(promql.WAITING), lambda n, r: r * 0.05
    yield name(promql.KV_USAGE), lambda n, r: min(r * t.latency_s * 0.01, 1.0)
    for metric, mean, cv, bounds in (
        (promql.PROMPT_TOKENS, t.prompt_mean, t.prompt_cv, TOKEN_BUCKETS),
        (promql.GENERATION_TOKENS, t.output_mean, t.output_cv, TOKEN_BUCKETS),
        (promql.TTFT, t.ttft_s, 1.0, TTFT_BUCKETS),
        (promql.TPOT, t.tpot_s, 0.3, TPOT_BUCKETS),
    ):
        for b, share in zip(bounds, lognormal_shares(mean, cv, bounds), strict=True):
            yield name(f"{metric}_bucket", [("le", _fmt_le(b))]), _per_request(share)
        yield name(f"{metric}_sum"), _per_request(mean)
        yield name(f"{metric}_count"), lambda n, r: n
    yield name(promql.GENERATION_TOKENS_TOTAL), lambda n, r: n * t.output_mean
    steps_per_request = t.output_mean / (1 + t.acceptance * t.spec_k)
    yield name(promql.SPEC_DRAFTS), lambda n, r: n * steps_per_request
    yield name(promql.SPEC_DRAFT_TOKENS), lambda n, r: n * steps_per_request * t.spec_k
    yield name(promql.SPEC_ACCEPTED), lambda n, r: n * steps_per_request * t.spec_k * t.acceptance
    for pos in range(t.spec_k):
        share = t.acceptance ** (pos + 1) * t.spec_k / sum(t.acceptance ** (i + 1) for i in range(t.spec_k))
        yield (
            name(promql.SPEC_ACCEPTED_PER_POS, [("position", str(pos))]),
            _per_request(steps_per_request * t.acceptance * share),
        )
    yield name(promql.PREFIX_QUERIES), lambda n, r: n * t.prompt_mean
    yield name(promql.PREFIX_HITS), lambda n, r: n * t.prompt_mean * 0.3
    yield name(promql.PREEMPTIONS), lambda n, r: n * 0.001


def _timeline(target: SyntheticTarget, times: Sequence[float], step_s: float) -> tuple[list[float], list[float]]:
    """(cumulative requests, instantaneous rate) at each time: trapezoidal integral of the rate curve."""
    rates = [max(target.rate(ts), 0.0) for ts in times]
    cumulative: list[float] = []
    total = 0.0
    for i, r in enumerate(rates):
        if i:
            total += 0.5 * (r + rates[i - 1]) * step_s
        cumulative.append(total)
    return cumulative, rates


def write_openmetrics_files(
    directory: Path,
    targets: Sequence[SyntheticTarget],
    *,
    start: float,
    end: float,
    step_s: float,
    chunk_s: float = 7200.0,
) -> tuple[list[Path], int]:
    """Write every target's series from ``start`` to ``end`` (unix seconds) every ``step_s`` into one OpenMetrics
    file per ``chunk_s`` of time (aligned to multiples of ``chunk_s``; 2 h = one TSDB block, so promtool parses each
    sample once instead of once per block). Returns the files and the number of samples."""
    directory.mkdir(parents=True, exist_ok=True)
    times = [start + i * step_s for i in range(int((end - start) // step_s) + 1)]
    timelines = [_timeline(t, times, step_s) for t in targets]
    series = [list(_series(t)) for t in targets]
    chunks: dict[int, list[int]] = {}
    for i, ts in enumerate(times):
        chunks.setdefault(int(ts // chunk_s), []).append(i)
    files: list[Path] = []
    samples = 0
    for chunk, indexes in sorted(chunks.items()):
        path = directory / f"synthetic-{chunk}.om"
        with path.open("w") as out:
            for (cumulative, rates), target_series in zip(timelines, series, strict=True):
                for prefix, value in target_series:
                    out.write(
                        "".join(f"{prefix} {value(cumulative[i], rates[i]):.6g} {times[i]:.3f}\n" for i in indexes)
                    )
                    samples += len(indexes)
            out.write("# EOF\n")
        files.append(path)
    return files, samples
