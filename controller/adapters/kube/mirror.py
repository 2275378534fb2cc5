"""ConfigRollout CRs that mirror a TunedService's rollouts for people (``kubectl get configrollouts``); this mirror is
their only writer. Trial CRs have their own writer, the trial progress reporter
(:class:`controller.adapters.kube.canary.progress.TrialCRReporter`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.crs import owner_references, rollout_name
from controller.crd import models as crd
from controller.domain.log_tail import bounded_log_tails
from controller.domain.phases import Phase
from controller.domain.rollout import RolloutState
from controller.domain.status import TargetStatus
from controller.errors import ClusterConflict, NotFound

JSON = dict[str, Any]


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


#: ConfigRollout CRs remembered per TunedService (the most recent ones; an older one forgotten is at most looked up
#: once more, and a finished rollout is never written again).
MIRRORED_ROLLOUTS = 8


class CRMirror:
    """Creates a ConfigRollout CR per rollout and keeps its status current.

    What it remembers is per TunedService and bounded (:data:`MIRRORED_ROLLOUTS`), and :meth:`forget` drops a deleted
    TunedService's."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self._rollouts: dict[tuple[str, str], OrderedDict[str, JSON]] = {}

    def forget(self, namespace: str, service: str) -> None:
        self._rollouts.pop((namespace, service), None)

    def held(self) -> set[tuple[str, str]]:
        """The TunedServices (namespace, name) whose rollouts are remembered."""
        return set(self._rollouts)

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


__all__ = ["MIRRORED_ROLLOUTS", "CRMirror", "rollout_ended", "rollout_outcome"]
