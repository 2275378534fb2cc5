"""The hour-of-week traffic profile of a target: what weeks of history say each hour of the week looks like.

Built by the observe layer from Prometheus range queries (``controller.observe.profile``) and kept in the target's
status, so a restarted operator does not re-query weeks of data.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape

HOURS_PER_WEEK = 168


def hour_of_week(when: datetime) -> int:
    when = when.astimezone(UTC)
    return when.weekday() * 24 + when.hour


class HourSlot(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hour: int = Field(ge=0, lt=HOURS_PER_WEEK, description="hour of week, Monday 00:00 UTC = 0")
    arrival_rate: float = Field(ge=0)
    concurrency: float = Field(ge=0)
    prompt_mean: float | None = Field(default=None, gt=0)
    output_mean: float | None = Field(default=None, gt=0)
    samples: int = Field(ge=1)


class TrafficProfile(BaseModel):
    """What a target's traffic looks like by hour of week, plus the hourly arrival history for forecasting."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    built_at: datetime
    history_start: datetime = Field(description="start of the first hour in hourly_arrival (UTC, on the hour)")
    step_s: float = Field(gt=0)
    slots: tuple[HourSlot, ...] = ()
    hourly_arrival: tuple[float | None, ...] = Field(default=(), description="hourly mean req/s, None = no data")

    def slot(self, hour: int) -> HourSlot | None:
        return next((s for s in self.slots if s.hour == hour), None)

    @property
    def history_hours(self) -> int:
        return len(self.hourly_arrival)

    def is_fresh(self, now: datetime, max_age: timedelta = timedelta(days=1)) -> bool:
        return now - self.built_at <= max_age

    def typical_shape(self, when: datetime, arrival_rate: float | None = None) -> TrafficShape | None:
        """The shape of the slot ``when`` falls in; with ``arrival_rate`` the concurrency is rescaled by Little's law
        (the slot's mean latency times the given rate)."""
        slot = self.slot(hour_of_week(when))
        if slot is None or slot.prompt_mean is None or slot.output_mean is None:
            return None
        rate = slot.arrival_rate if arrival_rate is None else max(arrival_rate, 0.0)
        latency = slot.concurrency / slot.arrival_rate if slot.arrival_rate > 0 else 0.0
        return TrafficShape(
            arrival_rate_rps=rate,
            concurrency=rate * latency,
            prompt_tokens=LengthDistribution(mean=slot.prompt_mean),
            output_tokens=LengthDistribution(mean=slot.output_mean),
        )


def window_busy_hour_shapes(
    profile: TrafficProfile, windows: tuple[TimeWindow, ...] | list[TimeWindow], *, now: datetime
) -> dict[str, TrafficShape]:
    """For each window, the shape of its busiest profiled hour (most requests in flight) over the next day."""
    result: dict[str, TrafficShape] = {}
    base = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    for hours_ahead in range(24):
        when = base + timedelta(hours=hours_ahead)
        window = next((w for w in windows if w.contains(when.hour + 0.5)), None)
        shape = profile.typical_shape(when)
        if window is None or shape is None:
            continue
        best = result.get(window.name)
        if best is None or shape.concurrency > best.concurrency:
            result[window.name] = shape
    return result
