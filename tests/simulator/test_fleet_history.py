"""A fleet with a bounded history keeps only its recent ticks, and reads inside that history are unchanged."""

from __future__ import annotations

from datetime import timedelta

from controller.clock import FakeClock
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.traffic.diurnal import DiurnalTraffic

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


def test_the_log_reads_back_every_tick_as_it_was_recorded() -> None:
    """Columns in, the same ticks out: both variants, a weight, no speculative acceptance, scaled percentiles
    (an injected latency), notes, a variant absent from a tick."""
    from controller.domain.config import STOCK
    from controller.simulator.fleet.history import FleetTick, TickLog

    class Kept(TickLog):
        """A tick log that also keeps each tick object as the fleet appended it."""

        def __init__(self) -> None:
            super().__init__()
            self.appended: list[FleetTick] = []

        def append(self, tick: FleetTick) -> None:
            self.appended.append(tick)
            super().append(tick)

    fleet = _fleet(None)
    fleet.ticks = kept = Kept()
    fleet.advance(600.0)
    fleet.deploy("candidate", STOCK.model_copy(update={"max_num_seqs": 64}), 1)
    fleet.set_weight(30)
    fleet.faults.latency_multiplier["candidate"] = 1.7
    fleet.advance(900.0)
    assert {len(t.variants) for t in fleet.ticks} == {1, 2}
    assert any(t.variants["candidate"].note for t in fleet.ticks if "candidate" in t.variants)
    originals = kept.appended  # every tick object as the fleet built it
    assert len(originals) == 25
    log = TickLog()
    for tick in originals:
        log.append(tick)
    assert list(log) == originals and list(fleet.ticks) == originals
    assert log[-5:] == originals[-5:] and log[len(log) - 1] == originals[-1]
    assert log == fleet.ticks[:]


def test_a_recorded_tick_of_two_variants_takes_under_450_bytes() -> None:
    """Three hours of both variants, one tick a minute: the history of one simulated fleet, in columns (as
    objects it was about 5 KB a tick)."""
    from controller.domain.config import STOCK

    fleet = _fleet(3 * 3600.0)
    fleet.deploy("candidate", STOCK.model_copy(update={"max_num_seqs": 64}), 1)
    fleet.set_weight(50)
    for _ in range(8):
        fleet.advance(1800.0)
    assert len(fleet.ticks) == 180
    assert fleet.ticks.footprint() / len(fleet.ticks) < 450
