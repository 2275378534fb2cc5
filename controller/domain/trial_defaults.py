"""A trial's and a tuning round's default budget, in one place: the policy's ``trial_budget`` section, the load
tester's :class:`~controller.ports.TrialBudget`, the Trial CR's spec and the decide layer's
:class:`~controller.decide.rules.TuningRules` all take their defaults from here."""

from __future__ import annotations

from typing import Final

MAX_TRIALS: Final = 16
"""Trials per tuning round (the baseline and the stock reference included)."""
CANARY_GPU_MINUTES: Final = 120.0
"""Canary GPU-minutes one round may spend."""
DURATION_S: Final = 120.0
WARMUP_S: Final = 10.0
MAX_REQUESTS: Final = 2000
STARTUP_TIMEOUT_S: Final = 900.0
