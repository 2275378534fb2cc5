"""Writes only on change: traffic that moves a little while the verdict stands leaves the drift state and its
reason as they were, so a steady cycle's status equals the stored one and is not written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller.decide.signals.drift import DriftParams, DriftState, assess
from controller.domain.traffic import TrafficShape
from tests.support.builders import shape as traffic

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
P = DriftParams(enter=1.0, exit=0.5, dwell_s=300)


def shape(concurrency: float = 16.0, prompt: float = 512) -> TrafficShape:
    return traffic(1.0, concurrency, prompt, 128)


@pytest.mark.parametrize(
    ("drifted", "tuned", "noise"),
    [
        (False, shape(), [16.0, 16.4, 15.7, 16.2, 15.9, 16.1, 16.3, 15.8, 16.0, 16.2]),  # in tune, +-3 % streams
        (True, shape(concurrency=2), [16.0, 16.4, 15.7, 16.2, 15.9, 16.1, 16.3, 15.8, 16.0, 16.2]),  # drifted
    ],
    ids=["in-tune", "drifted"],
)
def test_small_moves_leave_the_state_and_reason_unchanged(
    drifted: bool, tuned: TrafficShape, noise: list[float]
) -> None:
    state = DriftState(drifted=drifted, changed_at=T0)
    states, reasons = set(), set()
    for minute, concurrency in enumerate(noise):
        verdict, state = assess(shape(concurrency), tuned, state, now=T0 + timedelta(minutes=minute), params=P)
        assert verdict.drifted is drifted and not verdict.changed
        states.add(state)
        reasons.add(verdict.reason)
    assert len(states) == 1 and len(reasons) == 1, (states, reasons)


def test_the_verdict_keeps_the_exact_distance() -> None:
    verdict, state = assess(shape(17.0), shape(), DriftState(), now=T0, params=P)
    assert verdict.distance == pytest.approx(0.0825, abs=1e-3) and state.last_distance == 0.1
