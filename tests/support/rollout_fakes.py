"""Ports for a reconciler in the middle of a rollout of MTP1 over stock: metrics where stable and candidate are both
fine (the step bakes on), no trial expected, an advisor that proposes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.domain import STOCK, EngineConfig, Observation, Phase
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus
from controller.ports import TrialRequest
from controller.reconcile import Ports
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import at_step, shape, variant

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TARGET = TargetRef("team-a", "chat", "llama")
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
SHAPE = shape(4.0, 16.0, 512, 128, cv=0.5)


class StaticMetrics:
    """Stable and a candidate that is fine: the step bakes on."""

    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        variants = {
            name: variant(name, n, ttft=0.3, output_tokens_per_s=300.0)
            for name, n in (("stable", 3000), ("candidate", 1000))
        }
        return Observation(target=str(target), start=start, end=end, shape=SHAPE, variants=variants)


class NoTrials:
    def run(self, request: TrialRequest) -> Any:
        raise AssertionError("no trial expected during a rollout")


class SilentAdvisor:
    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        return ()


def rolling() -> TargetStatus:
    """A rollout of MTP1 over stock at its 25 % step, 30 s into its bake."""
    rollout = at_step("r1", STOCK, MTP1, (5, 25, 50, 100), 1, NOW, ago=(20, 0.5))  # the step still baking
    return TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout, active_config=STOCK, replicas=4, updated_at=NOW)


def mid_rollout_ports(clock: FakeClock) -> Ports:
    """An in-memory cluster with 4 stable replicas of stock and one candidate of MTP1, and the fakes above."""
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 4)
    cluster.deploy(TARGET, "candidate", MTP1, 1)
    return Ports(
        metrics=StaticMetrics(),
        load_tester=NoTrials(),
        router=router,
        advisor=SilentAdvisor(),
        notifier=RecordingNotifier(),
        cluster=cluster,
        clock=clock,
    )
