"""The :class:`TrialResult` each way a trial on a launched engine ends: measured (with the replay's summary, the
server's metrics and the verdict on them), crashed, cancelled, or with no request completed. ``base`` is the
fields every result of the trial shares (config, shape, SLO, source, warm-up rounds); ``tail`` the engine's last
log lines."""

from __future__ import annotations

from dataclasses import dataclass

from controller.domain.codes import Code
from controller.domain.trial import QualityReport, TrialResult, TrialStatus
from controller.trials.engine.launchers import Launch
from controller.trials.engine.log import engine_reason
from controller.trials.loadgen.replay import LoadReport, LoadSummary
from controller.trials.verdict.metrics_delta import MetricsDelta


@dataclass(frozen=True)
class Verdict:
    """What a completed replay measured: its status, why, and the quality gate's report where one ran."""

    status: TrialStatus
    reason: str = ""
    quality: QualityReport | None = None
    invalid_codes: tuple[Code, ...] = ()  # an invalid replay's: each way it missed its plan


def measured(
    base: dict[str, object],
    launch: Launch,
    report: LoadReport,
    summary: LoadSummary,
    server: MetricsDelta,
    verdict: Verdict,
) -> TrialResult:
    """The result of a completed replay under ``verdict``; FAILED when no TTFT or TPOT was measured."""
    if summary.ttft_s is None or summary.tpot_s is None:
        return TrialResult(
            **base,
            status=TrialStatus.FAILED,
            reason=f"no {'TTFT' if summary.ttft_s is None else 'TPOT'} measured over "
            f"{len(report.completed)} completed requests",
            startup_s=launch.startup_s,
            completed=summary.completed,
            failed=summary.failed,
        )
    return TrialResult(
        **base,
        status=verdict.status,
        reason=verdict.reason,
        invalid_codes=verdict.invalid_codes,
        duration_s=report.duration_s,
        startup_s=launch.startup_s,
        completed=summary.completed,
        failed=summary.failed,
        output_tokens_per_s=summary.output_tokens_per_s,
        total_tokens_per_s=summary.total_tokens_per_s,
        request_throughput=summary.request_throughput,
        goodput_rps=summary.goodput_rps,
        goodput_tokens_per_s=summary.goodput_tokens_per_s,
        ttft_s=summary.ttft_s,
        tpot_s=summary.tpot_s,
        itl_s=summary.itl_s,
        e2e_s=summary.e2e_s,
        spec_decode=server.spec_decode(),
        preemptions=round(server.preemptions),
        kv_cache_usage=server.kv_cache_usage_peak,
        quality=verdict.quality,
    )


def none_completed(base: dict[str, object], launch: Launch, report: LoadReport, tail: tuple[str, ...]) -> TrialResult:
    """FAILED: the replay ran and no request completed (the first failure's error says why)."""
    first = report.failed[0].error if report.failed else "no request was sent"
    return TrialResult(
        **base,
        status=TrialStatus.FAILED,
        reason=f"no request completed: {first}",
        startup_s=launch.startup_s,
        failed=len(report.failed),
        log_tail=tail,
    )


def crashed(base: dict[str, object], launch: Launch, what: str, tail: tuple[str, ...]) -> TrialResult:
    """INFEASIBLE: the engine stopped (``what``), with the reason its log gives."""
    reason = engine_reason(what, tail)
    return TrialResult(
        **base,
        status=TrialStatus.INFEASIBLE,
        reason=reason if reason == what else f"{what}: {reason}",
        startup_s=launch.startup_s,
        log_tail=tail,
    )


def cancelled(base: dict[str, object], launch: Launch) -> TrialResult:
    """FAILED, marked cancelled: the trial was stopped on request."""
    return TrialResult(
        **base,
        status=TrialStatus.FAILED,
        reason="cancelled",
        startup_s=launch.startup_s,
    )


__all__ = ["Verdict", "cancelled", "crashed", "measured", "none_completed"]
