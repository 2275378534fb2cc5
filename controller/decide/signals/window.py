"""Which span of metrics one control cycle reads (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from controller.domain.status import TargetStatus

#: The longest window a rollout step's analysis looks back over.
MAX_ANALYSIS_WINDOW_S = 3 * 3600.0


def observe_window(now: datetime, status: TargetStatus, window_s: float) -> tuple[datetime, datetime]:
    """``[start, now)``: the last ``window_s`` seconds; during a rollout step with traffic on the candidate,
    everything since the step began (bounded by :data:`MAX_ANALYSIS_WINDOW_S`), so the analysis accumulates samples
    across cycles."""
    start = now - timedelta(seconds=window_s)
    rollout = status.rollout
    if rollout is not None and rollout.step_started_at is not None and rollout.weight > 0:
        start = max(min(start, rollout.step_started_at), now - timedelta(seconds=MAX_ANALYSIS_WINDOW_S))
    return start, now
