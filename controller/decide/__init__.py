"""The decide step of the control loop: status + observation + proposals in, a :class:`Decision` (the next status,
actions, notes and reason codes) out. Pure: no I/O, no clock reads (``now`` is passed in), no adapters. Every action
carries the reason that status, Events, ``shiftctl explain`` and Slack show.

This package is the decide layer's public surface (``__all__``); each concern lives in its own folder (see
``docs/decide.md``):

- the root: :mod:`~controller.decide.plan` (dispatch on the phase and fold the intents into one decision),
  :mod:`~controller.decide.outcome` (what a finished round leads to), :mod:`~controller.decide.context` (the frozen
  ``PlanContext`` and ``Intent``), :mod:`~controller.decide.rules` (what the planner is told, from the policy) and
  :mod:`~controller.decide.requeue` (when the next cycle runs);
- :mod:`~controller.decide.signals`: drift, SLO breach, the burn-rate signal, noise, the observe window;
- :mod:`~controller.decide.capacity`: replica sizing from measured capacity and the stable variant's replicas;
- :mod:`~controller.decide.search`: the optimizer, its Gaussian process and kernel, the guardrails and the
  screening of proposals;
- :mod:`~controller.decide.tuning`: tuning rounds, selection, economics and capacity probes;
- :mod:`~controller.decide.rollout`: the steps, each step's analysis and the rollout's lifecycle in status;
- :mod:`~controller.decide.schedule`: the time-of-day switch, observing, the running account and the digest.
"""

from __future__ import annotations

from controller.decide.context import per_replica, round_trials, scaled, window_at
from controller.decide.plan import Decision, plan
from controller.decide.requeue import TRIAL_POLL_S, requeue_after
from controller.decide.rules import (
    DEFAULT_WINDOWS,
    ApiPrice,
    DigestRules,
    ProbeRules,
    RolloutRules,
    Rules,
    ScalingRules,
    ScheduleRules,
    TuningRules,
)
from controller.decide.schedule.account import describe as describe_account
from controller.decide.search.guardrails import budget_left, check_proposals
from controller.decide.search.optimizer import OptimizerAdvisor, ShapePrior
from controller.decide.search.screening import advisor_context, screen
from controller.decide.signals.breach import slo_breach
from controller.decide.signals.window import observe_window
from controller.decide.tuning.economics import schedule_economics, window_economics
from controller.decide.tuning.selection import expected_ratios

__all__ = [
    "DEFAULT_WINDOWS",
    "TRIAL_POLL_S",
    "ApiPrice",
    "Decision",
    "DigestRules",
    "OptimizerAdvisor",
    "ProbeRules",
    "RolloutRules",
    "Rules",
    "ScalingRules",
    "ScheduleRules",
    "ShapePrior",
    "TuningRules",
    "advisor_context",
    "budget_left",
    "check_proposals",
    "describe_account",
    "expected_ratios",
    "observe_window",
    "per_replica",
    "plan",
    "requeue_after",
    "round_trials",
    "scaled",
    "schedule_economics",
    "screen",
    "slo_breach",
    "window_at",
    "window_economics",
]
