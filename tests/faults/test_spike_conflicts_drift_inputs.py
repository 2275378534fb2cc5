"""Traffic spikes, 409 conflicts on writes, drift and malformed inputs."""

from __future__ import annotations

import pytest

from controller.domain.phases import Phase
from tests.support.faults import CR_CASES, POLICY_CASES, SimWorld, operator_cycle, run_scenario
from tests.support.faults.bad_inputs import _GOOD_POLICY, _example_cr

pytestmark = pytest.mark.faults


def test_traffic_spike_mid_rollout_is_inconclusive_not_a_false_rollback() -> None:
    """Traffic x3 from the 25% step on. Stable (stock) saturates and sheds load as errors while the candidate
    breaches the TTFT SLO as well: the analysis calls it load, not config (Inconclusive), and the rollout waits at
    its current weight for a human instead of rolling back a good config."""
    o = run_scenario("traffic-spike")
    d = o.data
    assert not d["rolled_back"] and d["awaiting_approval"], o.outcome
    assert d["final_phase"] is Phase.AWAITING_APPROVAL
    assert d["weights"][-1] in (25, 50) and 0 not in d["weights"]
    assert any(a.outcome == "Inconclusive" for a in d["analyses"])


@pytest.mark.parametrize("arm", ["step", "rollout-start", "rollback"])
def test_409_on_every_write_keeps_state_then_converges_without_duplicated_steps(arm: str) -> None:
    o = run_scenario(f"conflicts-{arm}")
    d = o.data
    assert d["conflicts"] and d["conflicted_cycles"] >= 1
    world = d["world"]
    conflicted = [r for r in world.records if any("ClusterConflict" in x for x in r.reasons)]
    for r in conflicted:  # the cycle kept the previous phase and step
        assert r.phase is r.phase_before
    if arm == "rollback":
        assert d["weights"][:2] == [5, 25] and set(d["weights"][2:]) == {0}
        assert not d["candidate_left"] and world.status.phase is Phase.OBSERVING
        assert any("rolled back" in h for h in d["history"])
    else:
        assert d["status_ahead_of_route"] == []
        assert d["weights"] == [5, 25, 50, 100]  # each step applied exactly once
        assert d["promoted"]
    # a retried cycle resumes after the actions already done: the notification posted before the 409 is not posted
    # again (it was, 3 times, when a retry decided and acted afresh)
    assert d["duplicate_notifications"] == 0


def test_drift_starts_a_retune_on_the_new_shape() -> None:
    o = run_scenario("drift")
    d = o.data
    assert d["retune"] is not None
    tuning = d["tuning"]
    assert tuning is not None and tuning.shape.prompt_tokens.mean > 10_000
    assert "drift" in tuning.reason


def test_bad_crs_and_policies_name_the_field_and_nothing_is_applied() -> None:
    o = run_scenario("bad-inputs")
    assert o.data["untouched"], o.exposure  # route weight, cluster calls, router writes and status as before
    cases = o.data["cases"]
    assert len(cases) == len(CR_CASES) + len(POLICY_CASES)
    for case in cases:
        assert case.error != "accepted", case.name
        assert case.named_field, (case.name, case.field, case.error)
        assert case.source in ("ml/llama-8b", "policies/small.yaml") or case.source.startswith("policies/small.yaml:")
    policy_steps = [c for c in cases if "steps" in c.name]
    assert all("steps" in c.error for c in policy_steps)
    # the same path with valid inputs does run a cycle on the world (so "untouched" above means something)
    world: SimWorld = o.data["world"]
    body = _example_cr()
    body["status"] = world.status.model_dump(mode="json")
    world.fleet.advance(world.settings.cycle_s)
    operator_cycle(world, body, _GOOD_POLICY)
    assert world.status.updated_at == world.clock.now()
