"""The full result of one observe cycle: the traffic shape plus every serving signal read alongside it.

:class:`TrafficReport` is richer than the domain's :class:`~controller.domain.observation.Observation` (which it can
produce): quantiles of TTFT/TPOT, speculative-decoding acceptance, prefix-cache hits, preemptions, KV usage and how
the concurrency estimate was cross-checked.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from controller.domain.observation import Observation, VariantStats
from controller.domain.traffic import TrafficShape


class LengthStats(BaseModel):
    """A prompt- or output-length distribution as read from a coarse histogram."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float = Field(gt=0, description="exact: _sum / _count")
    cv: float = Field(ge=0, description="log-normal fit to the buckets (coarse, see docs/observe.md)")
    p50: float = Field(ge=0, description="linear interpolation inside a 1-2-5 bucket: coarse")
    p90: float = Field(ge=0)
    p99: float = Field(ge=0)


class Quantiles(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float | None = Field(default=None, ge=0)
    p95: float | None = Field(default=None, ge=0)
    p99: float | None = Field(default=None, ge=0)


class ServingSignals(BaseModel):
    """Target-wide serving signals over the window. ``None`` means "not exported / no data" (e.g. no speculation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: float = Field(ge=0, description="requests finished in the window (extrapolated by increase())")
    ttft_s: Quantiles
    tpot_s: Quantiles
    output_tokens_per_s: float | None = Field(default=None, ge=0)
    spec_drafts: float | None = Field(default=None, ge=0)
    spec_acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    spec_mean_acceptance_length: float | None = Field(default=None, ge=1)
    spec_acceptance_per_position: tuple[float, ...] = ()
    prefix_cache_hit_rate: float | None = Field(default=None, ge=0, le=1)
    preemptions: float | None = Field(default=None, ge=0)
    kv_usage_mean: float | None = Field(default=None, ge=0)
    kv_usage_max: float | None = Field(default=None, ge=0)
    concurrency_littles_law: float = Field(ge=0, description="sum(rate(e2e_latency_sum))")
    running_mean: float = Field(ge=0)
    waiting_mean: float = Field(ge=0)


class VariantReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    stats: VariantStats
    ttft_s: Quantiles
    tpot_s: Quantiles


class TrafficReport(BaseModel):
    """One observe cycle of one target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    start: datetime
    end: datetime
    shape: TrafficShape
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    signals: ServingSignals
    variants: dict[str, VariantReport] = Field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    queries: int = Field(ge=0, description="HTTP queries this cycle cost")

    def observation(self) -> Observation:
        return Observation(
            target=self.target,
            start=self.start,
            end=self.end,
            shape=self.shape,
            variants={name: v.stats for name, v in self.variants.items()},
        )
