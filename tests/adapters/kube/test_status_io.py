"""One guarded status write per cycle: a concurrent user write makes the operator merge and retry, losing nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client, config

from controller.adapters.kube.approvals import ApprovalGate
from controller.adapters.kube.mirror import rollout_ended, rollout_outcome
from controller.adapters.kube.status import StatusStore, merge_user_changes
from controller.cli.shiftctl.patches import build_approval_patch
from controller.crd.models import parse_tuned_service, status_to_wire
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.rollout import Approval, RolloutState
from controller.domain.status import Reason, TargetStatus
from tests.support.kube_api import KubeAPI, running_kube_api
from tests.support.kube_operator import G, V, tuned_service

pytestmark = pytest.mark.kube

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
ROLLOUT = RolloutState(
    id="r1", from_config=STOCK, to_config=EngineConfig(max_num_seqs=64), steps=(50, 100), started_at=NOW
)
ALICE = Approval(by="alice", at=NOW, step=0, decision="approved")


def waiting() -> TargetStatus:
    return TargetStatus(phase=Phase.AWAITING_APPROVAL, rollout=ROLLOUT)


def test_merge_carries_new_approvals_and_user_flags() -> None:
    base = waiting()
    fresh = base.model_copy(update={"rollout": ROLLOUT.model_copy(update={"approvals": (ALICE,), "paused": True})})
    ours = base.model_copy(
        update={"last_reasons": (Reason(code="rollout-step", message="waiting for approval of step 1"),)}
    )
    merged = merge_user_changes(base=base, ours=ours, fresh=fresh)
    assert merged.rollout is not None
    assert merged.rollout.approvals == (ALICE,)
    assert merged.rollout.paused
    assert [r.message for r in merged.last_reasons] == [
        "waiting for approval of step 1"
    ]  # the operator's own fields stay ours
    # nothing changed by users: ours unchanged; a rollout that ended meanwhile: ours unchanged
    assert merge_user_changes(base=base, ours=ours, fresh=base) == ours
    assert merge_user_changes(base=base, ours=TargetStatus(), fresh=fresh) == TargetStatus()


def test_rollout_outcomes() -> None:
    rolling = TargetStatus(phase=Phase.ROLLING_OUT, rollout=ROLLOUT.model_copy(update={"weight": 100}))
    promoted = TargetStatus(phase=Phase.OBSERVING, active_config=ROLLOUT.to_config)
    ended = rollout_ended(rolling, promoted)
    assert ended is not None and rollout_outcome(ended, promoted) == "promoted"
    back = TargetStatus(phase=Phase.ROLLED_BACK)
    ended = rollout_ended(rolling, back)
    assert ended is not None and rollout_outcome(ended, back) == "rolled_back"
    assert rollout_ended(promoted, promoted) is None


def test_concurrent_approval_is_not_lost(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service())
    co.patch_namespaced_custom_object_status(
        G, V, "prod", "tunedservices", "workhorse", {"status": status_to_wire(waiting())}
    )
    store = StatusStore(operator_api)
    body = store.read("prod", "workhorse")  # the operator's cycle starts from this read ...
    _, base = parse_tuned_service(body)
    ops = build_approval_patch(base, resource_version=body["metadata"]["resourceVersion"], by="alice", at=NOW)
    co.patch_namespaced_custom_object_status(  # ... and alice approves meanwhile
        G, V, "prod", "tunedservices", "workhorse", ops, _content_type="application/json-patch+json"
    )
    ours = base.model_copy(
        update={"last_reasons": (Reason(code="rollout-step", message="waiting for approval of step 1"),)}
    )
    written = store.write(body, base, ours, now=NOW)  # the guarded write fails once (422), merges, retries
    assert store.conflicts == 1
    _, after = parse_tuned_service(written)
    assert after.rollout is not None and [a.by for a in after.rollout.approvals] == ["alice"]
    assert [r.message for r in after.last_reasons] == ["waiting for approval of step 1"]
    assert written["status"]["observedGeneration"] == 1
    assert {c["type"]: c["status"] for c in written["status"]["conditions"]} == {
        "Ready": "True",
        "AwaitingApproval": "True",
        "Accepted": "True",
    }
    assert {c["type"]: c["reason"] for c in written["status"]["conditions"]} == {
        "Ready": "RolloutStep",  # the last reason's code, in CamelCase
        "AwaitingApproval": "ApprovalRequired",
        "Accepted": "Valid",
    }


@pytest.mark.security
def test_approvals_from_people_who_may_not_approve_are_dropped(tmp_path: Path) -> None:
    denied = KubeAPI(denials={("mallory", "approve", "configrollouts")})
    with running_kube_api(denied) as srv:
        gate = ApprovalGate(config.new_client_from_config(str(srv.write_kubeconfig(tmp_path / "k"))))
        mallory = Approval(by="mallory", at=NOW, step=0, decision="approved")
        status = waiting().model_copy(update={"rollout": ROLLOUT.model_copy(update={"approvals": (mallory, ALICE)})})
        screened, refused = gate.screen("prod", status)
        assert screened.rollout is not None and screened.rollout.approvals == (ALICE,)
        assert [(a.by, why) for a, why in refused] == [("mallory", 'user "mallory" may not approve configrollouts')]
        assert gate.screen("prod", waiting()) == (waiting(), [])
