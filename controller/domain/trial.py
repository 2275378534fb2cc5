"""What one canary measurement of one config under one traffic shape produced."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from controller.domain.codes import Code, StoredCode, code_or_none
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape


def _known_codes(value: object) -> object:
    """Stored codes with the codes no :class:`Code` spells (written by another version of the operator) left out:
    the trial's reason keeps the sentence they came with."""
    if isinstance(value, list | tuple):
        known = (c if isinstance(c, Code) else code_or_none(c) if isinstance(c, str) else c for c in value)
        return tuple(c for c in known if c is not None)
    return value


class TrialStatus(StrEnum):
    MEASURED = "measured"  # the candidate served the replayed shape and was measured
    INFEASIBLE = "infeasible"  # the engine refused the config, crashed, ran out of memory or never became ready
    FAILED = "failed"  # the measurement itself failed (load generator, metrics); says nothing about the config
    REJECTED = "rejected"  # measured, but the quality gate rejected it
    INVALID = "invalid"  # the load generator did not keep its plan: neither a measurement nor infeasible; never ranked


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float = Field(ge=0)
    p95: float = Field(ge=0)
    p99: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Percentiles:
        if not (self.p50 <= self.p95 * (1 + 1e-9) and self.p95 <= self.p99 * (1 + 1e-9)):
            raise ValueError(f"percentiles must be ordered p50 <= p95 <= p99, got {self.p50}, {self.p95}, {self.p99}")
        return self

    def at(self, percentile: float) -> float:
        """The value at a percentile, interpolating between the stored ones (conservative above p99)."""
        if percentile <= 50:
            return self.p50
        if percentile <= 95:
            return self.p50 + (self.p95 - self.p50) * (percentile - 50) / 45
        if percentile <= 99:
            return self.p95 + (self.p99 - self.p95) * (percentile - 95) / 4
        return self.p99


class SpecDecodeStats(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    acceptance_rate: float = Field(ge=0, le=1, description="accepted / drafted tokens")
    mean_acceptance_length: float = Field(ge=1, description="1 + accepted / drafts (includes the bonus token)")
    per_position: tuple[float, ...] = Field(default=(), description="acceptance rate at each draft position")


class QualityReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    exact_match_rate: float = Field(ge=0, le=1)
    mean_logprob_divergence: float = Field(ge=0)
    prompts: int = Field(ge=1)
    passed: bool
    reason: str = ""


_JUDGED_RATES = (
    "output_tokens_per_s",
    "total_tokens_per_s",
    "request_throughput",
    "goodput_rps",
    "goodput_tokens_per_s",
)


class TrialResult(BaseModel):
    """Measured outcome of one trial. Failed measurements are data, not exceptions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: EngineConfig
    shape: TrafficShape
    slo: SLO
    status: TrialStatus
    reason: str = ""
    invalid_codes: Annotated[tuple[StoredCode, ...], BeforeValidator(_known_codes)] = Field(
        default=(),
        description="an invalid trial's codes: each way the load generator missed its plan (in-flight-low, ...)",
    )
    source: str = Field(default="simulator", description="simulator | local-process | kubernetes")
    duration_s: float = Field(default=0.0, ge=0)
    startup_s: float = Field(default=0.0, ge=0)
    warmup_rounds: int = Field(
        default=0, ge=0, description="warm-up rounds the engine needed to steady (0: no stability rule ran)"
    )
    completed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    output_tokens_per_s: float = Field(default=0.0, ge=0)
    total_tokens_per_s: float = Field(default=0.0, ge=0)
    request_throughput: float = Field(default=0.0, ge=0)
    goodput_rps: float = Field(default=0.0, ge=0, description="requests/s that met the SLO")
    goodput_tokens_per_s: float = Field(default=0.0, ge=0, description="output tokens/s of requests that met the SLO")
    ttft_s: Percentiles | None = None
    tpot_s: Percentiles | None = None
    itl_s: Percentiles | None = None
    e2e_s: Percentiles | None = None
    spec_decode: SpecDecodeStats | None = None
    preemptions: int = Field(default=0, ge=0)
    kv_cache_usage: float | None = Field(default=None, ge=0, le=1)
    quality: QualityReport | None = None
    log_tail: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _measured_has_numbers(self) -> TrialResult:
        if self.status is TrialStatus.MEASURED and (self.ttft_s is None or self.tpot_s is None):
            raise ValueError("a measured trial must carry ttft_s and tpot_s percentiles")
        if self.status is not TrialStatus.MEASURED and self.status is not TrialStatus.REJECTED and not self.reason:
            raise ValueError(f"a {self.status.value} trial must say why (reason)")
        return self

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.MEASURED

    def data_problems(self) -> tuple[str, ...]:
        """The fields a judgement reads that hold no finite number (``ttft_s.p95``, ``goodput_tokens_per_s``...):
        such a result never meets the SLO, never holds a probed capacity and is never ranked."""
        out = [name for name in _JUDGED_RATES if not math.isfinite(getattr(self, name))]
        for name in ("ttft_s", "tpot_s"):
            p: Percentiles | None = getattr(self, name)
            if p is None:
                out.append(name)
                continue
            out.extend(f"{name}.{q}" for q in ("p50", "p95", "p99") if not math.isfinite(getattr(p, q)))
        return tuple(out)

    @property
    def error_rate(self) -> float:
        total = self.completed + self.failed
        return self.failed / total if total else 0.0

    def meets_slo(self) -> bool:
        if not self.ok or self.ttft_s is None or self.tpot_s is None or self.data_problems():
            return False
        return (
            self.ttft_s.at(self.slo.ttft_percentile) <= self.slo.ttft_seconds
            and self.tpot_s.at(self.slo.tpot_percentile) <= self.slo.tpot_seconds
            and self.error_rate <= self.slo.max_error_rate
        )

    def objective(self) -> float:
        """Goodput under the SLO (output tokens/s); zero when the trial did not produce a usable measurement (not
        measured, or a number it is judged by is NaN, infinite or missing)."""
        return self.goodput_tokens_per_s if self.ok and not self.data_problems() else 0.0

    def summary(self) -> str:
        if not self.ok:
            return f"{self.config.label()}: {self.status.value} ({self.reason})"
        assert self.ttft_s is not None and self.tpot_s is not None
        return (
            f"{self.config.label()}: {self.output_tokens_per_s:,.0f} tok/s, "
            f"goodput {self.goodput_tokens_per_s:,.0f} tok/s, "
            f"TTFT p95 {self.ttft_s.p95 * 1000:.0f} ms, TPOT p95 {self.tpot_s.p95 * 1000:.1f} ms"
        )
