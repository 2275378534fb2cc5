"""One rollout step's reason code goes everywhere the step is told: the status (``last_reasons``, code and message),
the Kubernetes Event (its ``reason``, the code in CamelCase), the Slack message (a ``code`` context element),
``shiftctl explain`` (``[code] message``) and what acting did (each effect's ``code``). The cycle runs for real:
reconcile -> decide -> act on in-memory ports."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.notify.slack_format import build_message
from controller.cli.shiftctl import render as render
from controller.clock import FakeClock
from controller.crd.models import status_to_wire
from controller.decide import Rules
from controller.domain import STOCK, EngineConfig, LengthDistribution, Observation, Phase, TrafficShape
from controller.domain.actions import Notify, SetWeights
from controller.domain.codes import Code
from controller.domain.observation import TargetRef, VariantStats
from controller.domain.rollout import RolloutState
from controller.domain.status import Reason, TargetStatus
from controller.policy import load_policy
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TARGET = TargetRef("team-a", "chat", "llama")
POLICY = load_policy(Path(__file__).parents[2] / "policies" / "v1" / "default.yaml")
SEQS128 = EngineConfig(max_num_seqs=128, max_num_batched_tokens=4096)
SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=16.0,
    prompt_tokens=LengthDistribution(mean=512, cv=0.5),
    output_tokens=LengthDistribution(mean=128, cv=0.5),
)


class QuietMetrics:
    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        stable = VariantStats(variant="stable", requests=3000, ttft_p95_s=0.2, tpot_p95_s=0.02, output_tokens_per_s=900)
        return Observation(target=str(target), start=start, end=end, shape=SHAPE, variants={"stable": stable})


class NoAdvisor:
    def propose(self, context: Any) -> tuple[()]:
        return ()


def printed(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=400, force_terminal=False, color_system=None).print(renderable, soft_wrap=True)
    return out.getvalue()


def test_a_rollout_steps_code_reaches_status_event_slack_and_explain() -> None:
    clock = FakeClock(NOW)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 2)
    cluster.deploy(TARGET, "candidate", SEQS128, 1)
    notifier = RecordingNotifier()
    ports = Ports(
        metrics=QuietMetrics(),
        load_tester=None,  # type: ignore[arg-type]  # no trial runs in a rollout step
        router=router,
        advisor=NoAdvisor(),
        notifier=notifier,
        cluster=cluster,
        clock=clock,
    )
    rollout = RolloutState(id="r1", from_config=STOCK, to_config=SEQS128, steps=(25, 50, 100), started_at=NOW)
    status = TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout, replicas=2, updated_at=NOW)

    result = Reconciler(ports, Rules.from_policy(POLICY)).reconcile(TARGET, status)

    # the decision: the candidate is ready, so the first step's weight goes out
    assert result.plan.codes == (Code.CANDIDATE_READY,)
    (weights,) = result.plan.of_type(SetWeights)
    assert weights.candidate_weight == 25 and weights.code == Code.CANDIDATE_READY
    # status: each reason with its code
    assert Reason(code="candidate-ready", message=weights.reason) in result.status.last_reasons
    assert {r.code for r in result.status.last_reasons} == {"candidate-ready"}
    # the Event: the code in CamelCase as its reason
    assert next((e.reason, e.message) for e in cluster.events) == ("CandidateReady", weights.reason)
    assert {e.reason for e in cluster.events} == {"CandidateReady"}
    # what acting did: each effect under the step's code (the operator counts them by type and code)
    assert [(type(e).__name__, e.code) for e in result.effects] == [
        ("WeightsSet", "candidate-ready"),
        ("EventRecorded", "candidate-ready"),
        ("Notified", "candidate-ready"),
        ("EventRecorded", "candidate-ready"),
    ]
    # Slack: the step's notification carries the code, shown in the message's context
    ((_, posted),) = notifier.posted
    assert isinstance(posted, Notify) and posted.code == "candidate-ready"
    context = [b for b in build_message(TARGET, posted)["blocks"] if b["type"] == "context"]
    assert any(e["text"] == "code `candidate-ready`" for b in context for e in b["elements"])
    # shiftctl explain: the latest decisions, code first
    body: dict[str, Any] = {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {
            "workload": {"deployments": ["chat"], "service": "chat"},
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": "gb300-dgx-station",
        },
        "status": status_to_wire(result.status),
    }
    explained = printed(render.explain_text(body))
    assert f"[candidate-ready] {weights.reason}" in explained, explained
