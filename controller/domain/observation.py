"""What the observe layer hands to the decide layer: immutable snapshots of production."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from controller.domain.traffic import TrafficShape


@dataclass(frozen=True)
class TargetRef:
    """Which production model a snapshot or action is about."""

    namespace: str
    name: str
    model: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class VariantStats(BaseModel):
    """Production SLO signals of one variant (``stable`` or ``candidate``) over a window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: str
    requests: int = Field(ge=0, description="requests finished in the window")
    errors: int = Field(default=0, ge=0)
    ttft_p95_s: float | None = Field(default=None, ge=0)
    tpot_p95_s: float | None = Field(default=None, ge=0)
    output_tokens_per_s: float = Field(default=0.0, ge=0)
    good_requests: int | None = Field(default=None, ge=0, description="requests that met the SLO, when known")
    spec_acceptance_rate: float | None = Field(default=None, ge=0, le=1)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


class Observation(BaseModel):
    """One observe cycle's view of a target: its traffic shape and per-variant SLO signals."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    start: datetime
    end: datetime
    shape: TrafficShape
    variants: dict[str, VariantStats] = Field(default_factory=dict)
