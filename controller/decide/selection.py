"""Choosing among measured trials. Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from controller.domain.config import EngineConfig
from controller.domain.trial import TrialResult


def best_trial(
    trials: Sequence[TrialResult], *, is_lossy: Callable[[EngineConfig], bool] = lambda _c: False
) -> TrialResult | None:
    """The measured trial with the highest goodput under the SLO.

    Only trials that meet the SLO compete; a lossless config wins a tie (within 1%) against a lossy one.
    """
    eligible = [t for t in trials if t.ok and t.meets_slo() and t.objective() > 0]
    if not eligible:
        return None
    top = max(t.objective() for t in eligible)
    near_top = [t for t in eligible if t.objective() >= 0.99 * top]
    return max(near_top, key=lambda t: (not is_lossy(t.config), t.objective()))


def find(trials: Sequence[TrialResult], config: EngineConfig) -> TrialResult | None:
    """The latest trial of exactly this config."""
    key = config.key()
    return next((t for t in reversed(trials) if t.config.key() == key), None)
