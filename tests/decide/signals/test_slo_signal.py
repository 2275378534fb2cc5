"""SLO burn-rate signal: multi-window rules with minimum sample counts, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from controller.decide.signals.slo_signal import BurnRule, SloSignalState, WindowCounts, assess

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RULES = (BurnRule(long_s=3600, short_s=300, burn=10, min_requests=50),)


def counts(long_good: float, long_total: float, short_good: float, short_total: float) -> list[WindowCounts]:
    return [
        WindowCounts(window_s=3600, good=long_good, total=long_total),
        WindowCounts(window_s=300, good=short_good, total=short_total),
    ]


# objective 0.99: burn 10 means 10% bad
CASES = [
    ("healthy", counts(9990, 10000, 995, 1000), False, "SLO ok"),
    ("both windows burn", counts(8500, 10000, 800, 1000), True, "SLO burning"),
    ("long burns, short recovered", counts(8500, 10000, 999, 1000), False, "SLO ok"),
    ("short spike only", counts(9950, 10000, 700, 1000), False, "SLO ok"),
    ("quiet minute: 1 of 2 bad", counts(1, 2, 1, 2), False, "too few requests"),
    ("quiet short window", counts(8000, 10000, 1, 3), False, "too few requests"),
    ("no traffic", counts(0, 0, 0, 0), False, "too few requests"),
    ("missing window", [WindowCounts(window_s=3600, good=0, total=1000)], False, "window counts missing"),
]


@pytest.mark.parametrize(("name", "windows", "breaching", "reason"), CASES, ids=[c[0] for c in CASES])
def test_burn_rules(name: str, windows: list[WindowCounts], breaching: bool, reason: str) -> None:
    signal, state = assess(windows, SloSignalState(), now=T0, objective=0.99, rules=RULES)
    assert signal.breaching is breaching, signal.reason
    assert reason in signal.reason
    assert state.breaching is breaching


def test_state_keeps_since_while_breaching_and_clears_after() -> None:
    bad = counts(8000, 10000, 800, 1000)
    s1, st = assess(bad, SloSignalState(), now=T0, rules=RULES)
    assert s1.changed and st.since == T0
    s2, st = assess(bad, st, now=T0 + timedelta(minutes=1), rules=RULES)
    assert not s2.changed and st.since == T0
    s3, st = assess(counts(9999, 10000, 1000, 1000), st, now=T0 + timedelta(minutes=2), rules=RULES)
    assert s3.changed and not s3.breaching and st.since is None
    assert SloSignalState.model_validate_json(st.model_dump_json()) == st


def test_burn_values_reported_per_window() -> None:
    signal, _ = assess(counts(9000, 10000, 900, 1000), SloSignalState(), now=T0, rules=RULES)
    assert signal.burns == {"300s": pytest.approx(10.0), "3600s": pytest.approx(10.0)}


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ValidationError):
        WindowCounts(window_s=60, good=5, total=4)
    with pytest.raises(ValidationError):
        BurnRule(long_s=60, short_s=300, burn=2)
    with pytest.raises(ValueError, match="objective"):
        assess([], SloSignalState(), now=T0, objective=1.0)
