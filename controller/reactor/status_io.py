"""Reading TunedServices and writing their status: one guarded status write per cycle, CR mirrors of trials and
rollouts.

The status write is a JSON patch on the ``status`` subresource that starts with a ``test`` of the
resourceVersion the cycle started from. If someone wrote in between (``shiftctl approve``/``pause``/``abort``, a
spec edit), the API answers 422 (or 409); the writer re-reads, carries the user's changes into the operator's new
status (:func:`merge_user_changes`), and writes again. So nothing is lost on either side, and the operator never
re-runs a cycle's actions to resolve a conflict.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client

from controller.adapters.kube import kube_errors
from controller.crd import models as crd
from controller.domain.config import EngineConfig
from controller.domain.log_tail import bounded_log_tails, clip_utf8
from controller.domain.phases import Phase
from controller.domain.status import RolloutState, TargetStatus
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import ClusterConflict, NotFound

log = logging.getLogger(__name__)

JSON = dict[str, Any]

#: RolloutState fields that users write (through shiftctl) and the operator only reads.
USER_ROLLOUT_FIELDS = ("paused", "abort_requested", "abort_reason")


def merge_user_changes(*, base: TargetStatus, ours: TargetStatus, fresh: TargetStatus) -> TargetStatus:
    """Carry what users changed between ``base`` (what this cycle read) and ``fresh`` (what is stored now) into
    ``ours`` (what this cycle computed).

    Users only write the rollout's approvals and its paused/abort flags. New approvals are appended (once);
    a flag the user changed takes the user's value. Everything else is the operator's.
    """
    if ours.rollout is None or fresh.rollout is None or ours.rollout.id != fresh.rollout.id:
        return ours
    base_rollout = base.rollout if base.rollout is not None and base.rollout.id == fresh.rollout.id else None
    seen = set(base_rollout.approvals) if base_rollout is not None else set()
    update: dict[str, object] = {}
    added = tuple(a for a in fresh.rollout.approvals if a not in seen and a not in ours.rollout.approvals)
    if added:
        update["approvals"] = (*ours.rollout.approvals, *added)
    for name in USER_ROLLOUT_FIELDS:
        theirs = getattr(fresh.rollout, name)
        if base_rollout is None or theirs != getattr(base_rollout, name):
            update[name] = theirs
    if not update:
        return ours
    return ours.model_copy(update={"rollout": ours.rollout.model_copy(update=update)})


def status_patch(resource_version: str, wire_status: Mapping[str, Any]) -> list[JSON]:
    """The guarded JSON patch: ``test`` the resourceVersion, then set the whole status."""
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "add", "path": "/status", "value": dict(wire_status)},
    ]


@dataclass(frozen=True)
class Refusal:
    """Why the operator refused a TunedService this cycle: its spec or its policy failed validation.

    ``reason`` is the condition's and the Event's reason code (``InvalidSpec``, ``InvalidPolicy``); ``message``
    names the source and the field."""

    reason: str
    message: str


def refusal_conditions(refusal: Refusal, *, generation: int | None, now: datetime) -> list[crd.Condition]:
    """``Ready=False`` and ``Accepted=False`` with the refusal's reason and message."""
    return [
        crd.Condition(
            type=kind,
            status="False",
            reason=refusal.reason,
            message=refusal.message[:32768],
            last_transition_time=now,
            observed_generation=generation,
        )
        for kind in ("Ready", "Accepted")
    ]


def conditions_for(status: TargetStatus, *, generation: int | None, now: datetime) -> list[crd.Condition]:
    ready = status.phase is not Phase.FROZEN
    reason = status.frozen_reason or (status.last_reasons[-1] if status.last_reasons else "")
    out = [
        crd.Condition(
            type="Ready",
            status="True" if ready else "False",
            reason=status.phase.value,
            message=reason[:32768],
            last_transition_time=now,
            observed_generation=generation,
        )
    ]
    waiting = status.phase is Phase.AWAITING_APPROVAL
    out.append(
        crd.Condition(
            type="AwaitingApproval",
            status="True" if waiting else "False",
            reason="ApprovalRequested" if waiting else "NoApprovalPending",
            message=f"shiftctl approve {status.rollout.id}" if waiting and status.rollout else "",
            last_transition_time=now,
            observed_generation=generation,
        )
    )
    out.append(
        crd.Condition(
            type="Accepted",
            status="True",
            reason="Valid",
            message="the spec and its policy passed validation",
            last_transition_time=now,
            observed_generation=generation,
        )
    )
    return out


def stored_conditions(stored: object) -> dict[str, crd.Condition]:
    """The conditions of a stored status by type (any that does not parse is left out: it is rewritten)."""
    raw = stored.get("conditions") if isinstance(stored, Mapping) else None
    out: dict[str, crd.Condition] = {}
    for item in raw if isinstance(raw, list) else []:
        try:
            condition = crd.Condition.model_validate(item)
        except ValueError:
            continue
        out[condition.type] = condition
    return out


def kept_transitions(conditions: Sequence[crd.Condition], previous: Mapping[str, crd.Condition]) -> list[crd.Condition]:
    """``conditions`` with each one's ``lastTransitionTime`` as stored unless its status flipped (``metav1.Condition``:
    the time moves only when the status changes, so ``kubectl wait`` and alerts see real transitions only)."""
    out: list[crd.Condition] = []
    for condition in conditions:
        old = previous.get(condition.type)
        if old is not None and old.status == condition.status and old.last_transition_time is not None:
            condition = condition.model_copy(update={"last_transition_time": old.last_transition_time})
        out.append(condition)
    return out


def unchanged(stored: object, conditions: Sequence[crd.Condition], generation: int | None) -> bool:
    """Whether the stored status already carries ``conditions`` and ``generation`` as its observedGeneration."""
    if not isinstance(stored, Mapping) or stored.get("observedGeneration") != generation:
        return False
    return list(stored_conditions(stored).values()) == list(conditions)


class StatusStore:
    """TunedService reads and guarded status writes through the official client."""

    def __init__(self, api: client.ApiClient, *, retries: int = 5) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.retries = retries
        self.conflicts = 0
        self.writes = 0
        """Status writes made."""
        self.skipped = 0
        """Cycles whose status (conditions included) was already as stored: nothing written."""

    def read(self, namespace: str, name: str) -> JSON:
        with kube_errors(f"tunedservice {namespace}/{name}"):
            body: JSON = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                crd.GROUP, crd.VERSION, namespace, crd.PLURAL_TUNED_SERVICE, name
            )
        return body

    def write_refusal(self, body: Mapping[str, Any], refusal: Refusal, *, now: datetime) -> JSON:
        """Record a refusal in the status conditions only: everything else already stored (the active config, an
        approval, a rollout in flight) stays as it is, guarded by the resourceVersion like every status write."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        generation = meta.get("generation")
        stored = body.get("status")
        kept = kept_transitions(refusal_conditions(refusal, generation=generation, now=now), stored_conditions(stored))
        if isinstance(stored, Mapping) and list(stored_conditions(stored).values()) == kept:
            self.skipped += 1
            return dict(body)  # refused for the same reason as last cycle: nothing to write
        conditions = [c.to_wire() for c in kept]
        if isinstance(stored, Mapping):
            patch: list[JSON] = [{"op": "add", "path": "/status/conditions", "value": conditions}]
        else:
            patch = [{"op": "add", "path": "/status", "value": {"conditions": conditions}}]
        guarded = [{"op": "test", "path": "/metadata/resourceVersion", "value": str(meta["resourceVersion"])}, *patch]
        return self._patch_status(namespace, name, guarded)

    def _patch_status(self, namespace: str, name: str, patch: list[JSON]) -> JSON:
        with kube_errors(f"status of {namespace}/{name}"):
            written: JSON = self.custom.patch_namespaced_custom_object_status(  # type: ignore[assignment]
                crd.GROUP,
                crd.VERSION,
                namespace,
                crd.PLURAL_TUNED_SERVICE,
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        self.writes += 1
        return written

    def write(self, body: Mapping[str, Any], base: TargetStatus, ours: TargetStatus, *, now: datetime) -> JSON:
        """Write ``ours`` as the status of the object read as ``body`` (whose status was ``base``).

        Nothing is written when ``ours`` is ``base`` and the conditions and observedGeneration are as stored (an
        idle cycle): ``body`` is returned as it is. Each condition keeps its stored ``lastTransitionTime`` unless its
        status flips."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        rv = str(meta["resourceVersion"])
        generation = meta.get("generation")
        stored = body.get("status")
        for attempt in range(self.retries):
            previous = stored_conditions(stored)
            conditions = kept_transitions(conditions_for(ours, generation=generation, now=now), previous)
            if ours == base and unchanged(stored, conditions, generation):
                self.skipped += 1
                return dict(body)
            wire = bounded_log_tails(  # every trial's engine log tail, bounded in lines and bytes
                crd.status_to_wire(ours, conditions=conditions, observed_generation=generation)
            )
            try:
                return self._patch_status(namespace, name, status_patch(rv, wire))
            except ClusterConflict:
                if attempt == self.retries - 1:
                    raise
                self.conflicts += 1
                fresh_body = self.read(namespace, name)
                _, fresh = crd.parse_tuned_service(fresh_body)
                ours = merge_user_changes(base=base, ours=ours, fresh=fresh)
                base = fresh
                stored = fresh_body.get("status")
                rv = str(fresh_body["metadata"]["resourceVersion"])
                generation = fresh_body["metadata"].get("generation")
                log.info("%s/%s: status changed meanwhile (a user write); merged and retrying", namespace, name)
        raise AssertionError("unreachable")


# ----- Trial and ConfigRollout mirrors -----------------------------------------------------------------


def _dns(value: str, limit: int = 63) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")
    return cleaned[:limit].strip("-") or "x"


def trial_name_for(service: str, config: EngineConfig, shape: TrafficShape) -> str:
    """The Trial CR of ``config`` under ``shape`` (its bucket): the same name when the trial starts and ends."""
    digest = hashlib.sha256(f"{config.key()}:{shape.bucket()}".encode()).hexdigest()[:10]
    return _dns(f"{service}-trial-{digest}")


def trial_name(service: str, result: TrialResult) -> str:
    return trial_name_for(service, result.config, result.shape)


def rollout_name(service: str, rollout_id: str) -> str:
    return _dns(f"{service}-{rollout_id}", 253)


def owner_references(body: Mapping[str, Any]) -> list[JSON]:
    meta = body["metadata"]
    return [
        {
            "apiVersion": crd.API_VERSION,
            "kind": crd.KIND_TUNED_SERVICE,
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def trial_phase(result: TrialResult) -> crd.TrialPhase:
    return "Succeeded" if result.status in (TrialStatus.MEASURED, TrialStatus.REJECTED) else "Failed"


def rollout_outcome(before: RolloutState, after: TargetStatus) -> str:
    """``promoted``, ``rejected`` or ``rolled_back`` for a rollout that just ended."""
    if after.active_config == before.to_config:
        return "promoted"
    if before.rejected() and before.weight == 0:
        return "rejected"
    return "rolled_back"


def rollout_ended(before: TargetStatus, after: TargetStatus) -> RolloutState | None:
    """The rollout that ended in this cycle (promoted, rejected or rolled back), if any."""
    old = before.rollout
    if old is None or before.phase is Phase.OBSERVING:
        return None  # nothing was in flight (a finished rollout's record stays in status at 100%)
    if after.phase in (Phase.OBSERVING, Phase.ROLLED_BACK) and (after.rollout is None or after.rollout.id == old.id):
        return old
    return None


#: Trial CRs and ConfigRollout CRs remembered per TunedService (the most recent ones; an older one forgotten is
#: at most looked up once more, and a finished Trial or rollout is never written again).
MIRRORED_TRIALS = 256
MIRRORED_ROLLOUTS = 8


class CRMirror:
    """Creates a Trial CR per trial and a ConfigRollout CR per rollout, and keeps their status current.

    What it remembers is per TunedService and bounded (:data:`MIRRORED_TRIALS`, :data:`MIRRORED_ROLLOUTS`), and
    :meth:`forget` drops a deleted TunedService's."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self._trials: dict[tuple[str, str], OrderedDict[str, None]] = {}
        self._rollouts: dict[tuple[str, str], OrderedDict[str, JSON]] = {}

    def forget(self, namespace: str, service: str) -> None:
        self._trials.pop((namespace, service), None)
        self._rollouts.pop((namespace, service), None)

    def held(self) -> set[tuple[str, str]]:
        """The TunedServices (namespace, name) whose Trials or rollouts are remembered."""
        return set(self._trials) | set(self._rollouts)

    def _create(self, namespace: str, plural: str, body: JSON) -> bool:
        try:
            with kube_errors(f"{plural} {namespace}/{body['metadata']['name']}"):
                self.custom.create_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, plural, body)
            return True
        except ClusterConflict:
            return False  # already there (e.g. mirrored before a restart)

    def _status(self, namespace: str, plural: str, name: str, status: JSON) -> None:
        with kube_errors(f"{plural} {namespace}/{name} status"):
            self.custom.patch_namespaced_custom_object_status(
                crd.GROUP, crd.VERSION, namespace, plural, name, {"status": bounded_log_tails(status)}
            )

    def trials(self, owner: Mapping[str, Any], results: Sequence[TrialResult], reasons: Mapping[str, str]) -> None:
        namespace, service = owner["metadata"]["namespace"], owner["metadata"]["name"]
        for result in results:
            name = trial_name(service, result)
            seen = self._trials.setdefault((namespace, service), OrderedDict())
            if name in seen:
                seen.move_to_end(name)
                continue
            spec = crd.TrialSpec(
                target=service,
                config=result.config,
                shape=result.shape,
                slo=result.slo,
                reason=reasons.get(result.config.key(), "")[:4096],
            )
            body = {
                "apiVersion": crd.API_VERSION,
                "kind": crd.KIND_TRIAL,
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"shiftlight.dev/tuned-service": service},
                    "ownerReferences": owner_references(owner),
                },
                "spec": spec.to_wire(),
            }
            if self._create(namespace, crd.PLURAL_TRIAL, body) or not self._finished(namespace, name):
                # new, or created when the trial started and not finished yet (its final write failed, or the
                # operator restarted mid-trial): the result goes in once; a finished Trial is left as it is
                status = crd.TrialStatus(
                    phase=trial_phase(result),
                    config_label=result.config.label(),
                    message=clip_utf8(result.reason or result.summary(), 4096),
                    result=result,
                )
                self._status(namespace, crd.PLURAL_TRIAL, name, status.to_wire())
            seen[name] = None
            while len(seen) > MIRRORED_TRIALS:
                seen.popitem(last=False)

    def _finished(self, namespace: str, name: str) -> bool:
        """Whether the stored Trial already carries its result (Succeeded or Failed)."""
        with kube_errors(f"{crd.PLURAL_TRIAL} {namespace}/{name}"):
            body = self.custom.get_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.PLURAL_TRIAL, name)
        status = body.get("status") if isinstance(body, Mapping) else None
        return (
            isinstance(status, Mapping)
            and status.get("phase") in ("Succeeded", "Failed")
            and bool(status.get("result"))
        )

    def rollout(self, owner: Mapping[str, Any], before: TargetStatus, after: TargetStatus, now: datetime) -> None:
        namespace, service = owner["metadata"]["namespace"], owner["metadata"]["name"]
        ended = rollout_ended(before, after)
        if ended is not None:
            outcome = rollout_outcome(ended, after)
            phase: crd.RolloutPhase = {"promoted": "Succeeded", "rejected": "Rejected"}.get(outcome, "RolledBack")  # type: ignore[assignment]
            final = after.rollout if after.rollout is not None and after.rollout.id == ended.id else ended
            self._upsert(owner, namespace, service, final, phase, now, finished=True)
            return
        state = after.rollout
        if state is None or after.phase is Phase.OBSERVING:
            return
        live: crd.RolloutPhase = {
            Phase.AWAITING_APPROVAL: "AwaitingApproval",
            Phase.PAUSED: "Paused",
            Phase.ROLLED_BACK: "RolledBack",
        }.get(after.phase, "Progressing")  # type: ignore[assignment]
        self._upsert(owner, namespace, service, state, live, now, finished=False)

    def _upsert(
        self,
        owner: Mapping[str, Any],
        namespace: str,
        service: str,
        state: RolloutState,
        phase: crd.RolloutPhase,
        now: datetime,
        *,
        finished: bool,
    ) -> None:
        name = rollout_name(service, state.id)
        spec, status = crd.config_rollout_from_state(state, target=service)
        status = status.model_copy(
            update={
                "phase": phase,
                "finished_at": now if finished else None,
                "message": state.reason[:4096],
            }
        )
        wire = status.to_wire()
        known = self._rollouts.setdefault((namespace, service), OrderedDict())
        if name not in known:
            body = {
                "apiVersion": crd.API_VERSION,
                "kind": crd.KIND_CONFIG_ROLLOUT,
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"shiftlight.dev/tuned-service": service},
                    "ownerReferences": owner_references(owner),
                },
                "spec": spec.to_wire(),
            }
            self._create(namespace, crd.PLURAL_CONFIG_ROLLOUT, body)
        if known.get(name) != wire:
            try:
                self._status(namespace, crd.PLURAL_CONFIG_ROLLOUT, name, wire)
            except NotFound:
                return
            known[name] = wire
            known.move_to_end(name)
            while len(known) > MIRRORED_ROLLOUTS:
                known.popitem(last=False)


__all__ = [
    "CRMirror",
    "Refusal",
    "StatusStore",
    "conditions_for",
    "kept_transitions",
    "merge_user_changes",
    "owner_references",
    "refusal_conditions",
    "rollout_ended",
    "rollout_name",
    "rollout_outcome",
    "status_patch",
    "stored_conditions",
    "trial_name",
    "trial_name_for",
]
