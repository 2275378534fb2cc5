"""A rollout's persisted record: the move from one config to another in weighted steps, the human decisions on
it and each step's analysis. It lives in the CR status (:class:`controller.domain.status.TargetStatus`), so a
restarted operator resumes mid-rollout with its approvals intact."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from controller.domain.config import EngineConfig

AnalysisOutcome = Literal["Successful", "Failed", "Inconclusive"]


class Approval(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    by: str = Field(min_length=1)
    at: datetime
    step: int = Field(ge=0)
    decision: Literal["approved", "rejected"]
    comment: str = ""
    rollout_id: str = Field(default="", description="the rollout the decision is for (status.rollout.id)")
    config_key: str = Field(default="", description="the key of the rollout's to_config the decision is for")


class AnalysisRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int = Field(ge=0)
    weight: int = Field(ge=0, le=100)
    at: datetime
    outcome: AnalysisOutcome
    reason: str


class RolloutState(BaseModel):
    """A move from one config to another in weighted steps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    from_config: EngineConfig
    to_config: EngineConfig
    steps: tuple[int, ...] = Field(min_length=1, description="candidate weights in percent, ending at 100")
    step_index: int = Field(default=0, ge=0)
    weight: int = Field(default=0, ge=0, le=100)
    started_at: datetime
    step_started_at: datetime | None = None
    reason: str = ""
    proposed_by: str = "optimizer"
    expected_gain: float | None = None
    expected_ttft_ratio: float | None = Field(
        default=None, gt=0, description="candidate/stable p95 TTFT the canary trials measured (the accepted trade-off)"
    )
    expected_tpot_ratio: float | None = Field(default=None, gt=0)
    latency_vs_stable: bool = Field(
        default=True,
        description="whether the candidate's latency is judged against stable's as well as against the SLO; false "
        "when the canary measured stable outside the SLO on the traffic the candidate met it on (stable's latency "
        "on its production replicas is then no bar)",
    )
    approvals: tuple[Approval, ...] = ()
    analyses: tuple[AnalysisRecord, ...] = ()
    paused: bool = False
    abort_requested: bool = False
    abort_reason: str = ""
    window: str | None = Field(
        default=None, description="the time-of-day window the rollout moves to its config (the one pre-warmed for)"
    )
    bake_s: float | None = Field(
        default=None,
        gt=0,
        description="each step's bake in seconds when not the policy's: a pre-validated swap's shorter bake",
    )
    surge_replicas: int | None = Field(
        default=None,
        ge=1,
        description="a pre-validated swap's candidate replicas, sized for the coming window's forecast and deployed "
        "at once instead of a share of the fleet per step",
    )

    def binds(self, approval: Approval) -> bool:
        """Whether ``approval`` is a decision on this rollout: one that names another rollout or another
        ``to_config`` than this one's is ignored (empty: recorded before decisions named them)."""
        return approval.rollout_id in ("", self.id) and approval.config_key in ("", self.to_config.key())

    def approved_step(self, step: int) -> bool:
        return any(a.step == step and a.decision == "approved" and self.binds(a) for a in self.approvals)

    def rejected(self) -> bool:
        return any(a.decision == "rejected" and self.binds(a) for a in self.approvals)
