"""The rollout analysis judges each latency signal against its SLO at the SLO's own percentile: a p99 SLO by the
variants' p99 (breach, SLO-headroom waiver, stable's own breach), the ratio to stable on p95. Data at the SLO's
percentile that is absent, NaN, infinite or read at another percentile never passes. Table-driven, pure."""

from __future__ import annotations

import math
from typing import Any

import pytest

from controller.decide import RolloutRules
from controller.decide.rollout.analysis import analyse
from controller.domain import SLO
from controller.domain.observation import DataProblem, VariantStats
from controller.errors import InvalidInput
from controller.policy import parse_policy

# the doc-quoting policy's SLO: p99 TTFT <= 10 s and p99 TPOT <= 40 ms
P99 = SLO(ttft_seconds=10.0, ttft_percentile=99, tpot_seconds=0.04, tpot_percentile=99)
HALF = RolloutRules(steps=(10, 50, 100), bake_s=300, min_samples=100, slo_headroom=0.5)
OFF = RolloutRules(steps=(10, 50, 100), bake_s=300, min_samples=100)


def stats(variant: str, requests: int = 500, **update: Any) -> VariantStats:
    base: dict[str, Any] = {
        "variant": variant,
        "requests": requests,
        "ttft_p95_s": 1.0,
        "ttft_slo_s": 1.5,
        "ttft_slo_percentile": 99,
        "tpot_p95_s": 0.010,
        "tpot_slo_s": 0.012,
        "tpot_slo_percentile": 99,
        "output_tokens_per_s": 400.0,
        "good_requests": requests,
    }
    return VariantStats(**{**base, **update})


STABLE = stats("stable", 3000)

# candidate, stable, rules -> verdict, code
CASES: list[Any] = [
    # TPOT p95 1.6x stable's, p99 18 ms: inside the 40 ms bound with headroom (at most 20 ms)
    pytest.param(
        stats("candidate", tpot_p95_s=0.016, tpot_slo_s=0.018), STABLE, HALF, "Successful", "within-slo", id="waived"
    ),
    pytest.param(
        stats("candidate", tpot_p95_s=0.016, tpot_slo_s=0.018), STABLE, OFF, "Failed", "regression", id="no-headroom"
    ),
    pytest.param(
        stats("candidate", tpot_p95_s=0.016, tpot_slo_s=0.020), STABLE, HALF, "Successful", "within-slo", id="at-it"
    ),
    # the p99 is above the headroom: the p95 ratio is judged
    pytest.param(
        stats("candidate", tpot_p95_s=0.016, tpot_slo_s=0.030), STABLE, HALF, "Failed", "regression", id="above-it"
    ),
    # p95 close to stable's and inside the bound, p99 above it: a breach of the SLO (p95 alone passed it)
    pytest.param(
        stats("candidate", tpot_p95_s=0.011, tpot_slo_s=0.045), STABLE, HALF, "Failed", "slo-breach", id="p99-breach"
    ),
    pytest.param(
        stats("candidate", ttft_p95_s=1.05, ttft_slo_s=12.0), STABLE, OFF, "Failed", "slo-breach", id="ttft-p99-breach"
    ),
    pytest.param(
        stats(
            "candidate",
            tpot_slo_s=None,
            problems=(DataProblem(signal="tpot_slo", kind="beyond-top-bucket"),),
        ),
        STABLE,
        HALF,
        "Failed",
        "beyond-top-bucket",
        id="p99-beyond-top-bucket",
    ),
    # p99 unreadable but p95 already above the bound: the p99 is too
    pytest.param(
        stats("candidate", tpot_p95_s=0.041, tpot_slo_s=None), STABLE, HALF, "Failed", "slo-breach", id="p95-above"
    ),
    # stable breaches the p99 bound and the candidate meets it: better, whatever the p95 ratio
    pytest.param(
        stats("candidate", tpot_p95_s=0.030, tpot_slo_s=0.035),
        stats("stable", 3000, tpot_p95_s=0.012, tpot_slo_s=0.050),
        HALF,
        "Successful",
        "within-slo",
        id="stable-p99-breach-candidate-meets",
    ),
    # both breach the p99 bound alike: load, not config
    pytest.param(
        stats("candidate", tpot_p95_s=0.012, tpot_slo_s=0.051),
        stats("stable", 3000, tpot_p95_s=0.012, tpot_slo_s=0.050),
        HALF,
        "Inconclusive",
        "stable-breach",
        id="both-breach",
    ),
]


@pytest.mark.parametrize(("candidate", "stable", "rules", "verdict", "code"), CASES)
def test_a_p99_slo_is_judged_at_p99(
    candidate: VariantStats, stable: VariantStats, rules: RolloutRules, verdict: str, code: str
) -> None:
    result = analyse(candidate=candidate, stable=stable, slo=P99, rules=rules, weight=10, fleet_replicas=8)
    assert (result.verdict, result.code) == (verdict, code), result.reason


def test_the_reason_names_the_slos_percentile() -> None:
    candidate = stats("candidate", tpot_p95_s=0.011, tpot_slo_s=0.045)
    result = analyse(candidate=candidate, stable=STABLE, slo=P99, rules=HALF, weight=10)
    assert "TPOT p99 45 ms exceeds the SLO 40 ms" in result.reason


# candidate data at the SLO's percentile that cannot be judged -> code
UNJUDGED: list[Any] = [
    pytest.param(stats("candidate", tpot_slo_s=None), "missing-data", id="p99-absent"),
    pytest.param(
        stats("candidate", tpot_slo_s=None, problems=(DataProblem(signal="tpot_slo", kind="missing"),)),
        "missing-data",
        id="p99-missing",
    ),
    pytest.param(
        stats("candidate", ttft_slo_s=None, problems=(DataProblem(signal="ttft_slo", kind="nan"),)),
        "non-finite",
        id="p99-nan",
    ),
    pytest.param(
        stats("candidate", tpot_slo_s=None, problems=(DataProblem(signal="tpot_slo", kind="inf"),)),
        "non-finite",
        id="p99-inf-recorded",
    ),
    pytest.param(stats("candidate", tpot_slo_s=math.inf), "non-finite", id="p99-inf-unrecorded"),
    pytest.param(stats("candidate", tpot_slo_percentile=95), "missing-data", id="read-at-another-percentile"),
    pytest.param(
        stats("candidate", ttft_slo_s=None, ttft_slo_percentile=None, tpot_slo_s=None, tpot_slo_percentile=None),
        "missing-data",
        id="p95-only",
    ),
]


@pytest.mark.security
@pytest.mark.parametrize(("candidate", "code"), UNJUDGED)
@pytest.mark.parametrize("headroom", [0.0, 0.5, 0.99])
def test_data_at_the_slo_percentile_that_cannot_be_judged_never_passes(
    candidate: VariantStats, code: str, headroom: float
) -> None:
    rules = RolloutRules(steps=(10, 50, 100), bake_s=300, min_samples=100, slo_headroom=headroom)
    result = analyse(candidate=candidate, stable=STABLE, slo=P99, rules=rules, weight=10, step_age_s=3600)
    assert (result.verdict, result.code) == ("Inconclusive", code), result.reason
    assert result.lacks_data
    rolling_back = RolloutRules(
        steps=(10, 50, 100), bake_s=300, min_samples=100, slo_headroom=headroom, on_missing_data="rollback"
    )
    baked = analyse(candidate=candidate, stable=STABLE, slo=P99, rules=rolling_back, weight=10, step_age_s=3600)
    assert (baked.verdict, baked.code) == ("Failed", code), baked.reason


@pytest.mark.parametrize("percentile", [50, 90, 99.9])
def test_any_slo_percentile_is_judged_at_that_percentile(percentile: float) -> None:
    slo = P99.model_copy(update={"tpot_percentile": percentile})
    inside = stats("candidate", tpot_slo_s=0.039, tpot_slo_percentile=percentile)
    above = stats("candidate", tpot_slo_s=0.041, tpot_slo_percentile=percentile)
    stable = stats("stable", 3000, tpot_slo_s=0.012, tpot_slo_percentile=percentile)
    ok = analyse(candidate=inside, stable=stable, slo=slo, rules=OFF, weight=10)
    breach = analyse(candidate=above, stable=stable, slo=slo, rules=OFF, weight=10)
    assert (ok.verdict, ok.code) == ("Successful", "within-slo"), ok.reason
    assert (breach.verdict, breach.code) == ("Failed", "slo-breach"), breach.reason


@pytest.mark.parametrize(
    ("field", "value"), [("tpot_percentile", 100), ("ttft_percentile", 0), ("tpot_percentile", -5)]
)
def test_a_policy_percentile_the_analysis_cannot_read_is_refused_naming_the_field(field: str, value: float) -> None:
    """Any percentile in (0, 100) is judged at that percentile; outside it there is no such percentile."""
    with pytest.raises(InvalidInput) as err:
        parse_policy(f"version: 1\nslo:\n  {field}: {value}\n", source="p.yaml")
    assert "p.yaml" in str(err.value) and field in str(err.value)
