"""What an approver is shown while a rollout waits for approval, the same in ``shiftctl describe``/``explain`` and
Slack: the candidate's exact ``vllm serve`` flags and their diff against the active config (both from the one
rendering, :meth:`EngineConfig.vllm_args`), the knobs that make it lossy and the quality gate's measured result, and
the trials behind it, each under its Trial CR's name (:func:`trial_name`). Pure.

A decision message also carries the GPU-hours the window takes on the chosen config against stock serving the same
tokens (:func:`gpu_hours_fields`) and, given a GPU-hour price, what they cost (:func:`cost_fields`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from controller.domain.actions import Action, Notify, RequestApproval
from controller.domain.config import EngineConfig
from controller.domain.phases import Phase
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult

LossyReasons = Callable[[EngineConfig], Sequence[str]]
QualityCode = Literal["passed", "failed", "not-run", "not-needed"]

#: The labels of the evidence a notification carries (``Notify.fields``), in the order they are shown.
SERVE = "vllm serve"
DIFF = "diff vs active"
LOSSY = "lossy"
QUALITY = "quality gate"
TRIALS = "trials"
GPU_HOURS = "GPU-hours"
COST = "Cost"
GPU_PRICE = "GPU-hour price"
EVIDENCE_LABELS: tuple[str, ...] = (SERVE, DIFF, LOSSY, QUALITY, TRIALS)


def _dns(value: str, limit: int = 63) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")
    return cleaned[:limit].strip("-") or "x"


def trial_name(service: str, config: EngineConfig, shape: TrafficShape) -> str:
    """A trial's one identifier: the name of its Trial CR (``config`` under ``shape``'s bucket, for ``service``)."""
    digest = hashlib.sha256(f"{config.key()}:{shape.bucket()}".encode()).hexdigest()[:10]
    return _dns(f"{service}-trial-{digest}")


def _pairs(args: Sequence[str]) -> dict[str, str]:
    """``--flag value`` / ``--switch`` pairs of a ``vllm serve`` argument list (a switch maps to "")."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        out[flag] = value or ""
        i += 2 if value is not None else 1
    return out


def flag_diff(active: EngineConfig, candidate: EngineConfig) -> tuple[str, ...]:
    """The candidate's ``vllm serve`` flags against the active config's: ``+ flag`` added, ``- flag`` dropped,
    ``~ flag old -> new`` changed."""
    old, new = _pairs(active.vllm_args()), _pairs(candidate.vllm_args())
    lines: list[str] = []
    for flag, value in new.items():
        if flag not in old:
            lines.append(f"+ {flag} {value}".rstrip())
        elif old[flag] != value:
            lines.append(f"~ {flag} {old[flag]} -> {value}")
    lines += [f"- {flag} {value}".rstrip() for flag, value in old.items() if flag not in new]
    return tuple(lines)


@dataclass(frozen=True)
class TrialEvidence:
    """One trial's numbers under its Trial CR's name."""

    name: str
    config: str
    status: str
    goodput_tokens_per_s: float
    output_tokens_per_s: float
    ttft_p95_ms: float | None
    tpot_p95_ms: float | None
    slo_met: bool

    def line(self) -> str:
        if self.status != "measured":
            return f"{self.name} {self.config}: {self.status}"
        ttft = f"{self.ttft_p95_ms:.0f} ms" if self.ttft_p95_ms is not None else "-"
        tpot = f"{self.tpot_p95_ms:.1f} ms" if self.tpot_p95_ms is not None else "-"
        return (
            f"{self.name} {self.config}: goodput {self.goodput_tokens_per_s:,.0f} tok/s, "
            f"{self.output_tokens_per_s:,.0f} tok/s, TTFT p95 {ttft}, TPOT p95 {tpot}, "
            f"SLO {'met' if self.slo_met else 'missed'}"
        )


def trial_evidence(service: str, trial: TrialResult) -> TrialEvidence:
    return TrialEvidence(
        name=trial_name(service, trial.config, trial.shape),
        config=trial.config.label(),
        status=trial.status.value,
        goodput_tokens_per_s=trial.goodput_tokens_per_s,
        output_tokens_per_s=trial.output_tokens_per_s,
        ttft_p95_ms=trial.ttft_s.p95 * 1000 if trial.ttft_s else None,
        tpot_p95_ms=trial.tpot_s.p95 * 1000 if trial.tpot_s else None,
        slo_met=trial.meets_slo(),
    )


@dataclass(frozen=True)
class ApprovalEvidence:
    """What the approver of ``rollout_id`` is shown."""

    rollout_id: str
    active: str
    candidate: str
    serve_flags: tuple[str, ...]
    active_flags: tuple[str, ...]
    diff: tuple[str, ...]
    lossy: tuple[str, ...]
    quality: QualityCode
    quality_detail: str
    trials: tuple[TrialEvidence, ...]

    def fields(self) -> tuple[tuple[str, str], ...]:
        """As a notification's fields; multi-line values are one entry per line."""
        return (
            (SERVE, " ".join(self.serve_flags) or "(vLLM defaults)"),
            (DIFF, "\n".join(self.diff) or "(no flag changes)"),
            (LOSSY, "\n".join(self.lossy) or "none"),
            (QUALITY, f"{self.quality}: {self.quality_detail}" if self.quality_detail else self.quality),
            (TRIALS, "\n".join(t.line() for t in self.trials) or "none in status"),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "rolloutId": self.rollout_id,
            "active": self.active,
            "candidate": self.candidate,
            "serveFlags": list(self.serve_flags),
            "activeFlags": list(self.active_flags),
            "diff": list(self.diff),
            "lossy": list(self.lossy),
            "qualityGate": {"result": self.quality, "detail": self.quality_detail},
            "trials": [t.__dict__ for t in self.trials],
        }


def _quality(trials: Sequence[TrialResult], lossy: Sequence[str]) -> tuple[QualityCode, str]:
    reports = [t.quality for t in trials if t.quality is not None]
    if not reports:
        return ("not-run", "no quality report in the candidate's trials") if lossy else ("not-needed", "")
    q = reports[-1]
    detail = (
        f"exact match {q.exact_match_rate:.1%}, logprob divergence {q.mean_logprob_divergence:.3f} "
        f"over {q.prompts} prompts"
    )
    return ("passed" if q.passed else "failed"), detail + (f" ({q.reason})" if q.reason else "")


def approval_evidence(service: str, status: TargetStatus, *, lossy_reasons: LossyReasons) -> ApprovalEvidence | None:
    """The evidence for the rollout in ``status`` (None without one)."""
    rollout = status.rollout
    if rollout is None:
        return None
    candidate, active = rollout.to_config, rollout.from_config
    own = [t for t in status.trials if t.config == candidate]
    lossy = tuple(lossy_reasons(candidate))
    quality, detail = _quality(own, lossy)
    shown = [t for t in status.trials if t.config in (candidate, active)]
    return ApprovalEvidence(
        rollout_id=rollout.id,
        active=active.label(),
        candidate=candidate.label(),
        serve_flags=tuple(candidate.vllm_args()),
        active_flags=tuple(active.vllm_args()),
        diff=flag_diff(active, candidate),
        lossy=lossy,
        quality=quality,
        quality_detail=detail,
        trials=tuple(trial_evidence(service, t) for t in sorted(shown, key=lambda t: -t.objective())),
    )


class GpuPrice(Protocol):
    """What a GPU-hour costs and where that price comes from (shown with it: the admin's setting, or a GPU
    profile's list price). The layer that owns the economics supplies it."""

    @property
    def usd_per_hour(self) -> float: ...

    @property
    def source(self) -> str: ...

    def usd(self, gpu_hours: float, *, window: str) -> float:
        """What ``gpu_hours`` in ``window`` cost, in USD."""
        ...


def _window_gpu_hours(
    status: TargetStatus, config: EngineConfig, windows: Sequence[TimeWindow]
) -> tuple[str, float, float] | None:
    """``(window, stock, chosen)`` GPU-hours for the window ``config`` is scheduled in (None when the status
    cannot say)."""
    entry = next((s for s in status.schedule if s.config == config), None)
    window = next((w for w in windows if entry is not None and w.name == entry.window), None)
    if entry is None or window is None or entry.goodput_tokens_per_s <= 0 or entry.stock_goodput_tokens_per_s <= 0:
        return None
    chosen = max(entry.replicas, 1) * config.tensor_parallel_size * window.hours
    return window.name, chosen * entry.goodput_tokens_per_s / entry.stock_goodput_tokens_per_s, chosen


def gpu_hours_fields(status: TargetStatus, config: EngineConfig, windows: Sequence[TimeWindow]) -> tuple[str, str]:
    """``(GPU-hours, "stock → chosen")`` for the window ``config`` is scheduled in: its replicas' GPUs over the
    window's hours, against the GPU-hours stock takes for the same goodput (empty when the status cannot say)."""
    hours = _window_gpu_hours(status, config, windows)
    if hours is None:
        return ("", "")
    window, stock, chosen = hours
    return (f"{GPU_HOURS} per '{window}' window", f"{stock:,.1f} → {chosen:,.1f}")


def cost_fields(
    status: TargetStatus, config: EngineConfig, windows: Sequence[TimeWindow], price: GpuPrice
) -> tuple[tuple[str, str], ...]:
    """``(Cost, "$stock → $chosen")`` for the GPU-hours of :func:`gpu_hours_fields` at ``price``, and
    ``(GPU-hour price, "$P/GPU-hour, source")``; () when the status cannot say."""
    hours = _window_gpu_hours(status, config, windows)
    if hours is None:
        return ()
    window, stock, chosen = hours
    usd_stock, usd_chosen = price.usd(stock, window=window), price.usd(chosen, window=window)
    return (
        (f"{COST} per '{window}' window", f"${usd_stock:,.2f} → ${usd_chosen:,.2f}"),
        (GPU_PRICE, f"${price.usd_per_hour:,.2f}/GPU-hour, {price.source}"),
    )


def annotate(
    actions: Sequence[Action],
    *,
    service: str,
    status: TargetStatus,
    lossy_reasons: LossyReasons,
    windows: Sequence[TimeWindow] = (),
    gpu_price: GpuPrice | None = None,
) -> tuple[Action, ...]:
    """The actions with the evidence on their notifications: an approval request gets :class:`ApprovalEvidence`'s
    fields, a decision its GPU-hours and, with ``gpu_price``, their cost (without one, GPU-hours only)."""
    out: list[Action] = []
    for action in actions:
        asked = bool(out) and isinstance(out[-1], RequestApproval)  # the request's Notify follows it
        if isinstance(action, Notify) and status.rollout is not None:
            if asked and status.phase is Phase.AWAITING_APPROVAL:
                evidence = approval_evidence(service, status, lossy_reasons=lossy_reasons)
                if evidence is not None:
                    action = replace(action, fields=action.fields + evidence.fields())
            elif action.title == "New config chosen":
                config = status.rollout.to_config
                label, value = gpu_hours_fields(status, config, windows)
                if label:
                    priced = cost_fields(status, config, windows, gpu_price) if gpu_price is not None else ()
                    action = replace(action, fields=(*action.fields, (label, value), *priced))
        out.append(action)
    return tuple(out)


__all__ = [
    "EVIDENCE_LABELS",
    "ApprovalEvidence",
    "GpuPrice",
    "TrialEvidence",
    "annotate",
    "approval_evidence",
    "cost_fields",
    "flag_diff",
    "gpu_hours_fields",
    "trial_evidence",
    "trial_name",
]
