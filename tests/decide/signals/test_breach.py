"""The stable variant's SLO breach: at the SLO's own percentile with enough requests, from the count of misses in a
quiet window, never from data that cannot be read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, TuningRules
from controller.decide.signals.breach import (
    BREACH_CHANCE,
    MIN_COUNTED_REQUESTS,
    allowed_miss_share,
    chance_of_at_least,
    slo_breach,
)
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import DataProblem, Observation, VariantStats
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow
from tests.support.builders import scheduled, shape

P95_SLO = SLO(ttft_seconds=2.0, tpot_seconds=0.05)
P99_SLO = SLO(ttft_seconds=2.0, ttft_percentile=99, tpot_seconds=0.04, tpot_percentile=99)
MIN_SAMPLES = 100
NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
NIGHT_SHAPE = shape(0.13, 8, 8000, 2048)


def observed(stable: VariantStats | None) -> Observation:
    variants = {} if stable is None else {"stable": stable}
    return Observation(target="ns/m", start=NOW - timedelta(minutes=5), end=NOW, shape=NIGHT_SHAPE, variants=variants)


def stable(requests: int, **kw: object) -> VariantStats:
    return VariantStats(variant="stable", requests=requests, **kw)  # type: ignore[arg-type]


def p99(**kw: object) -> dict[str, object]:
    """The SLO-percentile fields read at p99."""
    out: dict[str, object] = {"ttft_slo_percentile": 99.0, "tpot_slo_percentile": 99.0}
    out.update(kw)
    return out


@pytest.mark.parametrize(
    ("slo", "stats", "breaches"),
    [
        # enough requests: the SLO's own percentile decides
        pytest.param(P95_SLO, stable(500, ttft_p95_s=1.0, tpot_p95_s=0.03), False, id="p95-inside"),
        pytest.param(P95_SLO, stable(500, ttft_p95_s=2.5, tpot_p95_s=0.03), True, id="p95-ttft-over"),
        pytest.param(P95_SLO, stable(500, ttft_p95_s=1.0, tpot_p95_s=0.06), True, id="p95-tpot-over"),
        pytest.param(P99_SLO, stable(500, tpot_p95_s=0.02, **p99(tpot_slo_s=0.045)), True, id="p99-over-p95-inside"),
        pytest.param(P99_SLO, stable(500, tpot_p95_s=0.02, **p99(tpot_slo_s=0.035)), False, id="p99-inside"),
        # a p99 SLO with no p99 read: a p95 already over the bound says the tail is too
        pytest.param(P99_SLO, stable(500, tpot_p95_s=0.05), True, id="p99-unread-p95-over"),
        pytest.param(P99_SLO, stable(500, tpot_p95_s=0.03), False, id="p99-unread-p95-inside"),
        # a p99 read at another percentile is no answer
        pytest.param(
            P99_SLO,
            stable(500, tpot_p95_s=0.02, tpot_slo_s=0.09, tpot_slo_percentile=90.0),
            False,
            id="other-percentile",
        ),
        pytest.param(
            P95_SLO,
            stable(500, ttft_p95_s=None, problems=(DataProblem(signal="ttft_p95", kind="beyond-top-bucket"),)),
            True,
            id="beyond-top-bucket",
        ),
        pytest.param(
            P95_SLO,
            stable(500, ttft_p95_s=None, problems=(DataProblem(signal="ttft_p95", kind="nan"),)),
            False,
            id="nan-is-no-breach",
        ),
        pytest.param(P95_SLO, stable(500, errors=10), True, id="errors-over"),
        pytest.param(P95_SLO, stable(500, errors=5), False, id="errors-at-limit"),
        # a quiet window: the count of misses decides
        pytest.param(P99_SLO, stable(40, good_requests=20), True, id="quiet-half-missed"),
        pytest.param(P99_SLO, stable(40, good_requests=39), False, id="quiet-one-missed"),
        pytest.param(P99_SLO, stable(40, good_requests=37), False, id="quiet-three-missed-chance"),
        pytest.param(P95_SLO, stable(40, good_requests=25), True, id="quiet-p95-15-missed"),
        pytest.param(P95_SLO, stable(40, good_requests=30), False, id="quiet-p95-10-missed-chance"),
        pytest.param(P99_SLO, stable(40, good_requests=None), False, id="quiet-unknown-good"),
        pytest.param(
            P99_SLO,
            stable(40, good_requests=0, problems=(DataProblem(signal="good_requests", kind="nan"),)),
            False,
            id="quiet-good-nan",
        ),
        pytest.param(P99_SLO, stable(40, good_requests=40, errors=12), True, id="quiet-errors"),
        pytest.param(P99_SLO, stable(MIN_COUNTED_REQUESTS - 1, good_requests=0), False, id="too-few-to-count"),
        # latency percentiles over a quiet window are not read: a handful of requests has no p99
        pytest.param(P99_SLO, stable(40, good_requests=40, **p99(tpot_slo_s=0.08)), False, id="quiet-p99-not-read"),
        pytest.param(P95_SLO, None, False, id="no-stable"),
        pytest.param(
            P95_SLO,
            stable(0, problems=(DataProblem(signal="requests", kind="missing"),)),
            False,
            id="requests-missing",
        ),
    ],
)
def test_breach_table(slo: SLO, stats: VariantStats | None, breaches: bool) -> None:
    assert bool(slo_breach(observed(stats), slo, MIN_SAMPLES)) is breaches


@pytest.mark.parametrize(
    ("misses", "requests", "share", "expect"),
    [
        (0, 40, 0.02, 1.0),
        (1, 40, 0.02, 1 - 0.98**40),
        (40, 40, 0.5, 0.5**40),
        (3, 3, 1.0, 1.0),
        (1, 3, 0.0, 0.0),
    ],
)
def test_chance_of_at_least_is_the_binomial_tail(misses: int, requests: int, share: float, expect: float) -> None:
    assert chance_of_at_least(misses, requests, share) == pytest.approx(expect, rel=1e-9)


def test_chance_of_at_least_holds_for_a_large_window() -> None:
    # exact terms over thousands of requests would overflow a float; the tail must still come out as a probability
    assert chance_of_at_least(5, 5000, 0.001) == pytest.approx(0.5595, abs=1e-3)
    assert chance_of_at_least(200, 5000, 0.01) < BREACH_CHANCE


def test_allowed_miss_share_adds_what_each_percentile_lets_through() -> None:
    assert allowed_miss_share(P99_SLO) == pytest.approx(0.02)
    assert allowed_miss_share(P95_SLO) == pytest.approx(0.10)


NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
DAY_CONFIG = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, max_num_seqs=32)


def test_a_quiet_night_that_misses_half_its_requests_is_searched_again() -> None:
    """The day's config serving a night of long documents: 40 requests in the observe window, half outside the p99
    SLO. Too few for a percentile, plainly a breach: the night is searched again with the active config."""
    rules = Rules(slo=P99_SLO, tuning=TuningRules(max_trials=4), windows=(NIGHT, DAY))
    night_entry = scheduled(
        "night", STOCK, NIGHT_SHAPE, goodput=500, stock_goodput=500, tuned_at=NOW - timedelta(days=1)
    )
    status = TargetStatus(window="night", active_config=DAY_CONFIG, replicas=3, schedule=(night_entry,))
    obs = observed(stable(40, good_requests=20, tpot_p95_s=0.03))
    d = decide.plan(status=status, observation=obs, observe_error=None, proposals=(), rules=rules, now=NOW)
    assert d.codes[0] == "tune-slo-breach", d.codes
    calm = observed(stable(40, good_requests=40, tpot_p95_s=0.03))
    d = decide.plan(status=status, observation=calm, observe_error=None, proposals=(), rules=rules, now=NOW)
    assert "tune-slo-breach" not in d.codes
