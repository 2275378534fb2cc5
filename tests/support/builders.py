"""Builders the tests share: one value each, written once."""

from __future__ import annotations

from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.ports import TrialRequest


def measured_trial(request: TrialRequest, *, output_tokens_per_s: float = 1000.0) -> TrialResult:
    """A trial of ``request`` that measured 100 requests at ``output_tokens_per_s``, TTFT p50/p95/p99 0.1/0.2/0.3 s
    and TPOT 10/20/30 ms: well within the usual test SLOs."""
    return TrialResult(
        config=request.config,
        shape=request.shape,
        slo=request.slo,
        status=TrialStatus.MEASURED,
        completed=100,
        output_tokens_per_s=output_tokens_per_s,
        ttft_s=Percentiles(p50=0.1, p95=0.2, p99=0.3),
        tpot_s=Percentiles(p50=0.01, p95=0.02, p99=0.03),
    )
