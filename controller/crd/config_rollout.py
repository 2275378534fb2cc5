"""The ConfigRollout custom resource: a move of one TunedService from one config to another in weighted steps, and
its status (phase, step, weight, analyses, approvals, history)."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator

from controller.crd.shared import DNS_SUBDOMAIN, Condition, WireModel
from controller.domain.config import EngineConfig
from controller.domain.rollout import AnalysisRecord, Approval

RolloutPhase = Literal["Pending", "Progressing", "AwaitingApproval", "Paused", "Succeeded", "RolledBack", "Rejected"]


class ConfigRolloutSpec(WireModel):
    """A move of one TunedService from config A to config B in weighted steps."""

    target: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="TunedService name")
    rollout_id: str = Field(min_length=1, max_length=253)
    from_config: EngineConfig
    to_config: EngineConfig
    steps: tuple[int, ...] = Field(
        min_length=1, max_length=100, description="candidate weights in percent, rising, ending at 100"
    )
    reason: str = Field(default="", max_length=4096)
    proposed_by: str = Field(default="optimizer", max_length=253)
    expected_gain: float | None = Field(default=None, ge=0)

    @field_validator("steps")
    @classmethod
    def _rising_to_100(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 0 < w <= 100 for w in value):
            raise ValueError("every step weight must be in 1..100")
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError(f"step weights must rise strictly, got {list(value)}")
        if value[-1] != 100:
            raise ValueError(f"the last step weight must be 100, got {value[-1]}")
        return value


class RolloutHistoryEntry(WireModel):
    at: datetime
    step: int = Field(ge=0)
    weight: int = Field(ge=0, le=100)
    event: str = Field(min_length=1, max_length=64, description="e.g. StepReached, Approved, RolledBack")
    reason: str = ""


class ConfigRolloutStatus(WireModel):
    phase: RolloutPhase = "Pending"
    from_label: str = ""
    to_label: str = ""
    step_index: int = Field(default=0, ge=0)
    weight: int = Field(default=0, ge=0, le=100)
    started_at: datetime | None = None
    step_started_at: datetime | None = None
    finished_at: datetime | None = None
    analyses: tuple[AnalysisRecord, ...] = Field(default=(), description="analysis per step (domain field names)")
    approvals: tuple[Approval, ...] = Field(default=(), description="who approved/rejected when (domain field names)")
    history: tuple[RolloutHistoryEntry, ...] = ()
    message: str = ""
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, ge=0)
