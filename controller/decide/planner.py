"""The decide step of the control loop: status + observation + proposals in, a :class:`Decision` (the next status,
actions, notes and reason codes) out.

This module is the decide layer's public face; each concern lives in its own module (see ``docs/decide.md``):
:mod:`~controller.decide.plan` (dispatch and fold), :mod:`~controller.decide.context` (the frozen
``PlanContext``), :mod:`~controller.decide.observing`, :mod:`~controller.decide.schedule`,
:mod:`~controller.decide.scaling`, :mod:`~controller.decide.tuning`, :mod:`~controller.decide.probe`,
:mod:`~controller.decide.selection`, :mod:`~controller.decide.outcome`, :mod:`~controller.decide.rolling`,
:mod:`~controller.decide.digest`, with the rules in :mod:`~controller.decide.rules`.

Pure: no I/O, no clock reads (``now`` is passed in), no adapters. Every action carries the reason that status,
Events, ``shiftctl explain`` and Slack show.
"""

from __future__ import annotations

from controller.decide.breach import slo_breach
from controller.decide.context import per_replica, round_trials, scaled, window_at
from controller.decide.plan import Decision, plan
from controller.decide.rules import (
    DEFAULT_WINDOWS,
    ApprovalMode,
    DigestRules,
    Rules,
    ScheduleRules,
    TuningRules,
)
from controller.decide.selection import expected_ratios

__all__ = [
    "DEFAULT_WINDOWS",
    "ApprovalMode",
    "Decision",
    "DigestRules",
    "Rules",
    "ScheduleRules",
    "TuningRules",
    "expected_ratios",
    "per_replica",
    "plan",
    "round_trials",
    "scaled",
    "slo_breach",
    "window_at",
]
