"""A fleet with a bounded history keeps only its recent ticks, and reads inside that history are unchanged."""

from __future__ import annotations

from datetime import timedelta

from controller.clock import FakeClock
from controller.simulator.fleet import SimulatedFleet
from controller.simulator.traffic import DiurnalTraffic

MODEL, GPU = "nemotron-3-super-nvfp4", "gb300-dgx-station"


def _fleet(history_s: float | None) -> SimulatedFleet:
    return SimulatedFleet(MODEL, GPU, DiurnalTraffic(7, "agents-flat"), FakeClock(), 7, history_s=history_s)


def test_a_bounded_history_stops_growing_and_keeps_the_recent_ticks_the_same() -> None:
    bounded, full = _fleet(3600.0), _fleet(None)
    for fleet in (bounded, full):
        for _ in range(8):
            fleet.advance(1800.0)  # four hours in cycles of half an hour
    assert len(full.ticks) == 240
    assert len(bounded.ticks) == 60  # the last hour, one tick a minute
    now = bounded.clock.now()
    assert bounded.ticks[0].start == now - timedelta(hours=1)
    window = (now - timedelta(minutes=30), now)
    assert bounded.ticks_between(*window) == full.ticks_between(*window)
