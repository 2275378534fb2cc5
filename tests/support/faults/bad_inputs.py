"""The bad-inputs scenario: malformed TunedService bodies and policy files arriving during a rollout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.rollout import Approval
from controller.domain.status import TargetStatus
from tests.support.faults.world import REPO, WORLD_START, Outcome, SimWorld


@dataclass(frozen=True)
class BadInputCase:
    name: str
    kind: str  # "cr" | "policy"
    expected_field: str
    error: str
    field: str
    source: str

    @property
    def named_field(self) -> bool:
        return self.field == self.expected_field and self.expected_field in self.error


_EXAMPLE_CR = REPO / "examples" / "tunedservice.yaml"
_GOOD_POLICY = """\
version: 1
name: small
space:
  max_num_seqs: [64, 128]
rollout:
  steps: [5, 25, 100]
"""


def _example_cr() -> dict[str, Any]:
    import yaml

    with open(_EXAMPLE_CR, encoding="utf-8") as fh:
        body: dict[str, Any] = yaml.safe_load(fh)
    return body


def _rollout_status() -> dict[str, Any]:
    from controller.domain.rollout import RolloutState

    now = WORLD_START
    rollout = RolloutState(
        id="day-1",
        from_config=STOCK,
        to_config=EngineConfig(max_num_seqs=128),
        steps=(5, 25, 100),
        step_index=1,
        weight=25,
        started_at=now,
        step_started_at=now,
        approvals=(Approval(by="alice", at=now, step=0, decision="approved"),),
    )
    status: dict[str, Any] = TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout).model_dump(mode="json")
    return status


def _set_path(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = body
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return body


#: (name, where, value, expected field) for TunedService bodies; ``status.*`` paths start from a rollout status.
CR_CASES: tuple[tuple[str, str, Any, str], ...] = (
    ("no deployments", "spec.workload.deployments", [], "spec.workload.deployments"),
    ("negative TTFT SLO", "spec.slo.ttft_seconds", -1, "spec.slo.ttft_seconds"),
    ("unknown approval mode", "spec.approvalMode", "sometimes", "spec.approvalMode"),
    ("replica bounds inverted", "spec.replicas.minReplicas", 9, "spec.replicas"),
    ("weight above 100", "status.rollout.weight", 150, "status.rollout.weight"),
    ("unknown phase", "status.phase", "Exploding", "status.phase"),
    (
        "approval without approver",
        "status.rollout.approvals",
        [{"by": "", "at": "2026-11-30T11:00:00Z", "step": 1, "decision": "approved"}],
        "status.rollout.approvals[0].by",
    ),
    ("empty rollout steps", "status.rollout.steps", [], "status.rollout.steps"),
)

#: (name, policy YAML, expected field)
POLICY_CASES: tuple[tuple[str, str, str], ...] = (
    ("steps not increasing", _GOOD_POLICY.replace("[5, 25, 100]", "[50, 25, 100]"), "rollout"),
    ("steps not ending at 100", _GOOD_POLICY.replace("[5, 25, 100]", "[5, 25, 50]"), "rollout"),
    ("max_num_seqs 0", _GOOD_POLICY.replace("[64, 128]", "[0, 128]"), "space.max_num_seqs[0]"),
    ("misspelt section", _GOOD_POLICY.replace("rollout:", "rolout:"), "rolout"),
    ("SLO not a number", _GOOD_POLICY + "slo:\n  tpot_seconds: fast\n", "slo.tpot_seconds"),
    ("unknown approval", _GOOD_POLICY + "approval: sometimes\n", "approval"),
)


def operator_cycle(world: SimWorld, body: dict[str, Any], policy_text: str) -> None:
    """One operator cycle from the raw inputs, the way the reactor runs it: the CR (spec and status) and the policy
    are validated first; only when both are valid does a Reconciler act on the world. Raises InvalidInput."""
    from controller.crd.models import parse_tuned_service
    from controller.policy import parse_policy

    _, status = parse_tuned_service(body)
    parse_policy(policy_text, source="policies/small.yaml")
    result = world.reconciler.reconcile(world.target, status)
    world.status = result.status


def run_bad_input_cases(world: SimWorld | None = None) -> list[BadInputCase]:
    """Feed every bad CR and policy to an operator cycle; each must fail with an :class:`InvalidInput` naming the
    field. With ``world``, the CR's status is the world's live status (a rollout in progress), corrupted per case."""
    from controller.errors import InvalidInput

    live = world.status.model_dump(mode="json") if world is not None else _rollout_status()
    out: list[BadInputCase] = []
    cases: list[tuple[str, str, str, dict[str, Any], str]] = []
    for name, path, value, expected in CR_CASES:
        body = _example_cr()
        body["status"] = json.loads(json.dumps(live))
        _set_path(body, path, value)
        cases.append((name, "cr", expected, body, _GOOD_POLICY))
    for name, text, expected in POLICY_CASES:
        body = _example_cr()
        body["status"] = json.loads(json.dumps(live))
        cases.append((name, "policy", expected, body, text))
    for name, kind, expected, body, text in cases:
        try:
            if world is not None:
                operator_cycle(world, body, text)
            else:
                from controller.crd.models import parse_tuned_service
                from controller.policy import parse_policy

                parse_tuned_service(body)
                parse_policy(text, source="policies/small.yaml")
        except InvalidInput as exc:
            out.append(BadInputCase(name, kind, expected, str(exc), exc.field, exc.source))
        else:
            out.append(BadInputCase(name, kind, expected, "accepted", "", ""))
    return out


def scenario_bad_inputs() -> Outcome:
    """Bad CRs and policies arrive while a rollout is at 25 %: one clear error naming the field, and the world (route,
    Deployments, status) is exactly as it was."""
    world = SimWorld()
    world.run(30, until=lambda w: w.status.rollout is not None and w.status.rollout.weight == 25)
    before = (world.fleet.candidate_weight, len(world.sim_cluster.calls), len(world.sim_router.history), world.status)
    cases = run_bad_input_cases(world)
    after = (world.fleet.candidate_weight, len(world.sim_cluster.calls), len(world.sim_router.history), world.status)
    named = sum(1 for c in cases if c.named_field)
    untouched = before == after
    return Outcome(
        scenario="bad CRs and policies",
        fault=f"{len(cases)} malformed TunedService specs, statuses and policy files during a rollout at 25%",
        outcome=f"{named}/{len(cases)} rejected with an error naming the source and field",
        exposure="none: " + ("route, Deployments and status untouched" if untouched else "THE WORLD CHANGED"),
        recovery="fix the input",
        lost="nothing (no half-applied status or route)",
        data={"cases": cases, "untouched": untouched, "world": world},
    )
