"""The Trial custom resource: one canary measurement of a config under a traffic shape, its budget, and its status
(phase, progress, pod, times and the measured result)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from controller.crd.shared import DNS_SUBDOMAIN, Condition, WireModel
from controller.domain import trial_defaults
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult


class TrialBudgetSpec(WireModel):
    """How much canary time one trial may use (mirrors ``controller.ports.TrialBudget``)."""

    duration_seconds: float = Field(default=trial_defaults.DURATION_S, gt=0, le=86400)
    warmup_seconds: float = Field(default=trial_defaults.WARMUP_S, ge=0, le=3600)
    max_requests: int = Field(default=trial_defaults.MAX_REQUESTS, ge=1, le=10_000_000)
    startup_timeout_seconds: float = Field(default=trial_defaults.STARTUP_TIMEOUT_S, gt=0, le=86400)


TrialPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class TrialSpec(WireModel):
    """One canary measurement of ``config`` under ``shape`` for a TunedService."""

    target: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="TunedService name")
    config: EngineConfig
    shape: TrafficShape
    slo: SLO = Field(default_factory=SLO)
    budget: TrialBudgetSpec = Field(default_factory=TrialBudgetSpec)
    seed: int = Field(default=0, ge=0)
    reason: str = Field(default="", max_length=4096)
    proposed_by: str = Field(default="optimizer", max_length=253)


class TrialProgress(WireModel):
    """How far a running trial is: its stage, requests done of planned, time since it started, live throughput."""

    stage: str = Field(default="", max_length=32, description="launch, warmup, replay, quality, teardown or done")
    requests_done: int = Field(default=0, ge=0)
    requests_planned: int = Field(default=0, ge=0)
    elapsed_seconds: float = Field(default=0.0, ge=0)
    output_tokens_per_s: float | None = Field(
        default=None, ge=0, description="output tokens per second of the replay so far (absent before it starts)"
    )
    updated_at: datetime | None = None


#: The Trial CR's status: its phase, progress, pod, times and the measured result (not
#: :class:`controller.domain.trial.TrialStatus`, what became of one measurement). No docstring: it would become the
#: CRD schema's description.
class TrialCRStatus(WireModel):
    phase: TrialPhase = "Pending"
    config_label: str = ""
    progress: TrialProgress | None = None
    pod_name: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""
    result: TrialResult | None = Field(default=None, description="the measurement (domain field names)")
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, ge=0)
