"""The SLO-headroom waiver of the rollout analysis: far inside the SLO a candidate's ratio to stable alone does not
roll it back; breaches, errors, goodput and data that cannot be judged still do. Table-driven, pure."""

from __future__ import annotations

import math
from typing import Any

import pytest

from controller.decide import RolloutRules, Rules
from controller.decide.rollout.analysis import analyse
from controller.domain import SLO
from controller.domain.observation import DataProblem, VariantStats
from controller.errors import InvalidInput
from controller.policy import Policy, parse_policy

SLO_ = SLO(ttft_seconds=2.0, tpot_seconds=0.04, max_error_rate=0.01)
OFF = RolloutRules(steps=(10, 50, 100), bake_s=180, min_samples=100)
HALF = RolloutRules(steps=(10, 50, 100), bake_s=180, min_samples=100, slo_headroom=0.5)


def stats(variant: str, requests: int = 500, **update: Any) -> VariantStats:
    base: dict[str, Any] = {
        "variant": variant,
        "requests": requests,
        "errors": 0,
        "ttft_p95_s": 0.33,
        "tpot_p95_s": 0.012,
        "output_tokens_per_s": 400.0,
        "good_requests": requests,
    }
    return VariantStats(**{**base, **update})


STABLE = stats("stable", 3000)

# candidate, stable, rules -> verdict, code
CASES: list[Any] = [
    # the dense fleet's morning switch: 1.11x stable's TTFT at 18 % of a 2 s SLO
    pytest.param(stats("candidate", ttft_p95_s=0.365), STABLE, OFF, "Failed", "regression", id="ttft-ratio-off"),
    pytest.param(
        stats("candidate", ttft_p95_s=0.365), STABLE, HALF, "Successful", "within-slo", id="ttft-ratio-waived"
    ),
    # a TPOT regression of 1.59x at 48 % of the SLO
    pytest.param(stats("candidate", tpot_p95_s=0.019), STABLE, OFF, "Failed", "regression", id="tpot-ratio-off"),
    pytest.param(
        stats("candidate", tpot_p95_s=0.019), STABLE, HALF, "Successful", "within-slo", id="tpot-ratio-waived"
    ),
    # above the headroom the ratio is judged as before
    pytest.param(stats("candidate", ttft_p95_s=1.2), STABLE, HALF, "Failed", "regression", id="ttft-above-headroom"),
    pytest.param(stats("candidate", tpot_p95_s=0.021), STABLE, HALF, "Failed", "regression", id="tpot-above-headroom"),
    # exactly at the headroom: waived (at most the fraction)
    pytest.param(stats("candidate", ttft_p95_s=1.0), STABLE, HALF, "Successful", "within-slo", id="at-headroom"),
    # a hard breach of the SLO stays a rollback, whatever the headroom
    pytest.param(stats("candidate", ttft_p95_s=2.5), STABLE, HALF, "Failed", "slo-breach", id="slo-breach"),
    pytest.param(
        stats("candidate", tpot_p95_s=math.inf, problems=(DataProblem(signal="tpot_p95", kind="beyond-top-bucket"),)),
        STABLE,
        HALF,
        "Failed",
        "beyond-top-bucket",
        id="beyond-top-bucket",
    ),
    # errors and goodput are not latency ratios: not waived
    pytest.param(stats("candidate", errors=20, good_requests=480), STABLE, HALF, "Failed", "error-rate", id="errors"),
    pytest.param(stats("candidate", good_requests=470), STABLE, HALF, "Failed", "goodput-ratio", id="goodput"),
]


@pytest.mark.parametrize(("candidate", "stable", "rules", "verdict", "code"), CASES)
def test_headroom_waives_the_ratio_only(
    candidate: VariantStats, stable: VariantStats, rules: RolloutRules, verdict: str, code: str
) -> None:
    result = analyse(candidate=candidate, stable=stable, slo=SLO_, rules=rules, weight=10, fleet_replicas=8)
    assert (result.verdict, result.code) == (verdict, code), result.reason


MISSING: list[Any] = [
    pytest.param(stats("candidate", ttft_p95_s=None), STABLE, "missing-data", id="candidate-ttft-missing"),
    pytest.param(
        stats("candidate", tpot_p95_s=None, problems=(DataProblem(signal="tpot_p95", kind="nan"),)),
        STABLE,
        "non-finite",
        id="candidate-tpot-nan",
    ),
    pytest.param(stats("candidate", ttft_p95_s=math.inf), STABLE, "non-finite", id="candidate-ttft-inf"),
    pytest.param(stats("candidate"), stats("stable", 3000, ttft_p95_s=None), "missing-data", id="stable-ttft-missing"),
    pytest.param(
        stats("candidate"),
        stats("stable", 3000, tpot_p95_s=None, problems=(DataProblem(signal="tpot_p95", kind="nan"),)),
        "non-finite",
        id="stable-tpot-nan",
    ),
]


@pytest.mark.security
@pytest.mark.parametrize(("candidate", "stable", "code"), MISSING)
@pytest.mark.parametrize("headroom", [0.5, 0.99])
def test_headroom_never_passes_on_data_that_cannot_be_judged(
    candidate: VariantStats, stable: VariantStats, code: str, headroom: float
) -> None:
    rules = RolloutRules(steps=(10, 50, 100), bake_s=180, min_samples=100, slo_headroom=headroom)
    result = analyse(candidate=candidate, stable=stable, slo=SLO_, rules=rules, weight=10, step_age_s=3600)
    assert (result.verdict, result.code) == ("Inconclusive", code), result.reason
    assert result.lacks_data


@pytest.mark.parametrize("headroom", [-0.1, 1.0, 1.5])
def test_rules_reject_a_headroom_outside_zero_to_one(headroom: float) -> None:
    with pytest.raises(ValueError, match="slo_headroom"):
        RolloutRules(slo_headroom=headroom)


def test_policy_field_reaches_the_analysis() -> None:
    """``rollout.thresholds.slo_headroom`` in the policy: the default (0) rolls the far-inside regression back, 0.5
    passes it."""
    candidate = stats("candidate", 1000, ttft_p95_s=0.365)
    default = Rules.from_policy(Policy()).rollout
    assert default.slo_headroom == 0.0
    waived = Rules.from_policy(
        Policy.model_validate({"rollout": {"thresholds": {"slo_headroom": 0.5}}, "slo": SLO_.model_dump()})
    ).rollout
    before = analyse(candidate=candidate, stable=STABLE, slo=SLO_, rules=default, weight=10)
    after = analyse(candidate=candidate, stable=STABLE, slo=SLO_, rules=waived, weight=10)
    assert (before.verdict, before.code) == ("Failed", "regression")
    assert (after.verdict, after.code) == ("Successful", "within-slo")


@pytest.mark.parametrize("value", [-0.5, 1.0, "half"])
def test_policy_rejects_an_invalid_headroom_naming_the_field(value: object) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_policy(f"version: 1\nrollout:\n  thresholds:\n    slo_headroom: {value}\n", source="p.yaml")
    assert "p.yaml" in str(err.value) and "slo_headroom" in str(err.value)


# SLO percentile per signal -> verdict, code (a 1.11x TTFT and a 1.59x TPOT regression, both far inside the bounds
# at every percentile: the waiver reads the latency at the SLO's own percentile)
PERCENTILES: list[Any] = [
    pytest.param(95, 95, "Successful", "within-slo", id="p95-slo-waived"),
    pytest.param(90, 90, "Successful", "within-slo", id="p90-slo-waived"),
    pytest.param(99, 99, "Successful", "within-slo", id="p99-slo-waived"),
    pytest.param(95, 99, "Successful", "within-slo", id="p99-tpot-waived"),
    pytest.param(99.9, 50, "Successful", "within-slo", id="p99.9-ttft-p50-tpot-waived"),
]


@pytest.mark.parametrize(("ttft_percentile", "tpot_percentile", "verdict", "code"), PERCENTILES)
def test_headroom_waives_at_the_slos_own_percentile(
    ttft_percentile: float, tpot_percentile: float, verdict: str, code: str
) -> None:
    slo = SLO_.model_copy(update={"ttft_percentile": ttft_percentile, "tpot_percentile": tpot_percentile})
    at_slo = {
        "ttft_slo_s": 0.5,
        "ttft_slo_percentile": ttft_percentile,
        "tpot_slo_s": 0.02,
        "tpot_slo_percentile": tpot_percentile,
    }
    candidate = stats("candidate", ttft_p95_s=0.365, tpot_p95_s=0.019, **at_slo)
    result = analyse(candidate=candidate, stable=STABLE, slo=slo, rules=HALF, weight=10, fleet_replicas=8)
    assert (result.verdict, result.code) == (verdict, code), result.reason


def test_policy_accepts_a_headroom_with_slos_on_p99() -> None:
    text = (
        "version: 1\nslo:\n  ttft_percentile: 99\n  tpot_percentile: 99\n"
        "rollout:\n  thresholds:\n    slo_headroom: 0.5\n"
    )
    assert parse_policy(text, source="p.yaml").rollout.thresholds.slo_headroom == 0.5
