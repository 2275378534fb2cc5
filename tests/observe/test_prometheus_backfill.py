"""Weeks of synthetic vLLM history backfilled into a real Prometheus (promtool): the hour-of-week profile, the
forecast, the adapter on known series, and Prometheus stopping in the middle of a cycle."""

from __future__ import annotations

import math
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controller.domain.observation import TargetRef
from controller.errors import MetricsUnavailable
from controller.observe.arrival_forecast import forecast
from controller.observe.profile import TrafficProfile, build_profile
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.observe.synthetic import SyntheticTarget, write_openmetrics_files
from tests.observe.support import DelayProxy
from tests.support.prometheus_server import PrometheusServer, backfill_openmetrics, start_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

DAYS = 9
STEP = 300.0
#: A fixed instant, so no outcome depends on the hour the suite runs: the history ends here, and every "now" of a
#: test is this instant or an hour of the day before it.
END = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)


def diurnal(ts: float) -> float:
    """2 req/s at night, up to 10 req/s mid-afternoon UTC."""
    hour = datetime.fromtimestamp(ts, UTC).hour + datetime.fromtimestamp(ts, UTC).minute / 60
    return 6.0 - 4.0 * math.cos(2 * math.pi * (hour - 3) / 24)


def expected_slot_rate(hour_of_day: int) -> float:
    """A slot averages its hour's 5-minute points; each is the rate over the preceding 5 minutes."""
    base = datetime(2026, 1, 5, tzinfo=UTC).timestamp() + hour_of_day * 3600
    return sum(diurnal(base + m * 60 - 150) for m in range(0, 60, 5)) / 12


CHAT = SyntheticTarget("chat", rate=diurnal, prompt_mean=512, prompt_cv=0.5, output_mean=128, latency_s=4.0)
FLAT = SyntheticTarget("flat", rate=lambda ts: 1.0, prompt_mean=2000, prompt_cv=0.2, output_mean=50, latency_s=2.0)


@dataclass
class History:
    workdir: Path
    prometheus: PrometheusServer
    end: datetime
    backfill_s: float


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    workdir = tmp_path_factory.mktemp("backfill")
    end = END
    start = end - timedelta(days=DAYS)
    files, _ = write_openmetrics_files(
        workdir / "openmetrics", [CHAT, FLAT], start=start.timestamp(), end=end.timestamp(), step_s=STEP
    )
    t0 = time.perf_counter()
    backfill_openmetrics(files, workdir)
    backfill_s = time.perf_counter() - t0
    shutil.rmtree(workdir / "openmetrics")
    prometheus = start_prometheus([], workdir)
    try:
        yield History(workdir, prometheus, end, backfill_s)
    finally:
        prometheus.stop()


@pytest.mark.parametrize("hours_before_end", range(24))
def test_profile_from_weeks_of_history(history: History, hours_before_end: int) -> None:
    """The profile and the forecast at each of the 24 hours of a day, ending on and off the hour: the outcome must
    not depend on the time of day the history ends at."""
    source = PrometheusMetrics(PrometheusSettings(url=history.prometheus.url))
    target = TargetRef("prod", "chat", "chat")
    end = history.end - timedelta(hours=hours_before_end, minutes=5 * (hours_before_end % 12))
    profile = build_profile(source, target, end=end, days=7, step_s=STEP)
    assert source.queries_total == 4
    assert len(profile.slots) == 168
    for slot in profile.slots:
        expected = expected_slot_rate(slot.hour % 24)
        assert slot.arrival_rate == pytest.approx(expected, rel=0.05)
        assert slot.concurrency == pytest.approx(slot.arrival_rate * CHAT.latency_s, rel=0.01)
        assert slot.prompt_mean == pytest.approx(512, rel=0.01)
        assert slot.output_mean == pytest.approx(128, rel=0.01)
    # survives a restart: stored in status as JSON, no re-query needed
    restored = TrafficProfile.model_validate_json(profile.model_dump_json())
    assert restored == profile and restored.is_fresh(end + timedelta(hours=1))
    ahead = forecast(restored, now=end + timedelta(minutes=5), horizon_h=12)
    assert ahead.method == "holt-winters-daily" and len(ahead.points) == 12
    for point in ahead.points:
        assert point.arrival_rate == pytest.approx(diurnal(point.at.timestamp() + 1800), rel=0.2, abs=0.5)
        assert point.shape is not None and point.shape.prompt_tokens.mean == pytest.approx(512, rel=0.01)


def test_observe_reads_known_series(history: History) -> None:
    source = PrometheusMetrics(PrometheusSettings(url=history.prometheus.url, max_staleness_s=600))
    end = history.end
    report = source.report(TargetRef("prod", "flat", "flat"), start=end - timedelta(minutes=30), end=end)
    shape = report.shape
    assert shape.arrival_rate_rps == pytest.approx(1.0, rel=0.01)
    assert shape.concurrency == pytest.approx(2.0, rel=0.01)
    assert shape.prompt_tokens.mean == pytest.approx(2000, rel=0.01)
    assert shape.prompt_tokens.cv == pytest.approx(0.2, abs=0.05)
    assert shape.output_tokens.mean == pytest.approx(50, rel=0.01)
    assert shape.prefix_share == pytest.approx(0.3, rel=0.01)
    s = report.signals
    assert s.spec_acceptance_rate == pytest.approx(FLAT.acceptance, rel=0.01)
    assert s.spec_mean_acceptance_length == pytest.approx(1 + FLAT.acceptance * FLAT.spec_k, rel=0.01)
    assert len(s.spec_acceptance_per_position) == FLAT.spec_k
    assert report.variants["stable"].stats.requests == pytest.approx(1800, rel=0.01)
    assert shape.repetitiveness == 0.0  # not derivable unless the operator says the drafter is a lookup drafter
    lookup = PrometheusMetrics(
        PrometheusSettings(url=history.prometheus.url, max_staleness_s=600, repetitiveness_from_spec=True)
    )
    shape = lookup.report(TargetRef("prod", "flat", "flat"), start=end - timedelta(minutes=30), end=end).shape
    accepted_per_request = FLAT.output_mean / (1 + FLAT.acceptance * FLAT.spec_k) * FLAT.spec_k * FLAT.acceptance
    assert shape.repetitiveness == pytest.approx(accepted_per_request / FLAT.output_mean, rel=0.01)


def test_backfill_is_fast(history: History) -> None:
    # 2 targets x 9 days x 5-min points x ~90 series ~ 0.5 M samples
    assert history.backfill_s < 60


def _copy(history: History, tmp_path: Path) -> PrometheusServer:
    workdir = tmp_path / "copy"
    shutil.copytree(
        history.workdir / "data", workdir / "data", ignore=shutil.ignore_patterns("lock", "wal", "queries.active")
    )
    return start_prometheus([], workdir)


def test_prometheus_stopped_mid_cycle(history: History, tmp_path: Path) -> None:
    prometheus = _copy(history, tmp_path)
    outcome: list[BaseException | TrafficProfile] = []
    try:
        with DelayProxy(prometheus.url, delay_s=1.0) as proxy:
            source = PrometheusMetrics(PrometheusSettings(url=proxy.url))

            def cycle() -> None:
                try:
                    outcome.append(build_profile(source, TargetRef("prod", "chat", "chat"), end=history.end, days=7))
                except BaseException as exc:
                    outcome.append(exc)

            worker = threading.Thread(target=cycle)
            worker.start()
            while source.queries_total < 2:  # the first range query is answered, the second is in flight
                time.sleep(0.05)
            prometheus.stop()
            worker.join(timeout=30)
    finally:
        prometheus.stop()
    assert len(outcome) == 1 and isinstance(outcome[0], MetricsUnavailable), outcome
    assert "profile prod/chat concurrency" in str(outcome[0]) and "502" in str(outcome[0])
    direct = PrometheusMetrics(PrometheusSettings(url=prometheus.url))
    with pytest.raises(MetricsUnavailable, match="connection failed"):
        direct.observe(TargetRef("prod", "chat", "chat"), start=history.end - timedelta(minutes=30), end=history.end)
