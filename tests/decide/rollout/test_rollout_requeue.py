"""``rollout.analysis_interval_seconds`` is how often the loop comes back to a rollout in progress."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.decide import Rules
from controller.domain import Phase
from controller.policy import Policy
from controller.reconcile import Reconciler
from tests.support.rollout_fakes import NOW, TARGET, mid_rollout_ports, rolling


@pytest.mark.parametrize("interval", [None, 15.0, 240.0])
def test_analysis_interval_sets_the_requeue_during_a_rollout(interval: float | None) -> None:
    clock = FakeClock(NOW)
    ports = mid_rollout_ports(clock)
    policy = (
        Policy() if interval is None else Policy.model_validate({"rollout": {"analysis_interval_seconds": interval}})
    )
    result = Reconciler(ports, Rules.from_policy(policy)).reconcile(TARGET, rolling())
    assert result.status.phase is Phase.ROLLING_OUT
    expected = 60.0 if interval is None else interval  # the policy's default
    assert result.requeue_after_s == expected
    assert result.plan.requeue_after_s == expected
