"""Approvals are honoured only from people allowed to approve: a SubjectAccessReview per approver.

``shiftctl approve`` records the approver in ``status.rollout.approvals``. RBAC on ``tunedservices/status`` decides
who can write there at all; on top, the operator asks the API server whether each approver may use the custom
``approve`` verb on ``configrollouts`` in the namespace (the chart's ``shiftlight-approver`` role grants it).
Approvals from anyone else are dropped before the cycle decides, with a Warning Event saying why. Answers are
cached per (namespace, user) for a while; a failed review refuses (fail closed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kubernetes import client

from controller.adapters.kube.client import kube_errors
from controller.domain.rollout import Approval
from controller.domain.status import TargetStatus
from controller.errors import ShiftlightError

log = logging.getLogger(__name__)


class ApprovalGate:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        group: str = "shiftlight.dev",
        resource: str = "configrollouts",
        verb: str = "approve",
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.authz = client.AuthorizationV1Api(api)
        self.group, self.resource, self.verb = group, resource, verb
        self.ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, bool, str]] = {}

    def allowed(self, namespace: str, user: str) -> tuple[bool, str]:
        key = (namespace, user)
        hit = self._cache.get(key)
        if hit is not None and self._clock() - hit[0] < self.ttl_s:
            return hit[1], hit[2]
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=self.verb, group=self.group, resource=self.resource
                ),
            )
        )
        try:
            with kube_errors("subjectaccessreview"):
                answer = self.authz.create_subject_access_review(review)
            ok = bool(answer.status and answer.status.allowed)
            why = (answer.status.reason if answer.status else "") or ("allowed" if ok else "not allowed")
        except ShiftlightError as exc:
            ok, why = False, f"could not check ({exc})"
        self._cache[key] = (self._clock(), ok, why)
        return ok, why

    def screen(self, namespace: str, status: TargetStatus) -> tuple[TargetStatus, list[tuple[Approval, str]]]:
        """``status`` without approvals from people who may not approve, and the refused ones with why."""
        rollout = status.rollout
        if rollout is None or not rollout.approvals:
            return status, []
        kept: list[Approval] = []
        refused: list[tuple[Approval, str]] = []
        for approval in rollout.approvals:
            ok, why = self.allowed(namespace, approval.by)
            if ok:
                kept.append(approval)
            else:
                refused.append((approval, why))
        if not refused:
            return status, []
        return status.model_copy(update={"rollout": rollout.model_copy(update={"approvals": tuple(kept)})}), refused


__all__ = ["ApprovalGate"]
