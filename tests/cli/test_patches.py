"""Pure patch builders: what each write verb sends, and when it refuses."""

from __future__ import annotations

from datetime import UTC, datetime

import jsonpatch
import pytest

from controller.cli.shiftctl.patches import (
    AlreadyDone,
    VerbRefused,
    build_abort_patch,
    build_approval_patch,
    build_pause_patch,
    pending_step,
)
from controller.crd.models import parse_tuned_service, status_to_wire
from controller.domain.phases import Phase
from controller.domain.rollout import Approval
from controller.domain.status import TargetStatus

from .conftest import awaiting_status, tuned_service

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _apply(status: TargetStatus, ops: list[dict[str, object]], rv: str = "7") -> TargetStatus:
    body = tuned_service("w") | {"status": status_to_wire(status)}
    body["metadata"] = {"name": "w", "namespace": "prod", "resourceVersion": rv}
    _, after = parse_tuned_service(jsonpatch.apply_patch(body, ops))
    return after


def test_approval_patch_is_guarded_and_appends_the_approval() -> None:
    status = awaiting_status()
    ops = build_approval_patch(status, resource_version="7", by="alice", at=AT)
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert ops[1]["path"] == "/status/rollout/approvals/-"
    after = _apply(status, ops)
    assert after.rollout is not None
    bound = {"rollout_id": after.rollout.id, "config_key": after.rollout.to_config.key()}
    assert after.rollout.approvals == (Approval(by="alice", at=AT, step=0, decision="approved", **bound),)
    assert after.rollout.approved_step(0)
    # a decision on another rollout, or on another to_config, does not count for this one
    for other in ({"rollout_id": "r-other"}, {"config_key": "another-config"}):
        stray = Approval(by="alice", at=AT, step=0, decision="approved", **{**bound, **other})
        assert not after.rollout.model_copy(update={"approvals": (stray,)}).approved_step(0)


def test_stale_resource_version_fails_the_test_op() -> None:
    ops = build_approval_patch(awaiting_status(), resource_version="6", by="alice", at=AT)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        _apply(awaiting_status(), ops, rv="7")


def test_pending_step_is_the_next_one_once_traffic_moved() -> None:
    status = awaiting_status(step_index=1, weight=50)
    assert status.rollout is not None
    assert pending_step(status.rollout) == 2
    ops = build_approval_patch(status, resource_version="1", by="bob", at=AT, comment="looks good")
    assert ops[1]["value"]["step"] == 2
    assert ops[1]["value"]["comment"] == "looks good"


def test_approving_twice_is_already_done_and_rejecting_is_recorded() -> None:
    first = _apply(awaiting_status(), build_approval_patch(awaiting_status(), resource_version="7", by="a", at=AT))
    with pytest.raises(AlreadyDone, match="already approved by a"):
        build_approval_patch(first, resource_version="7", by="b", at=AT)
    rejected = _apply(
        awaiting_status(),
        build_approval_patch(awaiting_status(), resource_version="7", by="c", at=AT, decision="rejected"),
    )
    assert rejected.rollout is not None and rejected.rollout.rejected()


def test_refuses_when_nothing_waits() -> None:
    with pytest.raises(VerbRefused, match="no rollout in progress"):
        build_approval_patch(TargetStatus(), resource_version="1", by="a", at=AT)
    rolling = awaiting_status(weight=25).model_copy(update={"phase": Phase.ROLLING_OUT})
    with pytest.raises(VerbRefused, match="not waiting for an approval"):
        build_approval_patch(rolling, resource_version="1", by="a", at=AT)
    with pytest.raises(VerbRefused, match="step 9 does not exist"):
        build_approval_patch(awaiting_status(), resource_version="1", by="a", at=AT, step=8)


def test_missing_approvals_list_is_created() -> None:
    ops = build_approval_patch(awaiting_status(), resource_version="1", by="a", at=AT, raw_status={"rollout": {}})
    assert ops[1] == {"op": "add", "path": "/status/rollout/approvals", "value": [ops[1]["value"][0]]}


def test_pause_resume_and_abort() -> None:
    rolling = awaiting_status(weight=25).model_copy(update={"phase": Phase.ROLLING_OUT})
    paused = _apply(rolling, build_pause_patch(rolling, resource_version="7", paused=True))
    assert paused.rollout is not None and paused.rollout.paused
    with pytest.raises(AlreadyDone):
        build_pause_patch(paused, resource_version="7", paused=True)
    resumed = _apply(paused, build_pause_patch(paused, resource_version="7", paused=False))
    assert resumed.rollout is not None and not resumed.rollout.paused
    aborted = _apply(rolling, build_abort_patch(rolling, resource_version="7", reason="abort by alice: latency"))
    assert aborted.rollout is not None
    assert aborted.rollout.abort_requested and aborted.rollout.abort_reason == "abort by alice: latency"
    with pytest.raises(AlreadyDone):
        build_abort_patch(aborted, resource_version="7", reason="again")
    with pytest.raises(VerbRefused, match="nothing to rollback"):
        build_abort_patch(TargetStatus(), resource_version="1", reason="x", verb="rollback")
