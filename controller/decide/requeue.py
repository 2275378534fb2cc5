"""When to look at a target again (pure)."""

from __future__ import annotations

from controller.domain.phases import Phase

#: While a trial runs in the background: how soon the next cycle polls it.
TRIAL_POLL_S = 10.0
TRIALLING_S = 30.0
IDLE_S = 60.0


def requeue_after(phase: Phase, *, analysis_interval_s: float) -> float:
    """A rollout step's analysis interval while rolling out, half a minute while trialling, else a minute."""
    if phase is Phase.ROLLING_OUT:
        return analysis_interval_s
    if phase is Phase.TRIALLING:
        return TRIALLING_S
    return IDLE_S
