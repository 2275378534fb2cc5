"""Writes only on change: a cycle that changes nothing writes no status, a condition's ``lastTransitionTime`` moves
only when its status flips (``metav1.Condition``), and a repeated Event raises the count of the one already written
(as client-go's recorder does) instead of adding another. Writes are counted from the fake API's record of every
request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.adapters.kube.events import KubeEvents
from controller.adapters.kube.status import Refusal, StatusStore
from controller.cli.shiftctl.patches import build_approval_patch
from controller.crd.models import parse_tuned_service
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.errors import InvalidInput
from controller.reactor.loop import ControlLoop
from controller.reactor.metrics import OperatorMetrics
from controller.reactor.simulator_backend import SimulatorBackend
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import AlwaysLeader, G, V, tuned_service
from tests.support.operator_setup import simulator_settings

pytestmark = pytest.mark.kube

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
T = TargetRef(namespace="prod", name="workhorse", model="m")


class Clock:
    """The operator's wall clock in these tests: moved by hand."""

    def __init__(self) -> None:
        self.at = T0

    def __call__(self) -> datetime:
        return self.at

    def tick(self, seconds: float = 60.0) -> None:
        self.at += timedelta(seconds=seconds)


def status_writes(kube: KubeAPIServer, since: int) -> int:
    return sum(1 for c in kube.api.calls[since:] if c.verb == "patch" and c.resource == "tunedservices/status")


def stored(api: client.ApiClient) -> dict[str, Any]:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    assert isinstance(body, dict)
    return body


def conditions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in body["status"]["conditions"]}


@pytest.fixture
def loop(operator_kubeconfig: Path, policy_dir: Path, operator_api: client.ApiClient) -> tuple[ControlLoop, Clock]:
    settings = simulator_settings(operator_kubeconfig, policy_dir)
    clock = Clock()
    backend = SimulatorBackend(settings, operator_api, background_trials=False)  # trials inside the cycle
    return ControlLoop(settings, operator_api, backend, AlwaysLeader(), OperatorMetrics(), now=clock), clock


def test_idle_cycles_write_nothing_and_conditions_move_only_on_a_flip(
    kube: KubeAPIServer, api: client.ApiClient, loop: tuple[ControlLoop, Clock]
) -> None:
    control, clock = loop
    ts = tuned_service(route=None)
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    for _ in range(20):  # tune (simulated trials), choose a config, then wait for a human's approval
        control.cycle("prod", "workhorse")
        clock.tick()
        if stored(api).get("status", {}).get("phase") == Phase.AWAITING_APPROVAL.value:
            break
    control.cycle("prod", "workhorse")  # the first cycle spent waiting (its reasons change once)
    before = stored(api)
    assert before["status"]["phase"] == Phase.AWAITING_APPROVAL.value
    calls = len(kube.api.calls)
    for _ in range(10):  # idle: the operator waits for the approval
        clock.tick()
        report = control.cycle("prod", "workhorse")
        assert report.acted
    assert status_writes(kube, calls) == 0
    idle = stored(api)
    assert idle["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert idle["status"]["updated_at"] == before["status"]["updated_at"]
    assert control.store.skipped >= 10

    body = stored(api)
    _, status = parse_tuned_service(body)
    rv = body["metadata"]["resourceVersion"]
    approval = build_approval_patch(status, resource_version=rv, by="alice", at=clock())
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        G, V, "prod", "tunedservices", "workhorse", approval, _content_type="application/json-patch+json"
    )
    clock.tick()
    flipped_at = clock()
    calls = len(kube.api.calls)
    report = control.cycle("prod", "workhorse")  # the approved step goes out: AwaitingApproval flips to False
    assert report.acted, report.reason
    assert status_writes(kube, calls) == 1
    after = stored(api)
    old, new = conditions(before), conditions(after)
    assert old["AwaitingApproval"]["status"] == "True" and new["AwaitingApproval"]["status"] == "False"
    assert new["AwaitingApproval"]["lastTransitionTime"] == flipped_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    for kind in ("Ready", "Accepted"):  # unflipped: as first written
        assert new[kind]["status"] == old[kind]["status"] == "True"
        assert (
            new[kind]["lastTransitionTime"]
            == old[kind]["lastTransitionTime"]
            < new["AwaitingApproval"]["lastTransitionTime"]
        )
    generation = after["metadata"]["generation"]
    assert all(c["observedGeneration"] == generation for c in new.values())
    assert after["status"]["observedGeneration"] == generation


def test_a_repeated_refusal_is_written_once(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service())
    store = StatusStore(operator_api)
    refusal = Refusal("InvalidPolicy", str(InvalidInput("unknown policy preset 'x'", field="spec.policy.preset")))
    first = store.write_refusal(store.read("prod", "workhorse"), refusal, now=T0)
    for minute in range(1, 11):
        store.write_refusal(store.read("prod", "workhorse"), refusal, now=T0 + timedelta(minutes=minute))
    assert store.writes + store.skipped == 11 and store.skipped == 10
    assert stored(api)["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_a_repeated_event_raises_the_count_of_the_one_written(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service())
    clock = Clock()
    events = KubeEvents(operator_api, now=clock)
    core = client.CoreV1Api(api)
    for _ in range(3):
        events.record(T, "WaitingForApproval", "shiftctl approve r1", warning=False)
        clock.tick()
    events.record(T, "Rollback", "TTFT p95 regressed 40%", warning=True)  # another message: another Event
    by_reason = {str(e.reason): e for e in core.list_namespaced_event("prod").items}
    assert sorted(by_reason) == ["Rollback", "WaitingForApproval"]
    waiting = by_reason["WaitingForApproval"]
    assert waiting.count == 3
    assert waiting.first_timestamp == T0
    assert waiting.last_timestamp == T0 + timedelta(minutes=2)
    assert by_reason["Rollback"].count == 1

    core.delete_namespaced_event(str(waiting.metadata.name), "prod")  # Events expire: the next repeat starts afresh
    events.record(T, "WaitingForApproval", "shiftctl approve r1", warning=False)
    (again,) = [e for e in core.list_namespaced_event("prod").items if e.reason == "WaitingForApproval"]
    assert again.count == 1 and again.metadata.name != waiting.metadata.name

    events.forget("prod", "workhorse")
    assert events.remembered() == 0
