"""Busy-hour forecasts for a cycle: the forecaster resumes from the profile kept in status and keeps it there."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from controller.domain.observation import TargetRef
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.errors import ShiftlightError
from controller.ports import Forecaster

log = logging.getLogger(__name__)


def window_forecasts(
    forecaster: Forecaster | None,
    target: TargetRef,
    status: TargetStatus,
    *,
    windows: Sequence[TimeWindow],
    now: datetime,
) -> tuple[dict[str, TrafficShape], TargetStatus]:
    """The expected busy-hour shape per window (none without a forecaster, or when it fails this cycle), and
    ``status`` with the forecaster's current profile in it (restored from there first, after a restart)."""
    if forecaster is None:
        return {}, status
    if status.profile is not None:
        forecaster.restore(status.profile)
    try:
        shapes = dict(forecaster.window_shapes(target, windows=windows, now=now))
    except ShiftlightError as exc:
        log.warning("%s: no forecast this cycle (%s)", target, exc)
        return {}, status
    profile = forecaster.profile_state()
    if profile is not None and profile != status.profile:
        status = status.model_copy(update={"profile": profile})
    return shapes, status
