"""The profile-backed Forecaster: busy-hour shapes per window, rebuilt only when stale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controller.decide import Rules
from controller.domain.observation import TargetRef
from controller.domain.profile import HourSlot, TrafficProfile, window_busy_hour_shapes
from controller.domain.traffic import TimeWindow
from controller.observe.profile_forecaster import ProfileForecaster

MONDAY = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
TARGET = TargetRef("prod", "workhorse", "m")
WINDOWS = (TimeWindow(name="night", start_hour=0, end_hour=8), TimeWindow(name="day", start_hour=8, end_hour=24))


def profile(built_at: datetime) -> TrafficProfile:
    slots = []
    for hour in range(24):  # Monday only
        busy = 8 <= hour < 18
        slots.append(
            HourSlot(
                hour=hour,
                arrival_rate=10.0 if busy else 0.5,
                concurrency=(250.0 if hour == 13 else 200.0) if busy else 6.0,
                prompt_mean=512 if busy else 24000,
                output_mean=512 if busy else 1024,
                samples=12,
            )
        )
    return TrafficProfile(
        target=str(TARGET), built_at=built_at, history_start=MONDAY - timedelta(days=14), step_s=300, slots=tuple(slots)
    )


def test_busy_hour_shape_per_window() -> None:
    shapes = window_busy_hour_shapes(profile(MONDAY), WINDOWS, now=MONDAY)
    assert shapes["day"].concurrency == 250 and shapes["day"].prompt_tokens.mean == 512
    assert shapes["night"].prompt_tokens.mean == 24000 and shapes["night"].concurrency == 6


def test_profile_is_reused_until_stale() -> None:
    builds: list[datetime] = []

    def build(target: TargetRef, now: datetime) -> TrafficProfile:
        builds.append(now)
        return profile(now)

    f = ProfileForecaster(build, initial=profile(MONDAY - timedelta(hours=2)))
    assert f.window_shapes(TARGET, windows=WINDOWS, now=MONDAY)["day"].concurrency == 250
    assert builds == []  # the profile kept in status was fresh: no re-query after a restart
    f.window_shapes(TARGET, windows=WINDOWS, now=MONDAY + timedelta(days=2))
    assert builds == [MONDAY + timedelta(days=2)]


def test_reconciler_keeps_the_profile_in_status_across_a_restart() -> None:
    from controller.adapters.notify.recording import RecordingNotifier
    from controller.clock import FakeClock
    from controller.domain.observation import Observation
    from controller.domain.proposal import AdvisorContext, Proposal
    from controller.domain.status import TargetStatus
    from controller.errors import MetricsUnavailable
    from controller.policy import Policy
    from controller.ports import TrialRequest
    from controller.reconcile import Ports, Reconciler
    from controller.testing.memory import InMemoryCluster, InMemoryRouter

    class DownMetrics:
        def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
            raise MetricsUnavailable("prometheus down")

    class NoTrials:
        def run(self, request: TrialRequest) -> object:
            raise AssertionError("no trial expected")

    class NoAdvice:
        def propose(self, context: AdvisorContext) -> list[Proposal]:
            return []

    builds: list[datetime] = []

    def build(target: TargetRef, now: datetime) -> TrafficProfile:
        builds.append(now)
        return profile(now)

    def reconciler(forecaster: ProfileForecaster) -> Reconciler:
        ports = Ports(
            metrics=DownMetrics(),
            load_tester=NoTrials(),
            router=InMemoryRouter(),  # type: ignore[arg-type]
            advisor=NoAdvice(),
            notifier=RecordingNotifier(),
            cluster=InMemoryCluster(),
            clock=FakeClock(MONDAY),
            forecaster=forecaster,
        )
        return Reconciler(ports, Rules.from_policy(Policy(), WINDOWS))

    first = reconciler(ProfileForecaster(build)).reconcile(TARGET, TargetStatus())
    assert first.status.profile is not None and builds == [MONDAY]
    wire = TargetStatus.model_validate_json(first.status.model_dump_json())  # the operator restarts
    again = reconciler(ProfileForecaster(build)).reconcile(TARGET, wire)
    assert builds == [MONDAY]  # restored from status, not re-queried
    assert again.status.profile == first.status.profile
