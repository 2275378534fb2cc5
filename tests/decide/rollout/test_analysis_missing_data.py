"""Rollout analysis on missing and non-finite data, and the policy's rollout thresholds.

A candidate whose data cannot be judged (NaN, infinite, absent, no requests, no series) is never Successful: the
step holds (Inconclusive), or rolls back where the policy says so. A p95 beyond the histogram's top bucket is a
breach. Each threshold of ``rollout`` in the policy reaches the analysis: a value that passes with the default fails
with a tighter setting.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from controller.decide import RolloutRules, Rules
from controller.decide.rollout.analysis import Analysis, analyse
from controller.domain import STOCK, Observation, Phase
from controller.domain.actions import Rollback
from controller.domain.observation import DataProblem, VariantStats
from controller.domain.rollout import RolloutState
from controller.policy import Policy
from tests.support.rollout_steps import CANDIDATE, RULES, SLO_, T0, advance, obs


def stats(variant: str, requests: int = 500, **update: Any) -> VariantStats:
    base: dict[str, Any] = {
        "variant": variant,
        "requests": requests,
        "errors": 0,
        "ttft_p95_s": 0.3,
        "tpot_p95_s": 0.02,
        "output_tokens_per_s": 400.0,
        "good_requests": requests,
    }
    return VariantStats(**{**base, **update})


STABLE = stats("stable", 2000)


def problem(signal: str, kind: str, **update: Any) -> VariantStats:
    field = {"ttft_p95": "ttft_p95_s", "tpot_p95": "tpot_p95_s", "good_requests": "good_requests"}.get(signal)
    fallback: dict[str, Any] = {field: None} if field else {}
    return stats("candidate", problems=(DataProblem(signal=signal, kind=kind),), **fallback, **update)  # type: ignore[arg-type]


# input x signal -> the candidate (None: no candidate series) and the code the analysis must give
CASES: list[tuple[str, str, VariantStats | None, str]] = [
    # TTFT
    ("nan", "ttft", problem("ttft_p95", "nan"), "non-finite"),
    ("inf", "ttft", problem("ttft_p95", "inf"), "non-finite"),
    ("inf-in-field", "ttft", stats("candidate", ttft_p95_s=math.inf), "non-finite"),
    ("missing-percentile", "ttft", stats("candidate", ttft_p95_s=None), "missing-data"),
    ("missing-series", "ttft", problem("ttft_p95", "missing"), "missing-data"),
    # TPOT
    ("nan", "tpot", problem("tpot_p95", "nan"), "non-finite"),
    ("inf", "tpot", problem("tpot_p95", "inf"), "non-finite"),
    ("inf-in-field", "tpot", stats("candidate", tpot_p95_s=math.inf), "non-finite"),
    ("missing-percentile", "tpot", stats("candidate", tpot_p95_s=None), "missing-data"),
    ("missing-series", "tpot", problem("tpot_p95", "missing"), "missing-data"),
    # error rate (the error count is what the source reads)
    ("nan", "errors", problem("errors", "nan"), "non-finite"),
    ("inf", "errors", problem("errors", "inf"), "non-finite"),
    ("missing-series", "errors", problem("errors", "missing"), "missing-data"),
    # goodput (good-request count and token rate)
    ("nan", "goodput", problem("good_requests", "nan"), "non-finite"),
    ("inf", "goodput", problem("output_tokens_per_s", "inf"), "non-finite"),
    ("inf-in-field", "goodput", stats("candidate", output_tokens_per_s=math.inf), "non-finite"),
    ("missing", "goodput", stats("candidate", good_requests=None), "missing-data"),
    ("missing-series", "goodput", problem("output_tokens_per_s", "missing"), "missing-data"),
]
# zero candidate samples and a missing candidate series take every signal with them
for signal in ("ttft", "tpot", "errors", "goodput"):
    CASES.append(("zero-samples", signal, stats("candidate", 0, good_requests=0), "no-candidate-samples"))
    CASES.append(("no-candidate-series", signal, None, "no-candidate-series"))


@pytest.mark.security
@pytest.mark.parametrize(("data", "signal", "candidate", "code"), CASES, ids=[f"{s}-{d}" for d, s, _, _ in CASES])
@pytest.mark.parametrize("step_age_s", [0.0, 3600.0], ids=["fresh-step", "baked-step"])
def test_missing_or_non_finite_candidate_data_is_never_successful(
    data: str, signal: str, candidate: VariantStats | None, code: str, step_age_s: float
) -> None:
    result = analyse(candidate=candidate, stable=STABLE, slo=SLO_, rules=RULES, step_age_s=step_age_s)
    assert result.verdict == "Inconclusive", result.reason
    assert result.code == code and result.lacks_data


@pytest.mark.security
@pytest.mark.parametrize(("data", "signal", "candidate", "code"), CASES, ids=[f"{s}-{d}" for d, s, _, _ in CASES])
def test_rollback_on_missing_data_fails_a_baked_step_and_holds_a_fresh_one(
    data: str, signal: str, candidate: VariantStats | None, code: str
) -> None:
    rules = RolloutRules(steps=RULES.steps, bake_s=300, min_samples=100, on_missing_data="rollback")
    fresh = analyse(candidate=candidate, stable=STABLE, slo=SLO_, rules=rules, step_age_s=60)
    baked = analyse(candidate=candidate, stable=STABLE, slo=SLO_, rules=rules, step_age_s=300)
    assert (fresh.verdict, fresh.code) == ("Inconclusive", code)
    assert (baked.verdict, baked.code) == ("Failed", code)


@pytest.mark.security
@pytest.mark.parametrize(
    ("stable", "code"),
    [
        pytest.param(None, "missing-data", id="no-stable-series"),
        pytest.param(stats("stable", 0, good_requests=0), "missing-data", id="no-stable-requests"),
        pytest.param(stats("stable", 2000, ttft_p95_s=None), "missing-data", id="stable-ttft-missing"),
        pytest.param(
            stats("stable", 2000, tpot_p95_s=None, problems=(DataProblem(signal="tpot_p95", kind="nan"),)),
            "non-finite",
            id="stable-tpot-nan",
        ),
        pytest.param(stats("stable", 2000, good_requests=None), "missing-data", id="stable-goodput-missing"),
    ],
)
def test_missing_stable_data_does_not_let_a_candidate_pass_the_checks_it_could_not_make(
    stable: VariantStats | None, code: str
) -> None:
    result = analyse(candidate=stats("candidate"), stable=stable, slo=SLO_, rules=RULES, weight=25)
    assert (result.verdict, result.code) == ("Inconclusive", code), result.reason


def test_at_100_percent_stable_carries_nothing_and_only_the_absolute_bounds_apply() -> None:
    result = analyse(
        candidate=stats("candidate"), stable=stats("stable", 0, good_requests=None), slo=SLO_, rules=RULES, weight=100
    )
    assert (result.verdict, result.code) == ("Successful", "within-slo"), result.reason


BEYOND = DataProblem(signal="ttft_p95", kind="beyond-top-bucket")


@pytest.mark.security
@pytest.mark.parametrize(
    ("candidate", "verdict", "code"),
    [
        pytest.param(stats("candidate", 500, ttft_p95_s=None, problems=(BEYOND,)), "Failed", "beyond-top-bucket"),
        # fewer than min_failure_samples: a possible breach waits for more data, never passes
        pytest.param(stats("candidate", 5, ttft_p95_s=None, problems=(BEYOND,)), "Pending", "beyond-top-bucket"),
        # beyond the top bucket outranks the other signals' missing data
        pytest.param(
            stats(
                "candidate",
                500,
                ttft_p95_s=None,
                tpot_p95_s=None,
                problems=(BEYOND, DataProblem(signal="tpot_p95", kind="nan")),
            ),
            "Failed",
            "beyond-top-bucket",
        ),
    ],
)
def test_a_p95_beyond_the_top_bucket_is_a_breach(candidate: VariantStats, verdict: str, code: str) -> None:
    result = analyse(candidate=candidate, stable=STABLE, slo=SLO_, rules=RULES)
    assert (result.verdict, result.code) == (verdict, code), result.reason


def test_stable_beyond_the_top_bucket_too_is_load_and_a_human_decides() -> None:
    stable = stats("stable", 2000, ttft_p95_s=None, problems=(BEYOND,))
    candidate = stats("candidate", 500, ttft_p95_s=None, problems=(BEYOND,))
    result = analyse(candidate=candidate, stable=stable, slo=SLO_, rules=RULES)
    assert (result.verdict, result.code) == ("Inconclusive", "stable-breach")
    assert not result.lacks_data


def rolling(weight: int = 25, step_index: int = 1) -> RolloutState:
    return RolloutState(
        id="r1",
        from_config=STOCK,
        to_config=CANDIDATE,
        steps=(5, 25, 50, 100),
        step_index=step_index,
        weight=weight,
        started_at=T0,
        step_started_at=T0,
    )


def observation(candidate: VariantStats | None) -> Observation:
    return obs(candidate, STABLE)


NAN_TTFT = problem("ttft_p95", "nan")


@pytest.mark.security
@pytest.mark.parametrize("candidate", [NAN_TTFT, None, stats("candidate", 0)], ids=["nan", "no-series", "zero"])
def test_a_step_without_judgeable_data_holds_at_its_weight(candidate: VariantStats | None) -> None:
    """Baked long enough to advance, the step stays where it is: same weight, no action, RollingOut, the code said."""
    state = rolling()
    step = advance(state, Phase.ROLLING_OUT, observation(candidate), now=T0 + timedelta(hours=2))
    assert step.phase is Phase.ROLLING_OUT
    assert step.rollout == state and step.actions == ()
    assert "holding step 2 at 25%" in step.notes[0]


def test_rollback_on_missing_data_rolls_the_baked_step_back() -> None:
    rules = RolloutRules(steps=(5, 25, 50, 100), bake_s=300, min_samples=100, on_missing_data="rollback")
    step = advance(rolling(), Phase.ROLLING_OUT, observation(NAN_TTFT), now=T0 + timedelta(seconds=300), rules=rules)
    assert step.phase is Phase.ROLLED_BACK
    assert any(isinstance(a, Rollback) for a in step.actions)


# ----- the policy's thresholds reach the analysis ---------------------------------------------------------------


def policy(**rollout_section: Any) -> Policy:
    return Policy.model_validate({"rollout": rollout_section})


@pytest.mark.parametrize(
    ("tighter", "candidate", "stable", "code"),
    [
        pytest.param(
            {"thresholds": {"max_error_rate": 0.005}},
            stats("candidate", 1000, errors=8, good_requests=992),
            stats("stable", 2000, errors=8, good_requests=1992),
            "error-rate",
            id="max_error_rate",
        ),
        pytest.param(
            {"thresholds": {"min_goodput_ratio": 0.995}},
            stats("candidate", 1000, good_requests=985),
            STABLE,
            "goodput-ratio",
            id="min_goodput_ratio",
        ),
        pytest.param(
            {"thresholds": {"max_ttft_regression": 0.05}},
            stats("candidate", 1000, ttft_p95_s=0.32),
            STABLE,
            "regression",
            id="max_ttft_regression",
        ),
        pytest.param(
            {"thresholds": {"max_tpot_regression": 0.05}},
            stats("candidate", 1000, tpot_p95_s=0.0214),
            STABLE,
            "regression",
            id="max_tpot_regression",
        ),
    ],
)
def test_each_threshold_fails_what_the_default_passes(
    tighter: dict[str, Any], candidate: VariantStats, stable: VariantStats, code: str
) -> None:
    slo = Policy().slo

    def verdict(p: Policy) -> Analysis:
        rules = Rules.from_policy(p).rollout
        return analyse(candidate=candidate, stable=stable, slo=slo, rules=rules, weight=25)

    default = verdict(Policy())
    assert (default.verdict, default.code) == ("Successful", "within-slo"), default.reason
    tight = verdict(policy(**tighter))
    assert (tight.verdict, tight.code) == ("Failed", code), tight.reason


def test_min_samples_and_on_missing_data_reach_the_rules() -> None:
    candidate = stats("candidate", 150)
    slo = Policy().slo
    default = analyse(candidate=candidate, stable=STABLE, slo=slo, rules=Rules.from_policy(Policy()).rollout)
    assert (default.verdict, default.code) == ("Pending", "too-few-samples")
    fewer = Rules.from_policy(policy(min_samples=100)).rollout
    assert analyse(candidate=candidate, stable=STABLE, slo=slo, rules=fewer).verdict == "Successful"
    back = Rules.from_policy(policy(on_missing_data="rollback")).rollout
    baked = analyse(candidate=None, stable=STABLE, slo=slo, rules=back, step_age_s=back.bake_s)
    assert (baked.verdict, baked.code) == ("Failed", "no-candidate-series")


def test_the_policy_and_the_rules_share_their_defaults() -> None:
    assert Rules.from_policy(Policy()).rollout == RolloutRules()
    defaults = RolloutRules()
    assert (defaults.bake_s, defaults.min_samples, defaults.max_ttft_regression, defaults.max_tpot_regression) == (
        300.0,
        200,
        0.10,
        0.10,
    )
