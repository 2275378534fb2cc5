"""Histogram reading: cumulative buckets, histogram_quantile semantics, the log-normal cv fit on 1-2-5 buckets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller.observe.histograms import Buckets, lognormal_cv
from controller.observe.synthetic import TOKEN_BUCKETS, lognormal_shares


def from_samples(x: np.ndarray) -> Buckets:
    return Buckets.from_cumulative({b: float((x <= b).sum()) for b in TOKEN_BUCKETS})


def test_cumulative_to_counts_clips_negative_steps() -> None:
    b = Buckets.from_cumulative({10.0: 5.0, 20.0: 4.9, math.inf: 8.0})
    assert b.counts == (5.0, 0.0, 3.0) and b.total == 8.0


def test_missing_inf_bucket_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"\+Inf"):
        Buckets.from_cumulative({10.0: 5.0})


@pytest.mark.parametrize(("q", "expected"), [(0.5, 12.5), (0.25, 7.5), (0.1, 3.0), (1.0, 20.0)])
def test_quantile_interpolates_like_prometheus(q: float, expected: float) -> None:
    b = Buckets.from_cumulative({10.0: 5.0, 20.0: 15.0, math.inf: 15.0})
    assert b.quantile(q) == pytest.approx(expected)


def test_quantile_in_inf_bucket_answers_largest_finite_bound() -> None:
    assert Buckets.from_cumulative({10.0: 1.0, math.inf: 10.0}).quantile(0.9) == 10.0


def test_count_at_most_is_conservative() -> None:
    b = Buckets.from_cumulative({0.5: 3.0, 1.0: 7.0, 2.5: 9.0, math.inf: 10.0})
    assert b.count_at_most(1.0) == 7.0
    assert b.count_at_most(2.0) == 7.0  # 2.0 is inside (1, 2.5]: those two requests are not counted as good


@pytest.mark.parametrize(("mean", "cv"), [(300, 0.5), (300, 1.0), (800, 0.3), (100, 2.0), (1500, 0.7)])
def test_cv_recovered_from_coarse_buckets(mean: float, cv: float) -> None:
    rng = np.random.default_rng(7)
    s2 = math.log1p(cv * cv)
    x = np.round(rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), 20_000))
    assert lognormal_cv(from_samples(x), float(x.mean())) == pytest.approx(cv, rel=0.1)


@pytest.mark.parametrize("length", [64, 100, 128, 500, 1000])
def test_fixed_lengths_read_as_cv_zero_even_on_a_bucket_boundary(length: int) -> None:
    assert lognormal_cv(from_samples(np.full(1000, length)), float(length)) == 0.0


def test_spread_inside_one_bucket_reads_as_zero_documented_limit() -> None:
    x = np.array([210.0, 300.0, 400.0, 490.0] * 100)  # all inside (200, 500]
    assert lognormal_cv(from_samples(x), float(x.mean())) == 0.0


def test_synthetic_shares_round_trip() -> None:
    shares = lognormal_shares(512, 0.5, TOKEN_BUCKETS)
    b = Buckets.from_cumulative({bound: 1000 * s for bound, s in zip(TOKEN_BUCKETS, shares, strict=True)})
    assert lognormal_cv(b, 512, integer_valued=False) == pytest.approx(0.5, rel=0.02)
