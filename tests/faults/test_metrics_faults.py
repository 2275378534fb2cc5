"""Missing metrics freeze the loop: a rollout is held where it is, never promoted blind, and resumes after."""

from __future__ import annotations

import pytest

from controller.domain.phases import Phase
from tests.support.faults import run_scenario

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("fault", ["outage", "nan", "empty"])
def test_metrics_missing_mid_rollout_holds_the_step_and_resumes(fault: str) -> None:
    o = run_scenario(f"metrics-{fault}")
    d = o.data
    assert d["missing_cycles"] == 3
    assert d["held"], d["reasons"]
    assert not d["moved_while_missing"]
    for reasons in d["frozen_reasons"]:
        assert any("metrics unavailable" in r or "frozen at 25%" in r for r in reasons), reasons
    world = d["world"]
    for r in world.records:
        if "metrics" in r.fault:
            assert "Promote" not in r.actions
    assert d["weights"] == [5, 25, 50, 100]
    assert d["promoted"] and 1 <= d["resumed_after_cycles"] <= 3


def test_metrics_outage_while_tuning_freezes_then_tunes_again() -> None:
    o = run_scenario("metrics-mid-tuning")
    d = o.data
    assert d["frozen_cycles"] == 2
    assert any("frozen: metrics unavailable" in r for r in d["frozen_reason"])
    assert set(d["actions_while_frozen"]) <= {"Notify"}  # nothing but the warning
    world = d["world"]
    assert Phase.FROZEN in world.phases()
    assert d["promoted"]
