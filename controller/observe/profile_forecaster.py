"""The Forecaster port on the hour-of-week profile built from Prometheus history.

The profile is rebuilt at most once a day (``max_age``); between rebuilds the windows' busy-hour shapes come from
the profile alone. ``profile`` is exposed so the operator can keep it in the target's status and hand it back after a
restart (``initial``), instead of re-querying weeks of data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from controller.domain.observation import TargetRef
from controller.domain.profile import TrafficProfile, window_busy_hour_shapes
from controller.domain.traffic import TimeWindow, TrafficShape

ProfileBuilder = Callable[[TargetRef, datetime], TrafficProfile]


class ProfileForecaster:
    def __init__(
        self, build: ProfileBuilder, *, initial: TrafficProfile | None = None, max_age: timedelta = timedelta(days=1)
    ) -> None:
        self._build = build
        self.profile = initial
        self.max_age = max_age

    @classmethod
    def from_prometheus(cls, source: object, *, days: float = 14, **kwargs: object) -> ProfileForecaster:
        """A forecaster whose profile comes from ``days`` of history in Prometheus (``PrometheusMetrics``)."""
        from controller.observe.profile import build_profile
        from controller.observe.prometheus import PrometheusMetrics

        if not isinstance(source, PrometheusMetrics):
            raise TypeError("source must be a PrometheusMetrics")

        def build(target: TargetRef, now: datetime) -> TrafficProfile:
            return build_profile(source, target, end=now, days=days)

        return cls(build, **kwargs)  # type: ignore[arg-type]

    def profile_state(self) -> TrafficProfile | None:
        return self.profile

    def restore(self, profile: TrafficProfile) -> None:
        if self.profile is None or profile.built_at > self.profile.built_at:
            self.profile = profile

    def window_shapes(
        self, target: TargetRef, *, windows: Sequence[TimeWindow], now: datetime
    ) -> dict[str, TrafficShape]:
        if self.profile is None or self.profile.target != str(target) or not self.profile.is_fresh(now, self.max_age):
            self.profile = self._build(target, now)
        return window_busy_hour_shapes(self.profile, list(windows), now=now)
