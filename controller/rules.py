"""The user's policy as the decide layer's rules (pure translation, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence

from controller.decide import planner
from controller.decide.capacity import ScalingRules
from controller.decide.rollout import RolloutRules
from controller.domain.traffic import TimeWindow
from controller.policy import Policy


def rules_from_policy(
    policy: Policy,
    windows: Sequence[TimeWindow] = (),
    *,
    scaling: ScalingRules | None = None,
    digest: planner.DigestRules | None = None,
) -> planner.Rules:
    """Translate the user's policy (and the target's replica bounds) into the decide layer's rules."""
    thresholds = policy.rollout.thresholds
    return planner.Rules(
        slo=policy.slo,
        tuning=planner.TuningRules(
            max_trials=policy.trial_budget.max_trials,
            min_gain=1.0 + policy.min_gain,
            approval=policy.approval,
            dry_run=policy.dry_run,
        ),
        rollout=RolloutRules(
            steps=tuple(policy.rollout.steps),
            bake_s=policy.rollout.bake_seconds,
            min_samples=policy.rollout.min_samples,
            max_ttft_regression=thresholds.max_ttft_regression,
            max_tpot_regression=thresholds.max_tpot_regression,
            max_error_rate=thresholds.max_error_rate,
            min_goodput_ratio=thresholds.min_goodput_ratio,
            slo_headroom=thresholds.slo_headroom,
            analysis_interval_s=policy.rollout.analysis_interval_seconds,
            on_missing_data=policy.rollout.on_missing_data,
        ),
        windows=tuple(windows) or planner.DEFAULT_WINDOWS,
        scaling=scaling,
        digest=digest,
        design_slots=policy.largest_max_num_seqs(),
    )


__all__ = ["rules_from_policy"]
