"""Scenario: a whole simulated day on the embedded fleet, with a fake clock, through the real control loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.demo.model import DemoSettings
from controller.demo.report import totals
from controller.demo.run import DemoRun, simulate_day
from controller.domain import STOCK, Phase

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return simulate_day(DemoSettings(out_dir=tmp_path_factory.mktemp("demo"), seed=7))


def test_every_window_got_a_measured_schedule_entry(day: DemoRun) -> None:
    windows = {w.name for w in day.fleet.traffic.windows}
    scheduled = {s.window for s in day.status.schedule}
    assert scheduled == windows
    for entry in day.status.schedule:
        assert entry.goodput_tokens_per_s > 0 and entry.stock_goodput_tokens_per_s > 0


def test_chosen_config_beats_stock_at_peak(day: DemoRun) -> None:
    peak = day.status.schedule_for("day")
    assert peak is not None and peak.config != STOCK
    assert peak.gain >= 1.5, peak.reason
    # production confirms what the canary measured: the busiest hour runs well above stock
    t = totals(day.timeline, day.actions, len(day.trials))
    assert t.peak_gain >= 1.5
    assert t.slo_attainment >= 0.99


def test_schedule_differs_between_day_and_night(day: DemoRun) -> None:
    night, peak = day.status.schedule_for("night"), day.status.schedule_for("day")
    assert night is not None and peak is not None
    assert night.config.key() != peak.config.key()


def test_rollouts_stepped_through_the_policy_weights(day: DemoRun) -> None:
    # the candidate's share of the traffic the fleet served, tick by tick: each new non-zero weight is a step
    served = [p.candidate_weight for p in day.timeline]
    steps = [w for i, w in enumerate(served) if w and (i == 0 or w != served[i - 1])]
    assert steps[:4] == list(day.policy.rollout.steps)
    assert any(kind == "Promote" for _, kind, _ in day.actions)
    # the promotion's Event gives its reason code, the step's analysis, in CamelCase
    assert any(e.reason == "WithinSlo" and e.message.startswith("promoted") for e in day.cluster.events)
    assert day.status.phase in (Phase.OBSERVING, Phase.ROLLING_OUT, Phase.TRIALLING)


def test_same_seed_same_day(day: DemoRun, tmp_path: Path) -> None:
    again = simulate_day(DemoSettings(out_dir=tmp_path, seed=7, hours=2))
    first_six = [t for at, t in day.trials if at.hour < 2]
    assert [t.config.key() for _, t in again.trials] == [t.config.key() for t in first_six]
