"""The next window and the seconds until it starts: the same answer as looking at each minute of the day ahead in
turn, for windows that wrap midnight, leave gaps (the first window then), overlap, start or end off the hour, and
for times on a bound, just before or after it, and across midnight; and found without walking the whole day."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from controller.decide import Rules
from controller.decide import context as context_module
from controller.decide.context import next_window, window_at
from controller.domain import TimeWindow


def minute_by_minute(windows: Sequence[TimeWindow], now: datetime) -> tuple[TimeWindow, float]:
    """The reference: each minute of the day ahead in turn until one falls in another window."""
    current = window_at(windows, now).name
    for minute in range(1, 24 * 60 + 1):
        window = window_at(windows, now + timedelta(minutes=minute))
        if window.name != current:
            start = (now + timedelta(minutes=minute)).replace(second=0, microsecond=0)
            return window, max(0.0, (start - now).total_seconds())
    return window_at(windows, now), 24 * 3600.0


def w(name: str, start: float, end: float) -> TimeWindow:
    return TimeWindow(name=name, start_hour=start, end_hour=end)


WINDOW_SETS: dict[str, tuple[TimeWindow, ...]] = {
    "all day": (w("all-day", 0, 24),),
    "day and night": (w("day", 7, 19), w("night", 19, 7)),
    "three, the last to midnight": (w("night", 0, 7), w("morning", 7, 10), w("day", 10, 24)),
    "off the hour": (w("early", 5.25, 9.5), w("late", 9.5, 22.75), w("small-hours", 22.75, 5.25)),
    "a gap falls back to the first": (w("office", 9, 17), w("evening", 19, 23)),
    "overlapping: the first listed wins": (w("peak", 11, 14), w("day", 8, 20), w("night", 20, 8)),
    "one short window": (w("batch", 2.5, 2.6), w("rest", 2.6, 2.5)),
    "same name twice": (w("busy", 8, 12), w("quiet", 12, 13), w("busy", 13, 18), w("quiet", 18, 8)),
    "a window from midnight": (w("night", 0, 6), w("day", 6, 0.0001)),
}


def times(windows: Sequence[TimeWindow]) -> list[datetime]:
    """Every 47 minutes 13 seconds through a day, and around each bound: on it, a second and a minute either side
    (with and without seconds and microseconds)."""
    base = datetime(2026, 3, 14, 0, 0, tzinfo=UTC)
    out = [base + timedelta(seconds=s) for s in range(0, 24 * 3600, 47 * 60 + 13)]
    for window in windows:
        for bound in (window.start_hour, window.end_hour):
            on = base + timedelta(hours=bound)
            for shift in (0, -1, 1, -60, 60, -61, 59, 0.25, -0.75):
                out.append(on + timedelta(seconds=shift))
    out.append(base + timedelta(hours=23, minutes=59, seconds=59, microseconds=999_999))
    return out


@pytest.mark.parametrize("name", sorted(WINDOW_SETS))
def test_next_window_is_the_first_minute_in_another_window(name: str) -> None:
    windows = WINDOW_SETS[name]
    rules = Rules(windows=windows)
    for now in times(windows):
        assert next_window(rules, now) == minute_by_minute(windows, now), (name, now)


@pytest.mark.parametrize("name", sorted(WINDOW_SETS))
def test_next_window_looks_at_a_few_minutes_not_the_whole_day(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handful of looks per window bound (a decision asks for the next window on every cycle), not 1,440."""
    windows = WINDOW_SETS[name]
    looks = 0

    def counted(ws: Sequence[TimeWindow], now: datetime) -> TimeWindow:
        nonlocal looks
        looks += 1
        return window_at(ws, now)

    monkeypatch.setattr(context_module, "window_at", counted)
    for now in times(windows)[:5]:
        looks = 0
        next_window(Rules(windows=windows), now)
        assert looks <= 2 + 6 * len(windows), (name, now, looks)
