"""What a tuning round's outcome needs by default, in one place: the policy (``min_gain``, ``approval``,
``dry_run``) and the decide layer's :class:`~controller.decide.rules.TuningRules` take their defaults from here (the
trial budget's are in :mod:`controller.domain.trial_defaults`, the rollout's in
:mod:`controller.domain.rollout_defaults`)."""

from __future__ import annotations

from typing import Final

from controller.domain.approval import ApprovalMode

MIN_GAIN: Final = 0.03
"""The relative goodput gain over the active config a candidate needs to roll out (0.03: 3 % better)."""
APPROVAL: Final[ApprovalMode] = "manual-for-lossy"
DRY_RUN: Final = False
