"""The agent's tools: what it may read, and the one thing it may do (request a trial).

They are plain functions the graph calls itself (the observe node gathers the readings, the trial node requests
trials), not tool calls the model makes: small models call tools unreliably, and a closed, graph-driven tool set
means the model cannot reach anything else. Every reading is JSON-able data, later put in the prompt's data block.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from controller.domain.config import STOCK, EngineConfig
from controller.domain.proposal import AdvisorContext
from controller.domain.trial import TrialResult
from controller.policy import Policy

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")
_DELIMS = re.compile(r"<{2,}|>{2,}|`{3,}")

#: Requests one trial of one config and returns its measurement (a LoadTester behind a closure).
TrialRunner = Callable[[EngineConfig], TrialResult]


def clean(text: object, limit: int = 200) -> str:
    """Names, labels and log lines are data: strip control characters and anything that looks like our
    delimiters, and cap the length."""
    s = _DELIMS.sub(" ", _CONTROL.sub(" ", str(text)))
    return s[:limit] + ("..." if len(s) > limit else "")


def config_knobs(config: EngineConfig) -> dict[str, Any]:
    """Compact form: only the knobs that differ from stock vLLM."""
    return {k: v for k, (v, _) in config.changed_knobs(STOCK).items()}


def read_traffic_and_slo(context: AdvisorContext) -> dict[str, Any]:
    s = context.shape
    return {
        "target": {
            "namespace": clean(context.target.namespace, 63),
            "name": clean(context.target.name, 63),
            "model": clean(context.target.model, 120),
        },
        "traffic": {
            "arrival_rate_rps": round(s.arrival_rate_rps, 3),
            "concurrency": round(s.concurrency, 1),
            "prompt_tokens_mean": round(s.prompt_tokens.mean, 1),
            "output_tokens_mean": round(s.output_tokens.mean, 1),
            "repetitiveness": s.repetitiveness,
            "prefix_share": s.prefix_share,
            "window": clean(s.window.name, 63) if s.window else None,
        },
        "slo": context.slo.model_dump(),
        "active_config": config_knobs(context.active),
    }


def _summary(r: TrialResult) -> dict[str, Any]:
    return {
        "config": config_knobs(r.config),
        "label": clean(r.config.label(), 120),
        "status": r.status.value,
        "goodput_tokens_per_s": round(r.objective(), 1),
        "output_tokens_per_s": round(r.output_tokens_per_s, 1),
        "ttft_p95_s": round(r.ttft_s.p95, 4) if r.ttft_s else None,
        "tpot_p95_s": round(r.tpot_s.p95, 5) if r.tpot_s else None,
        "meets_slo": r.meets_slo(),
        "spec_acceptance": round(r.spec_decode.acceptance_rate, 3) if r.spec_decode else None,
        "reason": clean(r.reason, 200) if r.reason else "",
    }


def read_trial_history(history: Sequence[TrialResult], limit: int = 24) -> list[dict[str, Any]]:
    """The most recent trials, best first."""
    recent = list(history)[-limit:]
    return [_summary(r) for r in sorted(recent, key=lambda r: -r.objective())]


def read_failure_logs(history: Sequence[TrialResult], lines: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "label": clean(r.config.label(), 120),
            "status": r.status.value,
            "log_tail": [clean(x) for x in r.log_tail[-lines:]],
        }
        for r in history
        if not r.ok and r.log_tail
    ][-6:]


def read_policy(policy: Policy) -> dict[str, Any]:
    space = policy.space
    return {
        "tunable_knobs": {k: space.allowed(k) for k in space.knob_names()},
        "fixed_knobs": config_knobs(space.base),
        "constraints": [name for name, on in policy.constraints.model_dump().items() if on],
        "lossy": [r.reason or r.knob for r in policy.quality_gate.lossy],
        "approval": policy.approval,
        "max_trials": policy.trial_budget.max_trials,
    }


def best_measured(history: Sequence[TrialResult]) -> TrialResult | None:
    ok = [r for r in history if r.ok]
    return max(ok, key=lambda r: r.objective()) if ok else None


__all__ = [
    "TrialRunner",
    "best_measured",
    "clean",
    "config_knobs",
    "read_failure_logs",
    "read_policy",
    "read_traffic_and_slo",
    "read_trial_history",
]
