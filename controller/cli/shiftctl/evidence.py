"""What ``shiftctl describe`` and ``explain`` show an approver while a rollout waits for approval: the evidence of
:mod:`controller.domain.evidence` (the one the Slack approval request carries), with the lossy rules of the
TunedService's policy.

The lossy rules come from the policy's ConfigMap when the TunedService names one (``spec.policy.configMapRef``);
a preset's are the quality gate's defaults (no shipped preset changes them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from controller.adapters.kube.objects import KubeObjects
from controller.cli.shiftctl.reads import Conn
from controller.cli.shiftctl.render import SafeText, parsed
from controller.domain.evidence import ApprovalEvidence, LossyReasons, approval_evidence
from controller.domain.phases import Phase
from controller.domain.text import one_line as safe
from controller.errors import ShiftlightError
from controller.policy import Policy, parse_policy

JSON = dict[str, Any]


def lossy_rules(conn: Conn | None, body: Mapping[str, Any]) -> tuple[LossyReasons, str]:
    """``(lossy_reasons, where the rules come from)`` for the TunedService ``body``."""
    spec, _status, _error = parsed(body)
    ref = spec.policy.config_map_ref if spec is not None else None
    if conn is not None and ref is not None:
        namespace = str(body.get("metadata", {}).get("namespace") or conn.namespace)
        source = f"configmap {namespace}/{ref.name}:{ref.key}"
        try:
            cm = KubeObjects(conn.api).read_config_map(namespace, ref.name, what=source)
            text = (cm.get("data") or {}).get(ref.key)
            if text is not None:
                return parse_policy(text, source=source).lossy_reasons, f"policy {source}"
        except ShiftlightError as exc:
            return Policy().lossy_reasons, f"the default quality gate ({source} unreadable: {safe(str(exc))})"
    return Policy().lossy_reasons, "the default quality gate"


def evidence_of(body: Mapping[str, Any], lossy: LossyReasons) -> ApprovalEvidence | None:
    """The approver's evidence while ``body`` waits for approval (None otherwise)."""
    _spec, status, _error = parsed(body)
    if status is None or status.phase is not Phase.AWAITING_APPROVAL:
        return None
    return approval_evidence(str(body.get("metadata", {}).get("name", "")), status, lossy_reasons=lossy)


def _block(out: Text, title: str, lines: Sequence[str]) -> None:
    out.append(f"  {title}:\n")
    for line in lines or ("(none)",):
        out.append(f"    {safe(line)}\n")


def evidence_text(evidence: ApprovalEvidence, rules_from: str) -> Text:
    """The evidence as describe/explain show it (flags and codes, one per line)."""
    out = SafeText()
    out.append(
        f"Awaiting approval of {safe(evidence.rollout_id)}: {safe(evidence.active)} -> {safe(evidence.candidate)}\n",
        style="bold",
    )
    out.append(f"  vllm serve flags: {' '.join(safe(a) for a in evidence.serve_flags) or '(vLLM defaults)'}\n")
    _block(out, "diff against the active config", evidence.diff)
    _block(out, f"lossy knobs (rules: {safe(rules_from)})", evidence.lossy)
    detail = f" ({safe(evidence.quality_detail)})" if evidence.quality_detail else ""
    out.append(f"  quality gate: {evidence.quality}{detail}\n")
    _block(out, "trials", [t.line() for t in evidence.trials])
    return out


__all__ = ["evidence_of", "evidence_text", "lossy_rules"]
