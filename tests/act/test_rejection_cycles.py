"""``shiftctl reject`` is kept across cycles: a pre-warm of the night's config, rejected while it waited for approval,
is retired, recorded in status and history, and the next cycles (past midnight, inside the night window the config
was scheduled for) neither deploy it nor ask for approval of it again; they say why (code ``rejection-kept``). The
cycle runs for real: reconcile -> decide -> act on in-memory ports, a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller.adapters.notify.recording import RecordingNotifier
from controller.cli.shiftctl import render as render
from controller.clock import FakeClock
from controller.crd.models import status_to_wire
from controller.decide import Rules
from controller.domain import STOCK, EngineConfig, Observation, Phase
from controller.domain.codes import Code
from controller.domain.observation import TargetRef, VariantStats
from controller.domain.rollout import Approval, RolloutState
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TimeWindow
from controller.policy import Policy
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import shape

TARGET = TargetRef("team-a", "chat", "llama")
NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
CHAT = shape(10, 64, 1024, 384)
REJECTED_AT = datetime(2026, 12, 2, 23, 50, tzinfo=UTC)


class SteadyMetrics:
    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        stable = VariantStats(variant="stable", requests=3000, ttft_p95_s=0.2, tpot_p95_s=0.02, good_requests=3000)
        return Observation(target=str(target), start=start, end=end, shape=CHAT, variants={"stable": stable})


class NoAdvisor:
    def propose(self, context: Any) -> tuple[()]:
        return ()


def scheduled(window: str, config: EngineConfig) -> ScheduledConfig:
    return ScheduledConfig(
        window=window,
        config=config,
        shape=CHAT,
        goodput_tokens_per_s=2000 if config == MTP1 else 1000,
        stock_goodput_tokens_per_s=1000,
        reason="measured",
        tuned_at=REJECTED_AT - timedelta(days=1),
    )


def test_a_rejected_config_is_not_asked_for_again_in_the_next_cycles() -> None:
    clock = FakeClock(REJECTED_AT)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 1)
    cluster.deploy(TARGET, "candidate", MTP1, 1)  # warmed up before the approval
    cluster.calls.clear()
    notifier = RecordingNotifier()
    ports = Ports(
        metrics=SteadyMetrics(),
        load_tester=None,  # type: ignore[arg-type]  # nothing here runs a trial
        router=router,
        advisor=NoAdvisor(),
        notifier=notifier,
        cluster=cluster,
        clock=clock,
    )
    reconciler = Reconciler(ports, Rules.from_policy(Policy(approval="manual"), (NIGHT, DAY)))
    rollout = RolloutState(
        id="day-20261202233500",
        from_config=STOCK,
        to_config=MTP1,
        steps=(5, 25, 50, 100),
        started_at=REJECTED_AT - timedelta(minutes=15),
        window="night",
        approvals=(Approval(by="alice", at=REJECTED_AT, step=0, decision="rejected", comment="not tonight"),),
    )
    status = TargetStatus(
        phase=Phase.AWAITING_APPROVAL,
        active_config=STOCK,
        rollout=rollout,
        window="day",
        schedule=(scheduled("day", STOCK), scheduled("night", MTP1)),
        updated_at=REJECTED_AT,
    )

    first = reconciler.reconcile(TARGET, status)
    assert first.plan.codes == (Code.REJECTED,)
    assert [c.op for c in cluster.calls if c.op != "event"] == ["retire"]
    assert first.status.phase is Phase.OBSERVING and first.status.rollout is None
    (kept,) = first.status.rejections
    assert (kept.by, kept.config_key, kept.window, kept.rollout_id) == ("alice", MTP1.key(), "night", rollout.id)
    history = render.history_lines(first.status)
    assert any("rejected mtp1 for window 'night' by alice" in line for line in history), history
    assert "Rejected mtp1 for window night by alice" in explained(first.status)

    status, codes = first.status, []
    cluster.calls.clear()
    for _ in range(12):  # across midnight, into the night window the rejected config was scheduled for
        clock.advance(60)
        result = reconciler.reconcile(TARGET, status)
        status = result.status
        codes.append((result.plan.codes, tuple(r.code for r in status.last_reasons)))
    assert all(Code.APPROVAL_REQUIRED not in plan and Code.APPROVAL_REQUIRED not in said for plan, said in codes)
    assert all(plan == (Code.REJECTION_KEPT,) for plan, _ in codes), codes
    assert status.window == "night" and status.phase is Phase.OBSERVING and status.rollout is None
    assert [c.op for c in cluster.calls if c.op != "event"] == []
    assert not [n for _, n in notifier.posted if n.title == "Approval needed"]


def explained(status: TargetStatus) -> str:
    """``shiftctl explain``'s text for a TunedService with ``status``."""
    body: dict[str, Any] = {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {
            "workload": {"deployments": ["chat"], "service": "chat"},
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": "gb300-dgx-station",
        },
        "status": status_to_wire(status),
    }
    return render.explain_text(body).plain
