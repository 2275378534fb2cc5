"""The cycle-duration statistics hold a fixed number of values however many cycles run."""

from __future__ import annotations

import math

import pytest

from controller.reactor.stats import BOUNDS, DurationHistogram


def test_a_million_cycles_take_the_room_of_one() -> None:
    h = DurationHistogram()
    size = len(h.counts)
    for i in range(1_000_000):
        h.observe(0.001 * (1 + i % 100))  # 1..100 ms, uniform
    assert len(h) == 1_000_000 and len(h.counts) == size == len(BOUNDS) + 1
    assert h.max == pytest.approx(0.1)
    assert h.mean() == pytest.approx(0.0505)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([0.010] * 99 + [2.0], 0.5, 0.010),
        ([0.010] * 99 + [2.0], 0.99, 0.010),
        ([0.010] * 99 + [2.0], 1.0, 2.0),
        ([0.010] * 50 + [0.100] * 50, 0.9, 0.100),
        ([5000.0], 0.5, 5000.0),  # beyond the last bound: the largest seen
    ],
)
def test_quantiles_within_a_bucket(values: list[float], q: float, expected: float) -> None:
    h = DurationHistogram()
    for v in values:
        h.observe(v)
    got = h.quantile(q)
    assert expected <= got <= expected * 10**0.1 + 1e-12  # at most one bucket (26 %) above


def test_empty() -> None:
    assert math.isnan(DurationHistogram().quantile(0.5))
