"""The promises are kept where effects happen: every action type of the ``Action`` union, under each promise
(none, dry run, a paused rollout, a rejected one, one waiting for approval), makes exactly the port calls expected
and nothing else, whatever decided it. A withheld change leaves its Event (the code in CamelCase) and a
``Withheld`` effect saying what it would have done; status gets that sentence under its code. A new action type
fails here until it is given its examples and its expected calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

import pytest

from controller.act import ActPorts, Executor, Promises, TrialSettings, fold
from controller.act.effects import Withheld
from controller.act.guard import HARMLESS, guard
from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.records import ClusterCall
from controller.clock import FakeClock
from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Promote,
    RequestApproval,
    Rollback,
    RunTrial,
    Scale,
    SetWeights,
    Severity,
)
from controller.domain.approval import ApprovalMode
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.rollout import Approval, RolloutState
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.builders import at_step, measured_trial, shape

TARGET = TargetRef("team-a", "chat", "llama")
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
FP8 = EngineConfig(kv_cache_dtype="fp8")
T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SHAPE = shape(4.0, 16.0, 512, 128, cv=0.5)

#: Examples of every action type: a new member of the union fails :func:`test_every_action_type_has_examples`.
EXAMPLES: dict[type[Any], list[Any]] = {
    RunTrial: [RunTrial(MTP1, SHAPE, "measure on the canary")],
    SetWeights: [SetWeights(25, "step 2", step=1)],
    Scale: [Scale("stable", 5, "follow the load"), Scale("candidate", 3, "the step's share")],
    DeployCandidate: [DeployCandidate(MTP1, 2, "warm up")],
    Promote: [Promote(MTP1, "promoted")],
    Rollback: [Rollback("back to stable")],
    Notify: [Notify(Severity.INFO, "Rollout at 25%", "step 2")],
    RequestApproval: [RequestApproval("r-1", 1, "inconclusive")],
}


def rollout(**update: Any) -> RolloutState:
    base = at_step("r-1", STOCK, MTP1, (5, 25, 50, 100), 0, T0, ago=(60, 10))
    return base.model_copy(update=update)


#: Each promise as users leave it in status (and the dry-run flag from the rules).
MODES: dict[str, tuple[TargetStatus, bool]] = {
    "normal": (TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout()), False),
    "dry-run": (TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout()), True),
    "paused": (TargetStatus(phase=Phase.PAUSED, rollout=rollout(paused=True)), False),
    "rejected": (
        TargetStatus(
            phase=Phase.AWAITING_APPROVAL,
            rollout=rollout(approvals=(Approval(by="alice", at=T0, step=1, decision="rejected"),)),
        ),
        False,
    ),
    "awaiting-approval": (TargetStatus(phase=Phase.AWAITING_APPROVAL, rollout=rollout()), False),
}

DONE, WITHHELD = "done", "withheld"

#: (action type, variant where it matters) -> mode -> done or withheld (by which code).
EXPECTED: dict[str, dict[str, str]] = {
    "RunTrial": dict.fromkeys(MODES, DONE),
    "Notify": dict.fromkeys(MODES, DONE),
    "RequestApproval": dict.fromkeys(MODES, DONE),
    "SetWeights": {"normal": DONE} | dict.fromkeys(("dry-run", "paused", "rejected", "awaiting-approval"), WITHHELD),
    "Promote": {"normal": DONE} | dict.fromkeys(("dry-run", "paused", "rejected", "awaiting-approval"), WITHHELD),
    "DeployCandidate": {"normal": DONE, "dry-run": WITHHELD, "paused": WITHHELD, "rejected": WITHHELD}
    | {"awaiting-approval": DONE},  # the candidate warms up before a human approves its traffic
    "Scale stable": {"dry-run": WITHHELD} | dict.fromkeys(("normal", "paused", "rejected", "awaiting-approval"), DONE),
    "Scale candidate": {"dry-run": WITHHELD, "rejected": WITHHELD}
    | dict.fromkeys(("normal", "paused", "awaiting-approval"), DONE),
    "Rollback": {"dry-run": WITHHELD} | dict.fromkeys(("normal", "paused", "rejected", "awaiting-approval"), DONE),
}

CODES = {
    "dry-run": Code.DRY_RUN_WITHHELD,
    "paused": Code.PAUSED_WITHHELD,
    "rejected": Code.REJECTED_WITHHELD,
    "awaiting-approval": Code.APPROVAL_WITHHELD,
}


def name(action: Any) -> str:
    return f"Scale {action.variant}" if isinstance(action, Scale) else type(action).__name__


@dataclass
class RecordingLoadTester:
    requests: list[TrialRequest] = field(default_factory=list)

    def run(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        return measured_trial(request)


@dataclass
class World:
    cluster: InMemoryCluster
    router: InMemoryRouter
    notifier: RecordingNotifier
    load_tester: RecordingLoadTester
    executor: Executor

    def calls(self) -> list[ClusterCall]:
        return [c for c in self.cluster.calls if c.op != "event"]


def world() -> World:
    clock = FakeClock(T0)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 8)
    cluster.deploy(TARGET, "candidate", MTP1, 1)
    cluster.calls.clear()
    notifier, tester = RecordingNotifier(), RecordingLoadTester()
    ports = ActPorts(router=router, cluster=cluster, notifier=notifier, load_tester=tester)
    return World(cluster, router, notifier, tester, Executor(ports, TrialSettings(slo=SLO(), budget=TrialBudget())))


def expected_calls(action: Any) -> tuple[list[ClusterCall], list[tuple[TargetRef, int]], int, int]:
    """What ``action`` does on the ports when it runs: cluster calls, route weights, trials, notifications."""
    if isinstance(action, SetWeights):
        return [], [(TARGET, action.candidate_weight)], 0, 0
    if isinstance(action, Scale):
        return [ClusterCall("scale", TARGET, action.variant, replicas=action.replicas)], [], 0, 0
    if isinstance(action, DeployCandidate):
        return [ClusterCall("deploy", TARGET, "candidate", action.config, action.replicas)], [], 0, 0
    if isinstance(action, Promote):
        return [ClusterCall("promote", TARGET, "candidate")], [(TARGET, 0)], 0, 0
    if isinstance(action, Rollback):
        return [ClusterCall("retire", TARGET, "candidate")], [(TARGET, 0)], 0, 0
    if isinstance(action, RunTrial):
        return [], [], 1, 0
    if isinstance(action, Notify):
        return [], [], 0, 1
    return [], [], 0, 0


def test_every_action_type_has_examples_and_expectations() -> None:
    assert set(get_args(Action)) == set(EXAMPLES)
    assert {name(a) for examples in EXAMPLES.values() for a in examples} == set(EXPECTED)
    assert all(set(modes) == set(MODES) for modes in EXPECTED.values())


CASES = [
    pytest.param(action, mode, id=f"{name(action)}-{mode}")
    for kind in get_args(Action)
    for action in EXAMPLES.get(kind, [])
    for mode in MODES
]


@pytest.mark.parametrize(("action", "mode"), CASES)
def test_each_action_under_each_promise_makes_exactly_the_expected_calls(action: Action, mode: str) -> None:
    before, dry_run = MODES[mode]
    w = world()
    promises = Promises.of(before, dry_run=dry_run, approval="auto")
    effects = w.executor.execute(TARGET, [action], promises)
    calls, weights, trials, posted = expected_calls(action)
    withheld = [e for e in effects if isinstance(e, Withheld)]
    events = [(e.reason, e.message) for e in w.cluster.events]
    if EXPECTED[name(action)][mode] == DONE:
        assert (w.calls(), w.router.history, len(w.load_tester.requests)) == (calls, weights, trials)
        assert len(w.notifier.posted) == posted and withheld == []
        assert len(events) == 1 and events[0][1] == action.reason
    else:
        code = CODES[mode]
        assert (w.calls(), w.router.history, w.load_tester.requests, w.notifier.posted) == ([], [], [], [])
        assert [(e.action, e.code) for e in withheld] == [(type(action).__name__, code)]
        assert withheld[0].would.startswith(f"{mode.replace('-', ' ')}: would ")
        assert events == [(code.event_reason, withheld[0].would)]
        status = fold(before, effects, keep_trials=10)
        assert [(r.code, r.message) for r in status.last_reasons] == [(code, withheld[0].would)]


def test_harmless_actions_are_the_ones_that_change_nothing_in_production() -> None:
    assert set(HARMLESS) == {RunTrial, Notify, RequestApproval}


def test_a_notice_that_goes_with_a_withheld_change_says_it_was_not_done() -> None:
    """The decide layer of a dry-run service never asks for a step; if something did, its Slack message must not
    say "Rollout at 25%" as if traffic had moved."""
    w = world()
    before, _ = MODES["normal"]
    plan: list[Action] = [SetWeights(25, "step 2", step=1), Notify(Severity.INFO, "Rollout at 25%", "step 2")]
    w.executor.execute(TARGET, plan, Promises.of(before, dry_run=True, approval="auto"))
    assert w.router.history == []
    ((_, posted),) = w.notifier.posted
    assert (posted.title, posted.code) == ("Dry run: Rollout at 25%", Code.DRY_RUN_WITHHELD)
    assert posted.reason == "not done (dry run): step 2"
    assert [e.reason for e in w.cluster.events] == ["DryRunWithheld", "DryRunWithheld"]


def test_a_notice_after_a_withheld_replica_change_goes_out_as_decided() -> None:
    """A replica count follows the load and tells no one: the daily digest after it is no notice of it."""
    w = world()
    before, _ = MODES["normal"]
    digest = Notify(Severity.INFO, "Daily digest", "the schedule's day", code=Code.DIGEST)
    w.executor.execute(TARGET, [Scale("stable", 3, "load"), digest], Promises.of(before, dry_run=True, approval="auto"))
    assert w.calls() == [] and [n for _, n in w.notifier.posted] == [digest]


@pytest.mark.parametrize(
    ("approval", "config", "approvals", "moves"),
    [
        pytest.param("manual", MTP1, (), False, id="manual-without-approval"),
        pytest.param("manual", MTP1, ("approved",), True, id="manual-approved"),
        pytest.param("manual-for-lossy", FP8, (), False, id="lossy-without-approval"),
        pytest.param("manual-for-lossy", MTP1, (), True, id="lossless-needs-none"),
        pytest.param("auto", FP8, (), True, id="auto"),
    ],
)
def test_a_rollout_whose_config_needs_approval_moves_only_once_approved(
    approval: ApprovalMode, config: EngineConfig, approvals: tuple[str, ...], moves: bool
) -> None:
    """Whatever decided a step, a rollout the approval mode makes wait shifts no traffic without a human's
    approval (here the phase does not say it waits: the guard reads the mode and the config, not the decision)."""
    given = tuple(Approval(by="alice", at=T0, step=0, decision="approved") for _ in approvals)
    before = TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout(to_config=config, weight=0, approvals=given))
    promises = Promises.of(before, dry_run=False, approval=approval, is_lossy=lambda c: c.kv_cache_dtype == "fp8")
    verdict = guard(SetWeights(5, "step 1", step=0), promises)
    if moves:
        assert isinstance(verdict, SetWeights)
    else:
        assert isinstance(verdict, Withheld) and verdict.code == Code.APPROVAL_WITHHELD


def test_a_rollback_of_a_rejected_rollout_and_a_step_back_to_zero_go_ahead() -> None:
    before, _ = MODES["rejected"]
    promises = Promises.of(before, dry_run=False, approval="manual")
    assert isinstance(guard(Rollback("rejected"), promises), Rollback)
    assert isinstance(guard(SetWeights(0, "back"), promises), SetWeights)
    assert isinstance(guard(SetWeights(25, "on"), promises), Withheld)
