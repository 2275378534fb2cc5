"""Drift detector: distance, hysteresis and dwell, table-driven over sequences of (seconds, shape)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from controller.decide.signals.drift import DriftParams, DriftState, assess, distance
from controller.domain.traffic import TrafficShape
from tests.support.builders import shape as traffic

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def shape(concurrency: float = 15.0, prompt: float = 512, output: float = 128, rep: float = 0.0) -> TrafficShape:
    return traffic(1.0, concurrency, prompt, output, repetitiveness=rep)


TUNED = shape()


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (shape(), 0.0),
        (shape(concurrency=31), 1.0),  # log2(32) - log2(16)
        (shape(prompt=1024), 1.0),
        (shape(output=64), 1.0),
        (shape(rep=0.25), 1.0),
        (shape(concurrency=31, prompt=1024), 2**0.5),
    ],
)
def test_distance_units(live: TrafficShape, expected: float) -> None:
    assert distance(live, TUNED) == pytest.approx(expected)


P = DriftParams(enter=1.0, exit=0.5, dwell_s=300)

# (seconds since T0, live shape, expected drifted verdict, expected changed flag)
SEQUENCES: dict[str, list[tuple[float, TrafficShape, bool, bool]]] = {
    "steady stays in tune": [(0, shape(), False, False), (600, shape(concurrency=17), False, False)],
    "band between exit and enter never enters": [
        (0, shape(prompt=850), False, False),  # log2(850/512)=0.73
        (3600, shape(prompt=850), False, False),
    ],
    "short spike is ignored (dwell)": [
        (0, shape(concurrency=63), False, False),
        (120, shape(concurrency=63), False, False),
        (240, shape(), False, False),  # back below enter: pending resets
        (500, shape(concurrency=63), False, False),  # a new pending period starts here
        (700, shape(concurrency=63), False, False),
    ],
    "sustained drift enters after dwell": [
        (0, shape(concurrency=63), False, False),
        (299, shape(concurrency=63), False, False),
        (300, shape(concurrency=63), True, True),
        (400, shape(concurrency=63), True, False),
    ],
    "hysteresis band keeps drifted": [
        (0, shape(prompt=2048), False, False),
        (300, shape(prompt=2048), True, True),
        (400, shape(prompt=700), True, False),  # log2(700/512)=0.45 <= exit: a pending exit starts
        (800, shape(prompt=1200), True, False),  # log2(1200/512)=1.23: above exit, pending clears
        (1200, shape(prompt=600), True, False),  # 0.23 <= exit: pending starts
        (1500, shape(prompt=600), False, True),  # held 300 s: back in tune
    ],
}


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_drift_sequences(name: str) -> None:
    state = DriftState()
    for seconds, live, drifted, changed in SEQUENCES[name]:
        verdict, state = assess(live, TUNED, state, now=T0 + timedelta(seconds=seconds), params=P)
        assert (verdict.drifted, verdict.changed) == (drifted, changed), (name, seconds, verdict.reason)
        assert state.drifted == drifted
        # the state survives a round trip through the CR status (JSON)
        state = DriftState.model_validate_json(state.model_dump_json())


def test_no_tuned_shape_is_never_drift() -> None:
    verdict, state = assess(shape(concurrency=500), None, DriftState(), now=T0)
    assert not verdict.drifted and state == DriftState()


def test_reason_names_the_largest_component() -> None:
    verdict, _ = assess(shape(output=512), TUNED, DriftState(), now=T0, params=P)
    assert "output" in verdict.reason and "distance 2.00" in verdict.reason


def test_exit_must_be_below_enter() -> None:
    with pytest.raises(ValidationError):
        DriftParams(enter=0.5, exit=0.5)
