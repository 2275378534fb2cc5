"""The built-in traffic profiles (:data:`PRESETS`), as data, and their loader: ``coding-agents`` (the default) and
``chat-quoting`` among them; see :mod:`controller.simulator.traffic.diurnal` for what each describes.
"""

from __future__ import annotations

from typing import Any

from controller.errors import InvalidInput
from controller.simulator.traffic.profile import TrafficProfile

_DAY_WINDOWS: list[dict[str, Any]] = [
    {"name": "night", "start_hour": 0, "end_hour": 7},
    {"name": "morning-ramp", "start_hour": 7, "end_hour": 10},
    {"name": "day", "start_hour": 10, "end_hour": 18},
    {"name": "evening", "start_hour": 18, "end_hour": 24},
]

_AGENTS: dict[str, Any] = {
    # The field notes' workstation benchmark: 256 streams of 512 in / 512 out.
    "peak_concurrency": 256,
    # ~24 s per request at peak (~45 ms per output token): what one stock replica sustains near its limit.
    "request_seconds": 24.0,
    "prompt_tokens": {"mean": 512, "cv": 0.25, "maximum": 4096},
    "output_tokens": {"mean": 512, "cv": 0.25, "maximum": 4096},
    "repetitiveness": 0.10,
    "prefix_share": 0.30,
    # off at night, ramp 07-10, plateau with a midday peak, fading through the evening
    "curve": {
        "knots": [[0, 0.0], [7, 0.0], [10, 0.8], [13, 1.0], [18, 0.6], [21, 0.05], [22, 0.0], [24, 0.0]],
    },
    "weekend_curve": {"knots": [[0, 0.0], [9, 0.0], [12, 0.8], [15, 1.0], [19, 0.4], [22, 0.0], [24, 0.0]]},
    "weekend_scale": 0.3,
}

_DOCUMENTS: dict[str, Any] = {
    # Night-time long-document work: a few streams quoting 25k-token documents (field notes, report 2).
    "peak_concurrency": 6,
    "request_seconds": 90.0,
    "prompt_tokens": {"mean": 24000, "cv": 0.4, "maximum": 128000},
    "output_tokens": {"mean": 1024, "cv": 0.5, "maximum": 8192},
    "repetitiveness": 0.85,
    "prefix_share": 0.5,
    "curve": {"knots": [[0, 1.0], [6, 1.0], [9, 0.0], [19, 0.0], [23, 1.0], [24, 1.0]]},
    "weekend_curve": {"knots": [[0, 1.0], [9, 1.0], [12, 0.3], [18, 0.3], [22, 1.0], [24, 1.0]]},
}

_CHAT: dict[str, Any] = {
    # Interactive chat by day: short prompts, a few hundred tokens of fresh text in reply.
    "peak_concurrency": 64,
    "request_seconds": 20.0,
    "prompt_tokens": {"mean": 1024, "cv": 0.6, "maximum": 8192},
    "output_tokens": {"mean": 384, "cv": 0.5, "maximum": 4096},
    "repetitiveness": 0.05,
    "prefix_share": 0.4,
    "curve": {"knots": [[0, 0.0], [7, 0.0], [10, 0.8], [13, 1.0], [18, 0.7], [21, 0.1], [22, 0.0], [24, 0.0]]},
    "weekend_curve": {"knots": [[0, 0.0], [9, 0.0], [12, 0.6], [15, 0.7], [19, 0.4], [22, 0.0], [24, 0.0]]},
    "weekend_scale": 0.5,
}

_QUOTING: dict[str, Any] = {
    # Document quoting at night (field note 2): 25k-token documents whose answers copy long passages of them, the
    # text a lookup drafter guesses right ~15 times in 16.
    "peak_concurrency": 8,
    "request_seconds": 60.0,
    "prompt_tokens": {"mean": 8000, "cv": 0.3, "maximum": 24000},
    "output_tokens": {"mean": 2048, "cv": 0.5, "maximum": 8192},
    "repetitiveness": 0.95,
    "prefix_share": 0.95,
    "curve": {"knots": [[0, 1.0], [6, 1.0], [9, 0.0], [19, 0.0], [23, 1.0], [24, 1.0]]},
}

#: Named traffic profiles, as data. Validated by :class:`TrafficProfile` on first use.
PRESETS: dict[str, dict[str, Any]] = {
    "coding-agents": {
        "name": "coding-agents",
        "description": "coding agents by day (256 x 512/512 at midday), long-document work at night (1-8 streams)",
        "populations": {"agents": _AGENTS, "documents": _DOCUMENTS},
        "windows": _DAY_WINDOWS,
        "noise_cv": 0.08,
    },
    "chat-quoting": {
        "name": "chat-quoting",
        "description": "chat by day (64 x 1k/384 at midday), document quoting at night (8 x 25k/1.5k, 95% copied)",
        "populations": {"chat": _CHAT, "quoting": _QUOTING},
        "windows": _DAY_WINDOWS,
        "noise_cv": 0.08,
    },
    "agents-flat": {
        "name": "agents-flat",
        "description": "constant 256 x 512/512 agent traffic, no daily cycle (load tests, benchmarks)",
        "populations": {
            "agents": {
                **_AGENTS,
                "curve": {"knots": [[0, 1.0], [24, 1.0]]},
                "weekend_curve": None,
                "weekend_scale": 1.0,
            }
        },
        "windows": [{"name": "all-day", "start_hour": 0, "end_hour": 24}],
        "noise_cv": 0.0,
    },
    "documents-flat": {
        "name": "documents-flat",
        "description": "constant long-document traffic, 6 streams of ~24k-token prompts, no daily cycle",
        "populations": {
            "documents": {
                **_DOCUMENTS,
                "curve": {"knots": [[0, 1.0], [24, 1.0]]},
                "weekend_curve": None,
            }
        },
        "windows": [{"name": "all-day", "start_hour": 0, "end_hour": 24}],
        "noise_cv": 0.0,
    },
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def load_preset(name: str) -> TrafficProfile:
    if name not in PRESETS:
        raise InvalidInput(f"unknown traffic profile {name!r}; known: {', '.join(preset_names())}", field="profile")
    return TrafficProfile.parse(PRESETS[name], source=f"traffic preset {name!r}")
