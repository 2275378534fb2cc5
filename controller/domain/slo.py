"""Service-level objectives a config must meet."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SLO(BaseModel):
    """Latency and error objectives. A request is *good* when its TTFT and TPOT are both within bounds.

    The percentile fields say which percentile of the population must meet the bound for the SLO to hold
    (e.g. ``ttft_percentile=95``: p95 TTFT <= ``ttft_seconds``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_seconds: float = Field(default=2.0, gt=0, le=3600)
    ttft_percentile: float = Field(default=95, gt=0, lt=100)
    tpot_seconds: float = Field(default=0.1, gt=0, le=60)
    tpot_percentile: float = Field(default=95, gt=0, lt=100)
    max_error_rate: float = Field(default=0.01, ge=0, le=1)

    def request_is_good(self, *, ttft_s: float, tpot_s: float) -> bool:
        return ttft_s <= self.ttft_seconds and tpot_s <= self.tpot_seconds
