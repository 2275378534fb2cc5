"""Approvals are bound to the user who writes them: the chart's ValidatingAdmissionPolicy, rendered by helm and its
CEL evaluated with cel-python as the API server would (``object``, ``oldObject``, ``request``, ``variables``).

A status write that adds an approval whose ``by`` is not the writer's username is refused; an approval already in
the stored status passes unchanged; a new decision must name the rollout it is for; nobody changes or removes
another user's decision; a writer other than the operator changes no status field but the rollout's approvals and
its paused/abort flags (so nobody keeps an approval while rewriting ``rollout.to_config``); the operator's own
ServiceAccount is not matched. The value
``approvals.admissionPolicy.enabled`` decides whether the policy and its binding are rendered at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import celpy
import kubernetes_validate
import pytest

from controller.domain.rollout import Approval

from .conftest import CHART, Helm, by_kind, one

pytestmark = [pytest.mark.helm, pytest.mark.security]

K8S_VERSION = "1.37.0"
OPERATOR = "system:serviceaccount:shiftlight:sl-shiftlight"
_ENV = celpy.Environment()


def approval(
    by: str, step: int, decision: str = "approved", minute: int = 0, *, comment: str = "", rollout_id: str = "r1"
) -> dict[str, Any]:
    """One approval as ``shiftctl approve`` writes it (``Approval.model_dump(mode="json")``), bound to rollout r1."""
    at = datetime(2026, 12, 2, 4, minute, tzinfo=UTC)
    value: dict[str, Any] = Approval(
        by=by, at=at, step=step, decision=decision, comment=comment, rollout_id=rollout_id, config_key="k1"
    ).model_dump(mode="json")  # type: ignore[arg-type]
    return value


BY = "a new approval's `by` must be the user who writes it ({user})"
ROLLOUT = "a new decision must name the rollout it decides on (rollout_id: status.rollout.id)"
OTHERS = "another user's decision cannot be changed or removed"
FIELDS = (
    "only the operator writes status fields other than rollout.approvals, rollout.paused, "
    "rollout.abort_requested and rollout.abort_reason"
)


def tuned_service(approvals: list[dict[str, Any]] | None, *, rollout: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "metadata": {"name": "workhorse", "namespace": "prod"},
        "spec": {"workload": {"deployments": ["workhorse"], "service": "workhorse"}},
        "status": {"phase": "AwaitingApproval"},
    }
    if rollout:
        body["status"]["rollout"] = {"id": "r1", "weight": 5, "to_config": {"max_num_seqs": 64}}
        if approvals is not None:
            body["status"]["rollout"]["approvals"] = approvals
    return body


@dataclass(frozen=True)
class Verdict:
    matched: bool
    refused: list[str] = field(default_factory=list)


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    return _ENV.program(_ENV.compile(expression)).evaluate(activation)


def admit(policy: dict[str, Any], old: dict[str, Any], new: dict[str, Any], user: str) -> Verdict:
    """The policy's verdict on an UPDATE of ``tunedservices/status`` by ``user``: its match conditions, then its
    variables (in order), then its validations (the messages of those that fail)."""
    spec = policy["spec"]
    request = {"operation": "UPDATE", "subResource": "status", "userInfo": {"username": user}}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(request),
    }
    if not all(bool(_eval(c["expression"], activation)) for c in spec.get("matchConditions", [])):
        return Verdict(matched=False)
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        variables[variable["name"]] = _eval(variable["expression"], {**activation, "variables": variables})
    scope = {**activation, "variables": celpy.celtypes.MapType(variables)}
    refused = [
        str(_eval(rule["messageExpression"], scope)) if "messageExpression" in rule else rule["message"]
        for rule in spec["validations"]
        if not bool(_eval(rule["expression"], scope))
    ]
    return Verdict(matched=True, refused=refused)


@pytest.fixture(scope="module")
def policy(helm: Helm) -> dict[str, Any]:
    return one(helm.template(), "ValidatingAdmissionPolicy")


SRE = approval("sre-lead", 0)
ALICE = approval("alice", 0)

SRE_REJECTS = approval("sre-lead", 0, "rejected", comment="not before the freeze")
CASES = [
    # (id, old approvals, new approvals, writer, the rules that refuse it)
    ("the writer approves as themself", [], [ALICE], "alice", []),
    ("the first approval creates the list", None, [ALICE], "alice", []),
    ("a forged by is refused", [], [SRE], "alice", [BY]),
    ("a forged by in a new list is refused", None, [SRE], "alice", [BY]),
    ("a forged rejection is refused", [], [approval("sre-lead", 0, "rejected")], "alice", [BY]),
    ("an approval already stored passes with a new one", [SRE], [SRE, approval("alice", 1)], "alice", []),
    ("an approval already stored passes alone", [SRE], [SRE], "alice", []),
    ("a stored approval moved to another step", [SRE], [approval("sre-lead", 1)], "alice", [BY, OTHERS]),
    ("a stored approval turned into a rejection", [SRE], [approval("sre-lead", 0, "rejected")], "alice", [BY, OTHERS]),
    ("a stored approval given a new time", [SRE], [approval("sre-lead", 0, minute=5)], "alice", [BY, OTHERS]),
    ("a forged approval beside a genuine one", [], [ALICE, approval("sre-lead", 1)], "alice", [BY]),
    ("the genuine sre-lead approves", [ALICE], [ALICE, approval("sre-lead", 1)], "sre-lead", []),
    # another user's decision is theirs: neither rewritten nor removed
    ("another's comment rewritten", [SRE_REJECTS], [{**SRE_REJECTS, "comment": "fine by me"}], "alice", [OTHERS]),
    ("another's rejection removed", [SRE_REJECTS, ALICE], [ALICE], "alice", [OTHERS]),
    ("another's approval removed", [SRE, ALICE], [ALICE], "bob", [OTHERS]),
    ("the writer withdraws their own decision", [SRE, ALICE], [SRE], "alice", []),
    # a new decision names the rollout it is for
    ("a decision for no rollout id", [], [approval("alice", 0, rollout_id="")], "alice", [ROLLOUT]),
    ("a decision for another rollout", [], [approval("alice", 0, rollout_id="r0")], "alice", [ROLLOUT]),
]


@pytest.mark.parametrize(("old", "new", "user", "refused"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_decision_is_its_writers_and_names_its_rollout(
    policy: dict[str, Any], old: list[dict[str, Any]] | None, new: list[dict[str, Any]], user: str, refused: list[str]
) -> None:
    verdict = admit(policy, tuned_service(old), tuned_service(new), user)
    assert verdict.matched
    assert verdict.refused == [m.format(user=user) for m in refused]


def with_status(body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**body, "status": {**body["status"], **fields}}


def with_rollout(body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return with_status(body, rollout={**body["status"]["rollout"], **fields})


STATUS_WRITES = {
    # the review's case: the approval is kept while to_config is rewritten under it
    "to_config rewritten under a kept approval": lambda b: with_rollout(b, to_config={"kv_cache_dtype": "fp8"}),
    "the weight moved": lambda b: with_rollout(b, weight=100),
    "the rollout id changed": lambda b: with_rollout(b, id="r2"),
    "a rollout field added": lambda b: with_rollout(b, expected_gain=9.9),
    "the rollout id removed": lambda b: with_status(b, rollout={"approvals": [SRE], "weight": 5}),
    "the phase changed": lambda b: with_status(b, phase="RollingOut"),
    "the trial cache's sequence written": lambda b: with_status(b, trialCache={"sequence": 1}),
    "a status field removed": lambda b: {**b, "status": {k: v for k, v in b["status"].items() if k != "phase"}},
}


@pytest.mark.parametrize("write", sorted(STATUS_WRITES))
def test_a_non_operator_writes_no_status_field_but_the_users_rollout_fields(policy: dict[str, Any], write: str) -> None:
    old = tuned_service([SRE])
    new = STATUS_WRITES[write](tuned_service([SRE]))
    assert admit(policy, old, new, "alice").refused == [FIELDS]
    assert admit(policy, old, new, OPERATOR) == Verdict(matched=False)  # the operator writes them every cycle


@pytest.mark.parametrize(
    "fields",
    [{"paused": True}, {"abort_requested": True, "abort_reason": "latency"}],
    ids=["pause", "abort"],
)
def test_the_users_rollout_flags_stay_writable(policy: dict[str, Any], fields: dict[str, Any]) -> None:
    old = tuned_service([SRE])
    assert admit(policy, old, with_rollout(tuned_service([SRE]), **fields), "alice").refused == []


@pytest.mark.parametrize(
    ("old", "new", "refused"),
    [
        (tuned_service(None, rollout=False), tuned_service(None, rollout=False), []),
        (tuned_service([SRE]), tuned_service([SRE]), []),
        (tuned_service([SRE]), tuned_service(None, rollout=False), [OTHERS, FIELDS]),  # the rollout removed
        ({k: v for k, v in tuned_service(None).items() if k != "status"}, tuned_service(None), [FIELDS]),
        (tuned_service(None, rollout=False), tuned_service([]), [FIELDS]),  # a rollout created
    ],
    ids=["no rollout, no change", "unchanged", "rollout removed", "first status", "rollout created"],
)
def test_status_writes_without_new_approvals(policy: dict[str, Any], old: Any, new: Any, refused: list[str]) -> None:
    """What only the operator writes (a first status, a rollout started or finished) is refused to anyone else."""
    assert admit(policy, old, new, "alice") == Verdict(matched=True, refused=refused)


def test_the_operators_own_service_account_is_not_matched(policy: dict[str, Any]) -> None:
    """The operator rewrites the whole status each cycle (approvals re-serialised, refused ones dropped); it never
    adds one, and a refused write would stop its loop."""
    old, new = tuned_service([SRE]), tuned_service([approval("sre-lead", 0, minute=1)])
    assert admit(policy, old, new, OPERATOR) == Verdict(matched=False)
    assert admit(policy, old, new, "system:serviceaccount:shiftlight:other").refused


def test_policy_matches_status_updates_and_is_bound(helm: Helm, policy: dict[str, Any]) -> None:
    docs = helm.template()
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": ["shiftlight.dev"],
        "apiVersions": ["*"],
        "operations": ["UPDATE"],
        "resources": ["tunedservices/status"],
    }
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    for doc in (policy, binding):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_operator_exemption_follows_the_service_account_name(helm: Helm) -> None:
    docs = helm.template("--namespace", "ops", "--set", "serviceAccount.name=tuner")
    policy = one(docs, "ValidatingAdmissionPolicy")
    old, new = tuned_service([]), tuned_service([SRE])
    assert admit(policy, old, new, "system:serviceaccount:ops:tuner") == Verdict(matched=False)
    assert admit(policy, old, new, OPERATOR).refused


@pytest.mark.parametrize(("enabled", "rendered"), [("true", 1), ("false", 0)])
def test_the_value_gates_the_policy_and_its_binding(helm: Helm, enabled: str, rendered: int) -> None:
    docs = helm.template("--set", f"approvals.admissionPolicy.enabled={enabled}")
    assert len(by_kind(docs, "ValidatingAdmissionPolicy")) == rendered
    assert len(by_kind(docs, "ValidatingAdmissionPolicyBinding")) == rendered


def test_the_value_must_be_a_boolean(helm: Helm) -> None:
    result = helm.run(
        "template", "sl", str(CHART), "--set-string", "approvals.admissionPolicy.enabled=yes", check=False
    )
    assert result.returncode != 0
    assert "enabled" in result.stderr
