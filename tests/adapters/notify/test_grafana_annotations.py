"""Decisions become Grafana annotations: a rollout driven by the real loop, step by step to its promotion, and one
to its rollback, each decision annotated once per dashboard with the tags ``shiftlight``, the target, the phase and
the reason code, and the reason sentence Slack gets as the text; duplicates within the window are dropped as Slack
drops them; the token appears in no log record.

Grafana is a local stand-in (:mod:`tests.support.grafana_server`) that enforces the bearer token and records
annotation POSTs. Times are injected (a fake clock for the loop, a fixed wall clock for the annotations).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller.adapters.notify import grafana as annotations
from controller.adapters.notify.grafana import FanOutNotifier, GrafanaAnnotator
from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide import Rules
from controller.domain import STOCK, EngineConfig, LengthDistribution, Observation, Phase, TrafficShape
from controller.domain.actions import Notify, Severity
from controller.domain.codes import Code
from controller.domain.observation import TargetRef, VariantStats
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.rollout import RolloutState
from controller.domain.status import TargetStatus
from controller.observe import dashboard
from controller.observe.grafana_proxy import GrafanaSettings
from controller.policy import Policy
from controller.ports import TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.grafana_server import GrafanaStandIn, running_grafana

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WALL_MS = 1_790_000_000_000
TOKEN = "glsa_annotation-token_9876543210"
TARGET = TargetRef("team-a", "chat", "llama")
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=16.0,
    prompt_tokens=LengthDistribution(mean=512, cv=0.5),
    output_tokens=LengthDistribution(mean=128, cv=0.5),
)


@pytest.fixture
def grafana() -> Iterator[GrafanaStandIn]:
    with running_grafana(token=TOKEN, datasources={}) as stand_in:
        yield stand_in


def annotator(grafana: GrafanaStandIn, tmp_path: Path, *, token: str = TOKEN, **kwargs: Any) -> GrafanaAnnotator:
    path = tmp_path / "token"
    path.write_text(token)
    settings = GrafanaSettings(
        url=grafana.url, token_file=path, annotations=True, dashboard_uids=("team-latency", dashboard.UID)
    )
    return GrafanaAnnotator(settings, wall_clock_ms=lambda: WALL_MS, **kwargs)


class Metrics:
    """Stable and a candidate; ``candidate_ttft`` sets whether the candidate is fine or breaches the SLO."""

    def __init__(self, candidate_ttft: float) -> None:
        self.candidate_ttft = candidate_ttft

    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        variants = {
            name: VariantStats(
                variant=name, requests=n, ttft_p95_s=ttft, tpot_p95_s=0.02, output_tokens_per_s=300.0, good_requests=n
            )
            for name, n, ttft in (("stable", 3000, 0.3), ("candidate", 3000, self.candidate_ttft))
        }
        return Observation(target=str(target), start=start, end=end, shape=SHAPE, variants=variants)


class NoTrials:
    def run(self, request: TrialRequest) -> Any:
        raise AssertionError("no trial expected during a rollout")


class SilentAdvisor:
    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        return ()


def run_rollout(notifier: FanOutNotifier, candidate_ttft: float, cycles: int) -> TargetStatus:
    """The loop from a candidate that is deployed and ready (weight 0) for ``cycles`` cycles, 20 minutes apart; the
    loop posts each cycle's notifications to ``notifier``."""
    clock = FakeClock(NOW)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 4)
    cluster.deploy(TARGET, "candidate", MTP1, 1)
    ports = Ports(
        metrics=Metrics(candidate_ttft),
        load_tester=NoTrials(),
        router=router,
        advisor=SilentAdvisor(),
        notifier=notifier,
        cluster=cluster,
        clock=clock,
    )
    rollout = RolloutState(id="r1", from_config=STOCK, to_config=MTP1, steps=(25, 100), started_at=NOW)
    status = TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout, active_config=STOCK, replicas=4, updated_at=NOW)
    reconciler = Reconciler(ports, Rules.from_policy(Policy()))
    for _ in range(cycles):
        result = reconciler.reconcile(TARGET, status)
        status = result.status
        for action in result.plan.actions:  # the loop has posted them; the same decisions again (a retried
            if isinstance(action, Notify):  # cycle) are annotated once
                notifier.post(TARGET, action)
        clock.advance(1200)
    return status


def by_dashboard(grafana: GrafanaStandIn) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for annotation in grafana.annotations:
        out.setdefault(annotation["dashboardUID"], []).append(annotation)
    return out


def test_a_promoted_rollout_marks_each_step_and_the_promotion_once(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    grafana_notifier = annotator(grafana, tmp_path)
    slack_like = RecordingNotifier()
    status = run_rollout(FanOutNotifier([grafana_notifier, slack_like]), candidate_ttft=0.3, cycles=4)
    assert grafana_notifier.flush()
    grafana_notifier.close()
    assert status.phase is Phase.OBSERVING and status.active_config == MTP1

    decisions = [n for _, n in slack_like.posted]
    boards = by_dashboard(grafana)
    assert set(boards) == {dashboard.UID, "team-latency"}  # the Shiftlight dashboard and the admin's
    for uid, marks in boards.items():
        # one per decision (each was posted twice), in order, with the text Slack gets
        assert [m["text"] for m in marks] == list(dict.fromkeys(n.reason for n in decisions))
        assert all(m["tags"][-1] == f"dashboard:{uid}" for m in marks)
        assert [m["tags"][:-1] for m in marks] == [
            ["shiftlight", "target:team-a/chat", "phase:rollout-step", "code:candidate-ready"],
            ["shiftlight", "target:team-a/chat", "phase:rollout-step", "code:within-slo"],
            ["shiftlight", "target:team-a/chat", "phase:promotion", "code:promoted"],
        ]
        assert all(m["time"] == WALL_MS for m in marks)
    assert grafana_notifier.stats.dropped_duplicate == 3
    assert grafana.refused == 0


def test_a_rollback_is_marked_with_its_analysis_code(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    grafana_notifier = annotator(grafana, tmp_path)
    slack_like = RecordingNotifier()
    status = run_rollout(FanOutNotifier([grafana_notifier, slack_like]), candidate_ttft=5.0, cycles=2)
    assert grafana_notifier.flush()
    grafana_notifier.close()
    assert status.phase is Phase.ROLLED_BACK
    rollback = {n for _, n in slack_like.posted if n.title == "Rollback"}  # posted by the loop, then again
    assert len(rollback) == 1
    marks = [m for m in by_dashboard(grafana)[dashboard.UID] if "phase:rollback" in m["tags"]]
    assert len(marks) == 1
    assert marks[0]["tags"] == [
        "shiftlight",
        "target:team-a/chat",
        "phase:rollback",
        "code:slo-breach",
        f"dashboard:{dashboard.UID}",
    ]
    assert marks[0]["text"] == rollback.pop().reason


EVIDENCE = (("Output tokens/s", "100 → 130"),)
NOTIFICATIONS = [
    (
        Notify(Severity.INFO, "New config chosen", "mtp k=1 is 1.3x faster", EVIDENCE, Code.STARTED),
        "config-switch",
        "started",
    ),
    (Notify(Severity.INFO, "Rollout started", "rollout r1 started", code=Code.STARTED), "rollout-step", "started"),
    (
        Notify(Severity.WARNING, "Observation frozen", "frozen: metrics unavailable", code=Code.FROZEN),
        "freeze",
        "frozen",
    ),
    (Notify(Severity.WARNING, "Approval needed", "step 2 is a gate", code=Code.MANUAL_GATE), "approval", "manual-gate"),
    (Notify(Severity.CRITICAL, "Rollback", "rolled back", code=Code.ABORTED), "rollback", "aborted"),
    (Notify(Severity.CRITICAL, "Rollback", "rolled back", code=Code.SLO_BREACH), "rollback", "slo-breach"),
    (Notify(Severity.INFO, "Rollout at 50%", "step 2 passed", code=Code.WITHIN_SLO), "rollout-step", "within-slo"),
    (Notify(Severity.INFO, "Rollout complete", "promoted", code=Code.PROMOTED), "promotion", "promoted"),
    (Notify(Severity.INFO, "Daily digest", "3 windows tuned", code=Code.DIGEST), None, None),
    # the code decides, never the title
    (Notify(Severity.INFO, "Rollback complete: approval needed", "x", code=Code.STEP), "rollout-step", "step"),
    (Notify(Severity.INFO, "Daily digest", "frozen", code=Code.FROZEN), "freeze", "frozen"),
    (Notify(Severity.CRITICAL, "Rollback", "no code"), "note", None),
]


@pytest.mark.parametrize(("notification", "phase", "code"), NOTIFICATIONS)
def test_phase_and_code_of_each_kind_of_decision(notification: Notify, phase: str | None, code: str | None) -> None:
    assert annotations.decision_phase(notification) == phase
    if phase is not None:
        assert annotations.reason_code(notification, phase) == (code or phase)


def test_digests_are_not_annotated_and_the_rate_limit_spares_rollbacks(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    ticks = [0.0]
    grafana_notifier = annotator(grafana, tmp_path, burst=1, rate_per_s=1 / 3600, clock=lambda: ticks[0])
    grafana_notifier.post(TARGET, Notify(Severity.INFO, "Daily digest", "3 windows tuned", code=Code.DIGEST))
    grafana_notifier.post(TARGET, Notify(Severity.INFO, "New config chosen", "a"))
    grafana_notifier.post(TARGET, Notify(Severity.INFO, "New config chosen", "b"))  # over the rate
    grafana_notifier.post(TARGET, Notify(Severity.CRITICAL, "Rollback", "rolled back", code=Code.SLO_BREACH))
    ticks[0] = 601.0  # past the dedup window: the same decision later is a new mark
    grafana_notifier.post(TARGET, Notify(Severity.CRITICAL, "Rollback", "rolled back", code=Code.SLO_BREACH))
    assert grafana_notifier.flush()
    grafana_notifier.close()
    texts = [m["text"] for m in by_dashboard(grafana)[dashboard.UID]]
    assert texts == ["a", "rolled back", "rolled back"]
    assert (grafana_notifier.stats.skipped, grafana_notifier.stats.dropped_rate_limited) == (1, 1)


@pytest.mark.security
def test_the_token_never_appears_in_logs(
    grafana: GrafanaStandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    good = annotator(grafana, tmp_path)
    good.post(TARGET, Notify(Severity.INFO, "New config chosen", "a"))
    assert good.flush()
    good.close()
    # a refused token: the stand-in echoes the Authorization header it got back in its 401 body
    (tmp_path / "bad").mkdir()
    bad = annotator(grafana, tmp_path / "bad", token="glsa_refused-token-echoed")
    bad.post(TARGET, Notify(Severity.INFO, "New config chosen", "b"))
    assert bad.flush()
    bad.close()
    assert bad.stats.failed == 2 and grafana.refused == 2  # one per dashboard
    assert "401" in caplog.text
    for secret in (TOKEN, "glsa_refused-token-echoed"):
        assert secret not in caplog.text
        assert secret not in repr(good) + repr(bad)


def test_one_failing_notifier_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def post(self, target: TargetRef, notification: Notify) -> None:
            raise RuntimeError("down")

    recording = RecordingNotifier()
    FanOutNotifier([Broken(), recording]).post(TARGET, Notify(Severity.INFO, "New config chosen", "a"))
    assert recording.titles() == ["New config chosen"]
    assert "Broken" in caplog.text


def test_the_dashboards_annotation_query_shows_each_decision_once(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    """The generated dashboard selects its marks by tag; Grafana's tag queries search every dashboard, so only the
    copy made for it may match (the copies for the admin's dashboards carry the same decision)."""
    board = json.loads(dashboard.OUTPUT.read_text())
    queries = [a for a in board["annotations"]["list"] if a.get("enable")]
    assert len(queries) == 1 and queries[0]["target"]["type"] == "tags" and not queries[0]["target"]["matchAny"]
    wanted = set(queries[0]["target"]["tags"])
    assert "shiftlight" in wanted

    grafana_notifier = annotator(grafana, tmp_path)
    grafana_notifier.post(TARGET, Notify(Severity.CRITICAL, "Rollback", "rolled back", code=Code.SLO_BREACH))
    assert grafana_notifier.flush()
    grafana_notifier.close()
    shown = [m for m in grafana.annotations if wanted <= set(m["tags"])]
    assert [m["dashboardUID"] for m in shown] == [dashboard.UID]
    assert len(grafana.annotations) == 2  # the admin's dashboard has its copy


def test_the_operator_notifies_slack_and_grafana_when_both_are_set(tmp_path: Path) -> None:
    from kubernetes import client

    from controller.adapters.notify.slack import SlackNotifier
    from controller.reactor.run import OperatorRuntime
    from controller.reactor.settings import OperatorSettings

    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "webhook").write_text("http://127.0.0.1:9/hook")
    env = {
        "SHIFTLIGHT_GRAFANA_URL": "http://127.0.0.1:9",
        "SHIFTLIGHT_GRAFANA_TOKEN_FILE": str(tmp_path / "token"),
        "SHIFTLIGHT_GRAFANA_ANNOTATIONS": "true",
        "SHIFTLIGHT_SLACK_WEBHOOK_FILE": str(tmp_path / "webhook"),
        "SHIFTLIGHT_LEADER_ELECTION": "false",
    }
    runtime = OperatorRuntime(OperatorSettings.from_env(env), api=client.ApiClient())
    try:
        notifier = runtime.backend.notifier  # type: ignore[attr-defined]
        assert isinstance(notifier, FanOutNotifier)
        assert [type(n) for n in notifier.notifiers] == [SlackNotifier, GrafanaAnnotator]
    finally:
        for closable in notifier.notifiers:
            closable.close()
