"""Metrics through Grafana's datasource proxy, in front of a real Prometheus: the same extraction as Prometheus
directly; a wrong token, an unknown datasource UID and a datasource that is down each freeze the loop with their
own reason; the token appears in no log record, status or notification.

The series are backfilled (promtool) at a fixed instant, so nothing depends on the wall clock.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide import Rules
from controller.domain import STOCK, Phase
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.errors import MetricsUnavailable
from controller.observe.grafana_proxy import GrafanaMetrics, GrafanaSettings, GrafanaUnavailable
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.observe.synthetic import SyntheticTarget, write_openmetrics_files
from controller.policy import Policy
from controller.ports import TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.grafana_server import GrafanaStandIn, running_grafana
from tests.support.prometheus_server import PrometheusServer, backfill_openmetrics, free_port, start_prometheus

pytestmark = pytest.mark.prometheus

END = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
SLO_ = SLO(ttft_seconds=2.0, tpot_seconds=0.1)
TOKEN = "glsa_s3cr3t-service-account-token_0123456789"
TARGET = TargetRef("prod", "chat", "chat")
TARGETS = [
    SyntheticTarget("chat", variant="stable", rate=lambda ts: 6.0, ttft_s=0.3),
    SyntheticTarget("chat", variant="candidate", rate=lambda ts: 2.0, ttft_s=0.5, prompt_mean=900.0),
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("grafana-source")
    files, _ = write_openmetrics_files(
        workdir / "openmetrics", TARGETS, start=(END - timedelta(hours=2)).timestamp(), end=END.timestamp(), step_s=30
    )
    backfill_openmetrics(files, workdir)
    shutil.rmtree(workdir / "openmetrics")
    server = start_prometheus([], workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def grafana(prometheus: PrometheusServer) -> Iterator[GrafanaStandIn]:
    # "down" is a datasource Grafana knows whose Prometheus is not listening
    datasources = {"prom": prometheus.url, "down": f"http://127.0.0.1:{free_port()}"}
    with running_grafana(token=TOKEN, datasources=datasources) as stand_in:
        yield stand_in


def token_file(tmp_path: Path, token: str = TOKEN) -> Path:
    path = tmp_path / "grafana-token"
    path.write_text(token + "\n")
    return path


def through_grafana(
    grafana: GrafanaStandIn, tmp_path: Path, *, uid: str = "prom", token: str = TOKEN
) -> GrafanaMetrics:
    settings = GrafanaSettings(url=grafana.url, token_file=token_file(tmp_path, token), datasource_uid=uid)
    return GrafanaMetrics(settings, PrometheusSettings(max_staleness_s=600), slo=SLO_)


def test_the_proxy_url_is_grafanas_datasource_path(tmp_path: Path) -> None:
    settings = GrafanaSettings(url="https://grafana.example/", token_file=tmp_path / "t", datasource_uid="P1a2B3")
    assert settings.proxy_url() == "https://grafana.example/api/datasources/proxy/uid/P1a2B3"


def test_extraction_through_grafana_equals_prometheus_directly(
    prometheus: PrometheusServer, grafana: GrafanaStandIn, tmp_path: Path
) -> None:
    direct = PrometheusMetrics(PrometheusSettings(url=prometheus.url, max_staleness_s=600), slo=SLO_)
    proxied = through_grafana(grafana, tmp_path)
    start = END - timedelta(minutes=30)
    before = len(grafana.proxied)
    expected = direct.report(TARGET, start=start, end=END)
    got = proxied.report(TARGET, start=start, end=END)
    assert got == expected
    assert got.observation() == expected.observation()
    assert set(got.variants) == {"stable", "candidate"} and got.shape.arrival_rate_rps > 7
    # the range queries (hour-of-week profile) go through the same proxy
    assert proxied.query_range("sum(vllm:num_requests_running)", start, END, 60, "range") == direct.query_range(
        "sum(vllm:num_requests_running)", start, END, 60, "range"
    )
    assert grafana.proxied[before:] == ["prom /api/v1/query", "prom /api/v1/query_range"]


class NoTrials:
    def run(self, request: TrialRequest) -> Any:
        raise AssertionError("no trial while frozen")


class SilentAdvisor:
    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        return ()


def one_cycle(metrics: GrafanaMetrics) -> tuple[TargetStatus, list[str], RecordingNotifier]:
    clock = FakeClock(END)
    router = InMemoryRouter()
    notifier = RecordingNotifier()
    ports = Ports(
        metrics=metrics,
        load_tester=NoTrials(),
        router=router,
        advisor=SilentAdvisor(),
        notifier=notifier,
        cluster=InMemoryCluster(clock=clock, router=router),
        clock=clock,
    )
    status = TargetStatus(phase=Phase.OBSERVING, active_config=STOCK, replicas=2, updated_at=END)
    result = Reconciler(ports, Rules.from_policy(Policy())).reconcile(TARGET, status)
    return result.status, [type(a).__name__ for a in result.plan.actions], notifier


CASES = [
    pytest.param({"token": "glsa_wrong"}, "grafana-token-rejected", id="wrong-token"),
    pytest.param({"uid": "no-such-uid"}, "grafana-datasource-not-found", id="wrong-uid"),
    pytest.param({"uid": "down"}, "grafana-datasource-down", id="datasource-down"),
]


@pytest.mark.security
@pytest.mark.parametrize(("variant", "reason"), CASES)
def test_a_grafana_failure_freezes_the_loop_with_its_reason(
    grafana: GrafanaStandIn,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    variant: dict[str, str],
    reason: str,
) -> None:
    metrics = through_grafana(grafana, tmp_path, **variant)
    with pytest.raises(GrafanaUnavailable) as raised:
        metrics.observe(TARGET, start=END - timedelta(minutes=5), end=END)
    assert isinstance(raised.value, MetricsUnavailable) and raised.value.reason == reason

    caplog.set_level(logging.DEBUG)
    status, actions, notifier = one_cycle(metrics)
    assert status.phase is Phase.FROZEN
    assert status.frozen_reason is not None and reason in status.frozen_reason
    assert set(actions) == {"Notify"}  # the freeze warning, nothing acted on
    assert [n.title for _, n in notifier.posted] == ["Observation frozen"]
    assert reason in notifier.posted[0][1].reason
    # the token reaches neither the status, the notification (the Event's text) nor any log record
    for text in (status.model_dump_json(), notifier.posted[0][1].reason, caplog.text, str(raised.value)):
        assert TOKEN not in text
        assert "glsa_wrong" not in text


@pytest.mark.security
def test_a_refused_token_is_never_repeated_from_grafanas_answer(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    """The stand-in echoes the Authorization header it refused; the error quotes none of Grafana's answer."""
    metrics = through_grafana(grafana, tmp_path, token="glsa_echoed-back-by-the-server")
    with pytest.raises(GrafanaUnavailable) as raised:
        metrics.observe(TARGET, start=END - timedelta(minutes=5), end=END)
    assert raised.value.reason == "grafana-token-rejected"
    assert "glsa_echoed-back-by-the-server" not in str(raised.value)
    assert "echoed-back" not in str(raised.value) and "Bearer" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no traceback repeats the answer


@pytest.mark.security
def test_an_unreadable_token_file_freezes_and_names_the_file(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    settings = GrafanaSettings(url=grafana.url, token_file=tmp_path / "absent", datasource_uid="prom")
    metrics = GrafanaMetrics(settings, PrometheusSettings(max_staleness_s=600), slo=SLO_)
    refused = grafana.refused
    status, _, _ = one_cycle(metrics)
    assert status.phase is Phase.FROZEN
    assert status.frozen_reason is not None and "grafana-token-unreadable" in status.frozen_reason
    assert str(tmp_path / "absent") in status.frozen_reason
    assert grafana.refused == refused  # nothing was sent without a token


def test_a_rotated_token_is_read_at_the_next_query(grafana: GrafanaStandIn, tmp_path: Path) -> None:
    metrics = through_grafana(grafana, tmp_path, token="glsa_old")
    with pytest.raises(GrafanaUnavailable):
        metrics.observe(TARGET, start=END - timedelta(minutes=5), end=END)
    token_file(tmp_path)  # the Secret is updated in place
    assert metrics.observe(TARGET, start=END - timedelta(minutes=30), end=END).variants
