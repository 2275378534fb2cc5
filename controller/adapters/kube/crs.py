"""Names and owner references of the CRs Shiftlight writes for a TunedService: Trial and ConfigRollout."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from controller.crd import models as crd
from controller.domain.config import EngineConfig
from controller.domain.evidence import trial_name
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus

JSON = dict[str, Any]


def _dns(value: str, limit: int = 63) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")
    return cleaned[:limit].strip("-") or "x"


def trial_name_for(service: str, config: EngineConfig, shape: TrafficShape) -> str:
    """The Trial CR of ``config`` under ``shape`` (its bucket): the same name when the trial starts and ends, and
    the trial's identifier everywhere it is shown (:func:`controller.domain.evidence.trial_name`)."""
    return trial_name(service, config, shape)


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


__all__ = ["owner_references", "rollout_name", "trial_name_for", "trial_phase"]
