"""Traffic shape: what production asks of a model in one time window."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LengthDistribution(BaseModel):
    """Token-length distribution of prompts or outputs.

    Modelled as a log-normal with the given mean and coefficient of variation (cv = std / mean);
    ``cv == 0`` means every request has exactly ``mean`` tokens. ``maximum`` caps samples.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float = Field(gt=0, le=1_000_000, description="mean tokens per request")
    cv: float = Field(default=0.0, ge=0, le=10, description="coefficient of variation (std / mean)")
    maximum: int | None = Field(default=None, gt=0, description="hard cap on sampled lengths")

    @model_validator(mode="after")
    def _cap_above_mean(self) -> LengthDistribution:
        if self.maximum is not None and self.maximum < self.mean:
            raise ValueError(f"maximum ({self.maximum}) must be >= mean ({self.mean})")
        return self

    def lognormal_params(self) -> tuple[float, float]:
        """(mu, sigma) of the underlying normal for this mean and cv."""
        sigma2 = math.log1p(self.cv**2)
        return math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2)

    def second_moment(self) -> float:
        """E[L^2], used by queueing and KV-occupancy estimates."""
        return self.mean**2 * (1 + self.cv**2)


class TimeWindow(BaseModel):
    """A named half-open interval of the day in hours [start_hour, end_hour); may wrap midnight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=63)
    start_hour: float = Field(ge=0, lt=24)
    end_hour: float = Field(gt=0, le=24)

    def contains(self, hour: float) -> bool:
        if self.start_hour < self.end_hour:
            return self.start_hour <= hour < self.end_hour
        return hour >= self.start_hour or hour < self.end_hour

    @property
    def hours(self) -> float:
        span = self.end_hour - self.start_hour
        return span if span > 0 else span + 24


class TrafficShape(BaseModel):
    """Arrival rate, concurrency and length mix observed (or forecast) for one window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arrival_rate_rps: float = Field(ge=0, le=1e6, description="request arrivals per second")
    concurrency: float = Field(ge=0, le=1e6, description="mean requests in flight (Little's law)")
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution
    repetitiveness: float = Field(
        default=0.0, ge=0, le=1, description="share of output that copies the context (lookup drafters)"
    )
    prefix_share: float = Field(default=0.0, ge=0, le=1, description="share of prompt tokens in shared prefixes")
    window: TimeWindow | None = None

    def bucket(self) -> str:
        """A coarse, stable key for caching trial results of 'the same' shape."""

        def log2_bucket(x: float) -> int:
            return round(math.log2(max(x, 1.0)))

        return (
            f"c{log2_bucket(self.concurrency)}-p{log2_bucket(self.prompt_tokens.mean)}"
            f"-o{log2_bucket(self.output_tokens.mean)}-r{round(self.repetitiveness * 4)}"
        )

    def closed_loop_streams(self) -> int:
        """Whole streams a closed-loop replay keeps in flight for this shape: its concurrency rounded up, at least
        one (``vllm bench serve --max-concurrency``, the trial runner's plan and the simulated trials alike)."""
        return max(1, math.ceil(self.concurrency))

    def describe(self) -> str:
        return (
            f"{self.arrival_rate_rps:.2f} req/s, {self.concurrency:.0f} concurrent, "
            f"{self.prompt_tokens.mean:.0f} in / {self.output_tokens.mean:.0f} out tokens"
            + (f", {self.repetitiveness:.0%} repetitive" if self.repetitiveness else "")
        )
