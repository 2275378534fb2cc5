"""What the observe layer hands to the decide layer: immutable snapshots of production."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

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


DataProblemKind = Literal["missing", "nan", "inf", "beyond-top-bucket"]
"""Why a variant's signal carries no usable number: ``missing`` (no series, or no value for this variant), ``nan``
(e.g. a quantile or ratio over zero observations), ``inf`` (an infinite value from anything but a percentile's top
bucket) and ``beyond-top-bucket`` (the percentile lies in the histogram's ``le="+Inf"`` bucket, above its highest
finite bound: larger than any bound the histogram can show; Prometheus answers that highest finite bound for it)."""

VariantSignal = Literal[
    "requests", "errors", "ttft_p95", "tpot_p95", "ttft_slo", "tpot_slo", "output_tokens_per_s", "good_requests"
]
"""``ttft_slo``/``tpot_slo``: the latency at the SLO's own percentile, when that percentile is not 95 (at 95 it is
``ttft_p95``/``tpot_p95``)."""

LatencyMetric = Literal["ttft", "tpot"]
#: The percentile of ``ttft_p95_s``/``tpot_p95_s``.
P95 = 95.0


class DataProblem(BaseModel):
    """One signal of a variant that the metrics source could not give as a finite number."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    signal: VariantSignal
    kind: DataProblemKind

    def describe(self) -> str:
        what = {
            "missing": "missing",
            "nan": "NaN",
            "inf": "infinite",
            "beyond-top-bucket": "beyond the histogram's top bucket",
        }[self.kind]
        if self.signal in ("ttft_slo", "tpot_slo"):
            return f"{self.signal[:4]} at the SLO percentile {what}"
        return f"{self.signal.replace('_', ' ')} {what}"


class VariantStats(BaseModel):
    """Production SLO signals of one variant (``stable`` or ``candidate``) over a window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: str
    requests: int = Field(ge=0, description="requests finished in the window")
    errors: int = Field(default=0, ge=0)
    ttft_p95_s: float | None = Field(default=None, ge=0)
    tpot_p95_s: float | None = Field(default=None, ge=0)
    ttft_slo_s: float | None = Field(
        default=None, ge=0, description="TTFT at the SLO's percentile ttft_slo_percentile (when that is not 95)"
    )
    ttft_slo_percentile: float | None = Field(default=None, gt=0, lt=100, description="the percentile of ttft_slo_s")
    tpot_slo_s: float | None = Field(
        default=None, ge=0, description="TPOT at the SLO's percentile tpot_slo_percentile (when that is not 95)"
    )
    tpot_slo_percentile: float | None = Field(default=None, gt=0, lt=100, description="the percentile of tpot_slo_s")
    output_tokens_per_s: float = Field(default=0.0, ge=0)
    good_requests: int | None = Field(default=None, ge=0, description="requests that met the SLO, when known")
    spec_acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    problems: tuple[DataProblem, ...] = Field(
        default=(),
        description="signals the source could not give as a finite number; the field itself then holds its "
        "fallback (None for a percentile or good_requests, 0 for a count or rate) and must not be read as data",
    )

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def problem(self, signal: VariantSignal) -> DataProblem | None:
        """The data problem recorded for ``signal``, if any."""
        return next((p for p in self.problems if p.signal == signal), None)

    def at_percentile(self, metric: LatencyMetric, percentile: float) -> tuple[VariantSignal, float | None]:
        """The signal that holds ``metric`` at ``percentile`` and its value: the p95 at 95, else the SLO-percentile
        value when it was read at ``percentile`` (None when it was not: a value at another percentile is no
        answer)."""
        ttft = metric == "ttft"
        if percentile == P95:
            return ("ttft_p95", self.ttft_p95_s) if ttft else ("tpot_p95", self.tpot_p95_s)
        read_at = self.ttft_slo_percentile if ttft else self.tpot_slo_percentile
        value = (self.ttft_slo_s if ttft else self.tpot_slo_s) if read_at == percentile else None
        return ("ttft_slo" if ttft else "tpot_slo", value)


class Observation(BaseModel):
    """One observe cycle's view of a target: its traffic shape and per-variant SLO signals."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    start: datetime
    end: datetime
    shape: TrafficShape
    variants: dict[str, VariantStats] = Field(default_factory=dict)
