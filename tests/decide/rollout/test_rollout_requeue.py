"""``rollout.analysis_interval_seconds`` is how often the loop comes back to a rollout in progress."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.domain import STOCK, Phase
from controller.domain.status import RolloutState, TargetStatus
from controller.policy import Policy
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.rollout_fakes import MTP1, NOW, TARGET, NoTrials, SilentAdvisor, StaticMetrics


def rolling() -> TargetStatus:
    rollout = RolloutState(
        id="r1",
        from_config=STOCK,
        to_config=MTP1,
        steps=(5, 25, 50, 100),
        step_index=1,
        weight=25,
        started_at=NOW - timedelta(minutes=20),
        step_started_at=NOW - timedelta(seconds=30),  # still baking
    )
    return TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout, active_config=STOCK, replicas=4, updated_at=NOW)


@pytest.mark.parametrize("interval", [None, 15.0, 240.0])
def test_analysis_interval_sets_the_requeue_during_a_rollout(interval: float | None) -> None:
    clock = FakeClock(NOW)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 4)
    cluster.deploy(TARGET, "candidate", MTP1, 1)
    ports = Ports(
        metrics=StaticMetrics(),
        load_tester=NoTrials(),
        router=router,
        advisor=SilentAdvisor(),
        notifier=RecordingNotifier(),
        cluster=cluster,
        clock=clock,
    )
    policy = (
        Policy() if interval is None else Policy.model_validate({"rollout": {"analysis_interval_seconds": interval}})
    )
    result = Reconciler(ports, policy).reconcile(TARGET, rolling())
    assert result.status.phase is Phase.ROLLING_OUT
    expected = 60.0 if interval is None else interval  # the policy's default
    assert result.requeue_after_s == expected
    assert result.plan.requeue_after_s == expected
