"""LLM outages and garbage fall back to the optimizer; failed canaries are data; nothing invalid is trialled."""

from __future__ import annotations

import pytest

from controller.advisor.graph import AgentAdvisor
from controller.domain.trial import TrialStatus
from controller.testing.faults import GarbageAdvisor, UnavailableAdvisor
from tests.support.faults import run_scenario

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("kind", ["llm-down", "advisor-garbage", "agent-llm-down", "agent-garbage"])
def test_advisor_failures_fall_back_to_the_optimizer_and_nothing_invalid_is_trialled(kind: str) -> None:
    o = run_scenario(kind)
    d = o.data
    assert d["invalid_trials"] == []
    assert len(d["trials"]) >= 3
    assert d["promoted"], o.outcome
    world = d["world"]
    trialled = {t.config.key() for t in world.trials()}
    advisor = d["advisor"]
    if isinstance(advisor, UnavailableAdvisor):
        assert advisor.calls >= 1
        assert any("optimizer proposes instead" in n for n in d["notes"])
    elif isinstance(advisor, GarbageAdvisor):
        assert advisor.calls >= 1
        assert not trialled & {c.key() for c in advisor.proposed[:4]}
        assert any("out_of_policy" in n for n in d["notes"]) and any("infeasible" in n for n in d["notes"])
    else:
        assert isinstance(advisor, AgentAdvisor)
        assert all(t.config.max_num_seqs != 4096 and t.config.tensor_parallel_size == 1 for t in world.trials())


def test_canary_crash_oom_and_startup_timeout_are_recorded_and_tuning_continues() -> None:
    o = run_scenario("canary-crash-oom-timeout")
    d = o.data
    failed = d["failed"]
    assert [t.status for t in failed] == [TrialStatus.INFEASIBLE] * 3
    reasons = " | ".join(t.reason for t in failed)
    assert "SIGSEGV" in reasons and "out of memory" in reasons and "startup timeout" in reasons
    assert all(t.log_tail for t in failed)
    world = d["world"]
    kept = [t for t in world.status.trials if t.status is TrialStatus.INFEASIBLE]
    assert len(kept) == 3  # recorded in status, where shiftctl trials shows them
    assert d["measured"] >= 2 and d["rolled_out_measured"]  # the round ended with a measured config
    assert d["deployed_failed"] == []  # never rolled out


def test_canary_pool_gone_fails_trials_with_the_reason_and_deploys_nothing() -> None:
    """The canary pool disappears (expressed through the LoadTester as TrialStatus.FAILED): every trial is recorded
    FAILED with the reason and nothing is deployed. (Pausing the trials: test_regressions_scaling.py.)"""
    o = run_scenario("canary-gone")
    d = o.data
    assert d["failed"] and all("canary pool unavailable" in t.reason for t in d["failed"])
    assert d["deployed"] == [] and not d["promoted"]
