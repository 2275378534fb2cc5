"""A small closed-form performance model for the simulated fleet's tests, whose numbers are easy to reason about."""

from __future__ import annotations

from dataclasses import dataclass

from controller.domain import EngineConfig, Percentiles, SpecDecodeStats, TrafficShape


@dataclass(frozen=True)
class ToyEstimate:
    feasible: bool
    reason: str
    output_tokens_per_s: float
    request_throughput: float
    ttft_s: Percentiles | None
    tpot_s: Percentiles | None
    e2e_s: Percentiles | None
    spec: SpecDecodeStats | None


class ToyPerf:
    """Throughput saturates as ``peak * c / (c + 32)``; stock peaks at 8,000 tok/s, speculative configs at 16,000.
    A config of one sequence (``max_num_seqs=1``) is refused. ``calls`` counts the estimates asked for."""

    def __init__(self) -> None:
        self.calls = 0

    def estimate(self, config: EngineConfig, shape: TrafficShape) -> ToyEstimate:
        self.calls += 1
        if config.max_num_seqs == 1:
            return ToyEstimate(False, "max_num_seqs too small", 0, 0, None, None, None, None)
        peak = 16_000.0 if config.speculative_method != "none" else 8_000.0
        c = max(shape.concurrency, 1e-3)
        tpot = (c + 32) / peak
        ttft = shape.prompt_tokens.mean / 50_000 + tpot
        e2e = ttft + shape.output_tokens.mean * tpot

        def pct(x: float) -> Percentiles:
            return Percentiles(p50=x, p95=1.5 * x, p99=2 * x)

        spec = SpecDecodeStats(acceptance_rate=0.8, mean_acceptance_length=1.8) if config.k else None
        return ToyEstimate(True, "", c / e2e * shape.output_tokens.mean, c / e2e, pct(ttft), pct(tpot), pct(e2e), spec)
