"""Forecast of the next hours' arrival rate from a :class:`~controller.observe.profile.TrafficProfile`.

Method, by how much hourly history there is:

- at least two weeks: additive Holt-Winters (``statsmodels`` ``ExponentialSmoothing``) with a damped additive trend
  and a 168-hour (weekly) season;
- two days to two weeks: the same with a 24-hour (daily) season;
- less: a seasonal baseline from the hour-of-week slots (or the overall mean), no trend.

Gaps (hours without data) are filled from the hour-of-week slot, else linearly. Forecasts are clipped at zero; the
band is +-1.96 residual standard deviations. Each point carries the slot's typical shape with concurrency rescaled by
Little's law, so the planner can pick a config per coming window.
"""

from __future__ import annotations

import math
import warnings
from datetime import datetime, timedelta
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from controller.domain.profile import HOURS_PER_WEEK, TrafficProfile, hour_of_week
from controller.domain.traffic import TrafficShape

Method = Literal["holt-winters-weekly", "holt-winters-daily", "seasonal-baseline", "none"]


class ForecastPoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime = Field(description="start of the forecast hour")
    arrival_rate: float = Field(ge=0)
    low: float = Field(ge=0)
    high: float = Field(ge=0)
    shape: TrafficShape | None = None


class Forecast(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method
    points: tuple[ForecastPoint, ...]


def _filled(profile: TrafficProfile) -> np.ndarray:
    values = np.array([np.nan if v is None else v for v in profile.hourly_arrival], dtype=float)
    for i in np.flatnonzero(np.isnan(values)):
        slot = profile.slot(hour_of_week(profile.history_start + timedelta(hours=int(i))))
        if slot is not None:
            values[i] = slot.arrival_rate
    missing = np.isnan(values)
    if missing.any() and (~missing).any():
        idx = np.arange(len(values))
        values[missing] = np.interp(idx[missing], idx[~missing], values[~missing])
    return values


def _holt_winters(values: np.ndarray, period: int, horizon: int) -> tuple[np.ndarray, float]:
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ExponentialSmoothing(
            values,
            trend="add",
            damped_trend=True,
            seasonal="add",
            seasonal_periods=period,
            initialization_method="heuristic",
        ).fit()
    predicted = np.asarray(model.forecast(horizon), dtype=float)
    residual = np.asarray(model.resid, dtype=float)
    return predicted, float(np.nanstd(residual)) if residual.size else 0.0


def forecast(profile: TrafficProfile, *, now: datetime, horizon_h: int = 24) -> Forecast:
    """Hourly forecast for the ``horizon_h`` hours starting at the hour containing ``now``."""
    if horizon_h < 1:
        raise ValueError(f"horizon must be at least one hour, got {horizon_h}")
    values = _filled(profile)
    history_end = profile.history_start + timedelta(hours=len(values))
    first = now.replace(minute=0, second=0, microsecond=0)
    # steps from the end of history to the first requested hour, then the horizon
    skip = max(int((first - history_end).total_seconds() // 3600), 0)
    n = len(values[~np.isnan(values)]) if values.size else 0
    method: Method
    if n >= 2 * HOURS_PER_WEEK:
        method, period = "holt-winters-weekly", HOURS_PER_WEEK
    elif n >= 48:
        method, period = "holt-winters-daily", 24
    elif profile.slots:
        method, period = "seasonal-baseline", 0
    else:
        return Forecast(method="none", points=())
    hours = [first + timedelta(hours=h) for h in range(horizon_h)]
    if period:
        predicted, sigma = _holt_winters(values, period, skip + horizon_h)
        predicted = predicted[skip:]
    else:
        overall = sum(s.arrival_rate for s in profile.slots) / len(profile.slots)
        baseline = []
        for when in hours:
            slot = profile.slot(hour_of_week(when))
            baseline.append(slot.arrival_rate if slot else overall)
        predicted = np.array(baseline)
        spread = [s.arrival_rate for s in profile.slots]
        sigma = float(np.std(spread)) if len(spread) > 1 else 0.0
    points = []
    for when, value in zip(hours, predicted, strict=True):
        rate = max(float(value), 0.0) if math.isfinite(value) else 0.0
        points.append(
            ForecastPoint(
                at=when,
                arrival_rate=rate,
                low=max(rate - 1.96 * sigma, 0.0),
                high=rate + 1.96 * sigma,
                shape=profile.typical_shape(when, rate),
            )
        )
    return Forecast(method=method, points=tuple(points))
