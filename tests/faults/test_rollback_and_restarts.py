"""A bad config is rolled back with bounded exposure; a killed operator resumes exactly where it was."""

from __future__ import annotations

import pytest

from controller.domain.phases import Phase
from tests.support.faults import PHASE_SCRIPTS, CycleRecord, SimWorld, run_scenario
from tests.support.faults.rollout import _reference

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("scenario", ["bad-config", "bad-config-x3"], ids=["latency-x2", "latency-x3"])
def test_bad_config_is_rolled_back_within_two_intervals_with_exposure_bounded_by_the_step(scenario: str) -> None:
    """Latency x2 (and x3) from the 25% step on. Measured: from the first tick the candidate ran with the fault
    until the rollback took effect, the highest route weight any tick had (must be the 25% step the fault appeared
    at, never a later step) and the share of all requests the candidate served (at most that weight, plus Poisson
    noise). Time to rollback counts cycles from the one after which the candidate had min_failure_samples requests
    under the fault to the one that rolled back."""
    o = run_scenario(scenario)
    d = o.data
    assert d["rolled_back"], o.outcome
    assert d["max_weight_while_bad"] == 25, o.outcome
    assert d["candidate_requests_while_bad"] <= 0.25 * d["requests_while_bad"] * 1.15
    assert 1 <= d["cycles_to_rollback"] <= 2
    assert d["applied_weights"] == [5, 25, 0]
    assert d["weight_after"] == 0 and not d["candidate_left"]
    assert not d["promoted"] and len(d["blocked"]) == 1


@pytest.mark.parametrize("phase", list(PHASE_SCRIPTS), ids=[p.value for p in PHASE_SCRIPTS])
def test_operator_killed_in_every_phase_resumes_without_lost_approval_or_repeated_step(phase: Phase) -> None:
    o = run_scenario(f"restart-{phase.value}")
    d = o.data
    assert d["restarts"] >= 1, f"the script never reached {phase.value}"
    assert d["weights"] == d["reference_weights"]
    assert d["phases"] == d["reference_phases"]
    assert d["same_final_status"]
    world: SimWorld = d["world"]
    if PHASE_SCRIPTS[phase] == "full":
        assert d["weights"] == [5, 25, 50, 100]  # each step once, none skipped
        assert d["approvals"] == 1  # alice's approval survived every restart
        assert world.promoted()
    else:
        assert d["weights"] == [5, 25, 0]  # the x3 fault fails the 25% step
        assert world.status.phase is Phase.OBSERVING


def test_the_phase_scripts_visit_every_phase() -> None:
    visited = {r.phase_before for kind in ("full", "rollback") for r in _reference_records(kind)}
    assert visited >= set(Phase)


def _reference_records(kind: str) -> list[CycleRecord]:
    return _reference(kind).records
