"""Two scenarios through the real reconcile cycle, step by step, against their golden files (``*.json`` here).

Both run in the reliability scenarios' simulated world (:class:`~tests.support.faults.world.SimWorld`: the real
:class:`~controller.reconcile.Reconciler` on the in-process fleet, a fake clock, short trials and bakes):

* ``day_with_a_promotion``: a whole simulated day in cycles of five minutes: the morning's trials, a rollout over
  the policy's steps and its promotion, then a day of observing;
* ``rollback``: the rollback phase script: a latency fault on the candidate from the 25 % step, rolled back.

A change that moves a step, a code or a weight shows here as a diff; when it is meant, rerun with
``SHIFTLIGHT_UPDATE_GOLDEN=1`` and commit the files.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.faults.rollout import PhaseScript
from tests.support.faults.world import SimWorld, WorldSettings
from tests.support.golden import UPDATE, RecordingReconciler, Row, check_golden, load, render

pytestmark = pytest.mark.faults

DAY_START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


def recorded(world: SimWorld) -> RecordingReconciler:
    """Put a recorder in front of the world's reconciler."""
    recorder = RecordingReconciler(world.reconciler, world.clock)
    world.reconciler = recorder  # type: ignore[assignment]  # it reconciles as the one it wraps
    return recorder


def test_a_day_with_a_promotion_takes_the_golden_steps() -> None:
    world = SimWorld(WorldSettings(start=DAY_START, cycle_s=300.0))
    recorder = recorded(world)
    world.run(24 * 12)
    assert [r.action for r in recorder.rows].count("Promote") == 1
    check_golden("day_with_a_promotion", recorder.rows)


def test_a_rollback_takes_the_golden_steps() -> None:
    world = SimWorld(WorldSettings())
    recorder = recorded(world)
    world.run(20, before=PhaseScript("rollback"))
    assert [r.action for r in recorder.rows].count("Rollback") == 1
    check_golden("rollback", recorder.rows)


def test_a_different_run_fails_with_a_diff_of_its_rows_and_the_update_switch_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed = Row("2026-11-30T00:05:00+00:00", "Trialling", "trials", "Scale", replicas=2)
    now = Row("2026-11-30T00:05:00+00:00", "Trialling", "trials", "RunTrial")
    (tmp_path / "one.json").write_text(render([committed]))
    with pytest.raises(pytest.fail.Exception) as failed:
        check_golden("one", [now], folder=tmp_path)
    assert f"-  {committed.line()}" in str(failed.value) and f"+  {now.line()}" in str(failed.value)
    monkeypatch.setenv(UPDATE, "1")
    check_golden("one", [now], folder=tmp_path)
    assert load(tmp_path / "one.json") == [now]
    monkeypatch.delenv(UPDATE)
    check_golden("one", [now], folder=tmp_path)
