"""Analysis of one rollout step's data: the candidate against stable and the SLO, over the step so far.

Pure: takes both variants' stats, the SLO and the rollout rules; returns a verdict with a machine-readable code.
Steps, bake time and rollback are planned in :mod:`controller.decide.rollout.steps`.

Each latency signal is judged against its SLO at the SLO's own percentile (``slo.ttft_percentile``,
``slo.tpot_percentile``): the breach check and the SLO-headroom waiver read the variant's latency there; the ratio to
stable is taken on p95, which is steadier than a tail percentile over one step's requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from controller.decide.rules import RolloutRules
from controller.decide.signals.latency import judged_latency
from controller.domain.codes import Code
from controller.domain.observation import P95, DataProblem, LatencyMetric, VariantStats
from controller.domain.slo import SLO

AnalysisVerdict = Literal["Successful", "Failed", "Inconclusive", "Pending"]
AnalysisCode = Code
"""An analysis's code: ``within-slo``, ``low-traffic``, ``too-few-samples``, ``slo-breach``, ``beyond-top-bucket``,
``regression``, ``error-rate``, ``goodput-ratio``, ``stable-breach``, or one of :data:`DATA_CODES`."""
DATA_CODES: frozenset[Code] = frozenset(
    {Code.MISSING_DATA, Code.NON_FINITE, Code.NO_CANDIDATE_SAMPLES, Code.NO_CANDIDATE_SERIES}
)
"""Codes of an analysis that could not judge the candidate: the step holds (or rolls back, by policy)."""
_COMPARATIVE: frozenset[Code] = frozenset({Code.REGRESSION})
"""Failures against stable's latency, already scaled to the load each variant carries: a stable breach of the SLO
does not excuse them. (A goodput ratio is not load-scaled: under a load that breaks stable too it is load.)"""


@dataclass(frozen=True)
class Analysis:
    verdict: AnalysisVerdict
    reason: str
    code: AnalysisCode = Code.WITHIN_SLO
    """Machine-readable reason (the sentence is for people)."""

    @property
    def lacks_data(self) -> bool:
        """The candidate could not be judged: absent, NaN or infinite data, or no candidate requests."""
        return self.code in DATA_CODES


def _ms(value: float) -> str:
    return "beyond the histogram's top bucket" if math.isinf(value) else f"{value * 1000:.0f} ms"


def _pname(percentile: float) -> str:
    return f"p{percentile:g}"


def _latency_failure(
    name: str,
    percentile: float,
    tail: float | None,
    cand_p95: float | None,
    stable_p95: float | None,
    bound: float,
    allowed: float,
    headroom: float,
) -> tuple[AnalysisCode, str] | None:
    """Why the candidate fails on one latency signal (None when it does not).

    ``tail`` is its latency at the SLO's ``percentile``: above the bound it breaches the SLO (a p95 above a bound
    on a higher percentile is a breach too, even when that percentile could not be read). At most ``headroom`` x the
    bound, the candidate is far inside the SLO and its ratio to stable alone does not fail it; otherwise a p95 slower
    than stable's by more than ``allowed`` is a regression."""
    label = _pname(percentile)
    if tail is None and percentile > P95 and cand_p95 is not None and cand_p95 > bound:
        tail, label = cand_p95, _pname(P95)
    if tail is not None and tail > bound:
        code: AnalysisCode = Code.BEYOND_TOP_BUCKET if math.isinf(tail) else Code.SLO_BREACH
        return code, f"candidate {name} {label} {_ms(tail)} exceeds the SLO {bound * 1000:.0f} ms"
    if tail is not None and tail <= headroom * bound:
        return None
    if cand_p95 is not None and stable_p95 and cand_p95 > stable_p95 * (1 + allowed):
        return (
            Code.REGRESSION,
            f"candidate {name} p95 {_ms(cand_p95)} is {cand_p95 / stable_p95:.2f}x stable's {_ms(stable_p95)} "
            f"(allowed {1 + allowed:.2f}x)",
        )
    return None


def _data_code(problem: DataProblem) -> AnalysisCode:
    return Code.MISSING_DATA if problem.kind == "missing" else Code.NON_FINITE


def goodput_ratio(candidate: VariantStats, stable: VariantStats) -> float | None:
    """Candidate/stable goodput per replica, at the load each replica carries; None when either is unknown.

    The router splits traffic by weight and the candidate runs ``candidate_replicas_for(fleet, weight)`` replicas
    beside stable's fleet, so the requests each replica receives differ between the variants; per-replica goodput
    is therefore compared per request each replica was sent: ``(good_c / replicas_c) / (requests_c / replicas_c)``
    against the same for stable, i.e. the ratio of the variants' shares of requests that met the SLO. (Raw goodput
    per replica would only measure the router's split.)"""
    if candidate.good_requests is None or stable.good_requests is None:
        return None
    if candidate.requests <= 0 or stable.requests <= 0:
        return None
    stable_share = stable.good_requests / stable.requests
    if stable_share <= 0:
        return math.inf
    return (candidate.good_requests / candidate.requests) / stable_share


def _goodput_gap(stats: VariantStats) -> DataProblem | None:
    for signal in ("good_requests", "output_tokens_per_s"):
        if (problem := stats.problem(signal)) is not None:
            return problem
    if stats.good_requests is None:
        return DataProblem(signal="good_requests", kind="missing")
    if not math.isfinite(stats.output_tokens_per_s):
        return DataProblem(signal="output_tokens_per_s", kind="inf")
    return None


def _lacking(rules: RolloutRules, code: AnalysisCode, reason: str, step_age_s: float) -> Analysis:
    """Data that cannot be judged never passes: Inconclusive (the step holds), or Failed once the step has baked
    when the policy says to roll back on missing data."""
    if rules.on_missing_data == "rollback" and step_age_s >= rules.bake_s:
        return Analysis("Failed", f"{reason}; rolling back on missing data after {step_age_s:.0f} s", code)
    return Analysis("Inconclusive", reason, code)


def _expected_at(ratio: float | None, weight: int, fleet_replicas: int = 1) -> float:
    """The latency trade-off (candidate/stable) to expect in production at ``weight`` percent.

    The canary measured ``ratio`` at equal per-replica load. The candidate runs ``ceil(R x w)`` of the fleet's R
    replicas for a share w of the traffic, so its load per replica relative to stable's is
    ``(w / ceil(R w)) / ((1 - w) / R)``; on a lighter load only that share of the trade-off is expected, and a
    candidate slower than that is regressing.
    """
    if ratio is None or ratio <= 1.0:
        return 1.0
    w = weight / 100
    if w >= 1.0:
        return ratio
    replicas = max(1, fleet_replicas)
    candidate_load = w / max(1, math.ceil(replicas * w - 1e-9))
    stable_load = (1 - w) / replicas
    share = min(1.0, candidate_load / stable_load)
    return 1.0 + (ratio - 1.0) * share


def _stable_breach(stable: VariantStats, slo: SLO) -> str:
    if stable.problem("errors") is None and stable.error_rate > slo.max_error_rate:
        return f"error rate {stable.error_rate:.1%}"
    bounds: tuple[tuple[str, LatencyMetric, float, float], ...] = (
        ("TTFT", "ttft", slo.ttft_seconds, slo.ttft_percentile),
        ("TPOT", "tpot", slo.tpot_seconds, slo.tpot_percentile),
    )
    for name, metric, bound, percentile in bounds:
        value, _ = judged_latency(stable, metric, percentile)
        if value is not None and value > bound:
            return f"{name} {_pname(percentile)} {_ms(value)}"
    return ""


def analyse(
    *,
    candidate: VariantStats | None,
    stable: VariantStats | None,
    slo: SLO,
    rules: RolloutRules,
    expected_ttft_ratio: float | None = None,
    expected_tpot_ratio: float | None = None,
    latency_vs_stable: bool = True,
    step_age_s: float = 0.0,
    weight: int = 50,
    fleet_replicas: int = 1,
) -> Analysis:
    """Compare the candidate with stable over the current step.

    A candidate may trade some latency for throughput: the canary trials measured that trade-off
    (``expected_*_ratio``, candidate/stable, at equal load), so production may show it (scaled to the candidate's
    share of the load at ``weight``), plus the policy's tolerance, before it counts as a regression; with
    ``latency_vs_stable`` false (the canary measured stable outside the SLO on the traffic the candidate met it on)
    its latency is judged against the SLO alone. Beyond that,
    or above the SLO, above the error-rate ceiling or below the goodput ratio, it fails; when stable breaches the
    SLO as well, the verdict is Inconclusive (a human decides).

    Data that cannot be judged never passes: no candidate series, no candidate requests, or an absent, NaN or
    infinite signal of the candidate (or of stable, for the comparisons with stable) gives Inconclusive (the step
    holds; Failed once baked with ``on_missing_data="rollback"``), unless another signal already fails the candidate.
    TTFT and TPOT are judged against their bounds at the SLO's own percentiles, and so is the SLO-headroom waiver
    (``rules.slo_headroom``); the ratio to stable is on p95. A percentile beyond the histogram's top bucket is
    larger than any bound: a breach. Below 100 % the candidate is compared with stable; at 100 % stable carries no
    traffic and only the absolute bounds apply.
    """
    if candidate is None:
        return _lacking(rules, Code.NO_CANDIDATE_SERIES, "no candidate series in the metrics", step_age_s)
    if candidate.requests == 0:
        return _lacking(rules, Code.NO_CANDIDATE_SAMPLES, "no candidate requests observed yet", step_age_s)
    compare = weight < 100
    baseline = stable if compare and stable is not None and stable.requests > 0 else None
    findings = _Findings()
    if compare and baseline is None:
        findings.gaps.append((Code.MISSING_DATA, "no stable requests to compare the candidate with"))
    for problem in candidate.problems:
        if problem.kind != "beyond-top-bucket":
            findings.gaps.append((_data_code(problem), f"candidate {problem.describe()}"))
    _check_error_rate(candidate, baseline, slo, rules, findings)
    checks = (
        _LatencyCheck(
            "TTFT",
            "ttft",
            slo.ttft_seconds,
            slo.ttft_percentile,
            (1 + rules.max_ttft_regression) * _expected_at(expected_ttft_ratio, weight, fleet_replicas) - 1,
        ),
        _LatencyCheck(
            "TPOT",
            "tpot",
            slo.tpot_seconds,
            slo.tpot_percentile,
            (1 + rules.max_tpot_regression) * _expected_at(expected_tpot_ratio, weight, fleet_replicas) - 1,
        ),
    )
    for check in checks:
        breach = _check_latency(check, candidate, baseline, latency_vs_stable, rules, findings)
        if breach is not None:
            return breach
    if baseline is not None:
        _check_goodput(candidate, baseline, rules, findings)
    return _verdict(findings, candidate.requests, stable, slo, rules, step_age_s)


@dataclass
class _Findings:
    """What the checks found, in the order found: failures of the candidate, and data that could not be judged."""

    failures: list[tuple[AnalysisCode, str]] = field(default_factory=list)
    gaps: list[tuple[AnalysisCode, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _LatencyCheck:
    """One latency signal: its SLO bound at the SLO's percentile, and the regression allowed against stable."""

    name: str
    metric: LatencyMetric
    bound: float
    percentile: float
    allowed: float


def _check_error_rate(
    candidate: VariantStats, baseline: VariantStats | None, slo: SLO, rules: RolloutRules, findings: _Findings
) -> None:
    if candidate.problem("errors") is not None:
        return
    # stable's error rate, when it cannot be read, is taken as 0: the stricter comparison
    stable_error = baseline.error_rate if baseline and baseline.problem("errors") is None else 0.0
    if candidate.error_rate > max(slo.max_error_rate, stable_error + rules.max_error_rate_increase):
        findings.failures.append(
            (Code.ERROR_RATE, f"candidate error rate {candidate.error_rate:.1%} (stable {stable_error:.1%})")
        )
    elif candidate.error_rate > rules.max_error_rate:
        findings.failures.append(
            (
                Code.ERROR_RATE,
                f"candidate error rate {candidate.error_rate:.1%} above the ceiling {rules.max_error_rate:.1%}",
            )
        )


def _check_latency(
    check: _LatencyCheck,
    candidate: VariantStats,
    baseline: VariantStats | None,
    latency_vs_stable: bool,
    rules: RolloutRules,
    findings: _Findings,
) -> Analysis | None:
    """Judge one latency signal; an Inconclusive analysis when stable breaches its SLO as much as the candidate."""
    name, metric, bound, percentile, allowed = check.name, check.metric, check.bound, check.percentile, check.allowed
    # the SLO is judged at its own percentile (``tail``), the ratio to stable on p95
    tail, tail_gap = judged_latency(candidate, metric, percentile)
    cand, cand_gap = (tail, tail_gap) if percentile == P95 else judged_latency(candidate, metric, P95)
    for gap in (tail_gap, cand_gap if percentile != P95 else None):
        if gap is not None and candidate.problem(gap.signal) is None:  # absent without a recorded problem
            findings.gaps.append((_data_code(gap), f"candidate {gap.describe()}"))
    if tail is None and cand is None:
        return None
    stab_tail, _ = judged_latency(baseline, metric, percentile)
    stab, stab_gap = judged_latency(baseline if latency_vs_stable else None, metric, P95)
    if stab_tail is not None and tail is not None and stab_tail > bound >= tail:
        return None  # stable breaches this SLO and the candidate meets it: better, whatever the ratio
    failure = _latency_failure(name, percentile, tail, cand, stab, bound, allowed, rules.slo_headroom)
    if failure is None:
        if stab_gap is not None:
            findings.gaps.append(
                (_data_code(stab_gap), f"stable {stab_gap.describe()}: the {name} regression check cannot be made")
            )
        return None
    if (
        failure[0] != Code.REGRESSION
        and stab_tail is not None
        and stab_tail > bound
        and tail is not None
        and tail <= stab_tail * (1 + allowed)
    ):
        return Analysis(
            "Inconclusive",
            f"stable breaches the {name} SLO too ({_pname(percentile)} {_ms(stab_tail)}): load, not config",
            Code.STABLE_BREACH,
        )
    findings.failures.append(failure)
    return None


def _check_goodput(candidate: VariantStats, baseline: VariantStats, rules: RolloutRules, findings: _Findings) -> None:
    cand_gap, stab_gap = _goodput_gap(candidate), _goodput_gap(baseline)
    if stab_gap is not None:
        findings.gaps.append((_data_code(stab_gap), f"stable {stab_gap.describe()}: the goodput check cannot be made"))
    elif cand_gap is not None and candidate.problem(cand_gap.signal) is None:
        findings.gaps.append((_data_code(cand_gap), f"candidate {cand_gap.describe()}"))
    elif cand_gap is None:
        ratio = goodput_ratio(candidate, baseline)
        if ratio is not None and ratio < rules.min_goodput_ratio:
            findings.failures.append(
                (
                    Code.GOODPUT_RATIO,
                    f"candidate goodput per replica {ratio:.3f}x stable's at the same load "
                    f"(at least {rules.min_goodput_ratio:.3f}x)",
                )
            )


def _verdict(
    findings: _Findings,
    samples: int,
    stable: VariantStats | None,
    slo: SLO,
    rules: RolloutRules,
    step_age_s: float,
) -> Analysis:
    """The analysis from what the checks found: failures first, then gaps, then whether enough was seen."""
    failures, gaps = findings.failures, findings.gaps
    if failures and stable is not None and stable.requests >= rules.min_failure_samples:
        stable_breach = _stable_breach(stable, slo)
        if stable_breach and not any(code in _COMPARATIVE for code, _ in failures):
            return Analysis(
                "Inconclusive", f"stable breaches the SLO too ({stable_breach}): load, not config", Code.STABLE_BREACH
            )
    if failures:
        code = failures[0][0]
        if samples < rules.min_failure_samples:
            return Analysis("Pending", f"possible regression, {samples} < {rules.min_failure_samples} samples", code)
        return Analysis("Failed", "; ".join(text for _, text in failures) + f" over {samples} requests", code)
    if gaps:
        reason = "; ".join(text for _, text in gaps) + f" over {samples} requests: not judging the candidate"
        return _lacking(rules, gaps[0][0], reason, step_age_s)
    if samples < rules.min_samples:
        if step_age_s >= rules.low_traffic_after_s and samples >= rules.min_failure_samples:
            return Analysis(
                "Successful",
                f"low traffic: {samples} candidate requests in {step_age_s / 60:.0f} min, within the SLO and no worse "
                "than stable",
                Code.LOW_TRAFFIC,
            )
        return Analysis("Pending", f"{samples} of {rules.min_samples} candidate requests needed", Code.TOO_FEW_SAMPLES)
    return Analysis(
        "Successful", f"candidate within the SLO and no worse than stable over {samples} requests", Code.WITHIN_SLO
    )


__all__ = [
    "DATA_CODES",
    "Analysis",
    "AnalysisCode",
    "AnalysisVerdict",
    "analyse",
    "goodput_ratio",
]
