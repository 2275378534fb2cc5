"""Reading TunedServices and writing their status: one guarded status write per cycle.

The status write is a JSON patch on the ``status`` subresource that starts with a ``test`` of the
resourceVersion the cycle started from. If someone wrote in between (``shiftctl approve``/``pause``/``abort``, a
spec edit), the API answers 422 (or 409); the writer re-reads, carries the user's changes into the operator's new
status (:func:`merge_user_changes`), and writes again. So nothing is lost on either side, and the operator never
re-runs a cycle's actions to resolve a conflict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.crd import models as crd
from controller.domain.codes import Code, camel_case
from controller.domain.log_tail import bounded_log_tails
from controller.domain.phases import Phase
from controller.domain.status import TargetStatus
from controller.domain.text import block
from controller.errors import ClusterConflict

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

    ``reason`` is the condition's and the Event's reason: a code in CamelCase (``InvalidSpec``, ``InvalidPolicy``,
    ``SimulatorUnknownGpu``: :func:`~controller.domain.codes.camel_case`); ``message`` names the source and the
    field."""

    reason: str
    message: str


def refusal_conditions(refusal: Refusal, *, generation: int | None, now: datetime) -> list[crd.Condition]:
    """``Ready=False`` and ``Accepted=False`` with the refusal's reason and message."""
    return [
        crd.Condition(
            type=kind,
            status="False",
            reason=refusal.reason,
            message=block(refusal.message)[:32768],  # a refusal may quote a tenant's text
            last_transition_time=now,
            observed_generation=generation,
        )
        for kind in ("Ready", "Accepted")
    ]


def ready_reason(status: TargetStatus) -> str:
    """The ``Ready`` condition's reason: the last code the last cycle gave, in CamelCase (``slo-breach`` ->
    ``SloBreach``); the phase (``Observing``) while no reason stored has a code (before the first cycle)."""
    code = next((r.code for r in reversed(status.last_reasons) if r.code is not None), None)
    return camel_case(code) if code is not None else status.phase.value


def conditions_for(status: TargetStatus, *, generation: int | None, now: datetime) -> list[crd.Condition]:
    """``Ready`` (false while frozen; reason: :func:`ready_reason`), ``AwaitingApproval`` and ``Accepted``, each
    reason a code in CamelCase."""
    ready = status.phase is not Phase.FROZEN
    reason = status.frozen_reason or (status.last_reasons[-1].message if status.last_reasons else "")
    waiting = status.phase is Phase.AWAITING_APPROVAL
    out = [
        crd.Condition(
            type="Ready",
            status="True" if ready else "False",
            reason=ready_reason(status),
            message=block(reason)[:32768],
            last_transition_time=now,
            observed_generation=generation,
        )
    ]
    out.append(
        crd.Condition(
            type="AwaitingApproval",
            status="True" if waiting else "False",
            reason=camel_case(Code.APPROVAL_REQUIRED if waiting else Code.NO_APPROVAL_PENDING),
            message=f"shiftctl approve {status.rollout.id}" if waiting and status.rollout else "",
            last_transition_time=now,
            observed_generation=generation,
        )
    )
    out.append(
        crd.Condition(
            type="Accepted",
            status="True",
            reason=camel_case(Code.VALID),
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
            if isinstance(stored, Mapping) and stored.get("trialCache") is not None:
                wire["trialCache"] = stored["trialCache"]  # the trial cache's sequence, written by its store only
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


__all__ = [
    "Refusal",
    "StatusStore",
    "conditions_for",
    "kept_transitions",
    "merge_user_changes",
    "ready_reason",
    "refusal_conditions",
    "status_patch",
    "stored_conditions",
]
