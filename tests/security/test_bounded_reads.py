"""Bounded reads from every outside endpoint: an answer nested 100,000 deep, a body or headers dripped one byte at a
time, an answer far over the byte cap or with too many series. Each adapter (Prometheus, Grafana, a canary's
``/metrics``, the quality gate, the chat model) fails with its own error and a machine-readable kind, the cycle
freezes instead of raising, and the hostile server gets to send only a bounded number of bytes before the client
hangs up (the deadlines here are 1 s; nothing is timed).

The endpoints are a loopback stand-in (:mod:`tests.support.hostile_http`); no Prometheus runs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controller import http_bounded
from controller.adapters.notify.recording import RecordingNotifier
from controller.advisor.chat import describe_failure
from controller.clock import FakeClock
from controller.decide import Rules
from controller.domain import STOCK, Phase
from controller.domain.codes import Code
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus
from controller.errors import InvalidInput, MetricsUnavailable, TemporaryError
from controller.observe.grafana_proxy import GrafanaMetrics, GrafanaSettings
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.policy import Policy
from controller.ports import TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from controller.trials.verdict.metrics_delta import scrape
from controller.trials.verdict.quality import generate
from tests.support.hostile_http import Behaviour, HostileServer, hostile

pytestmark = pytest.mark.security

END = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
TARGET = TargetRef("prod", "chat", "chat")
DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_ANSWER = b'{"status": "success", "data": {"resultType": "vector", "result": ' + DEEP + b"}}"
#: With a 1 s deadline and a byte every 0.2 s, a client that hangs up at its deadline lets a few bytes through; one
#: that waited for the whole drip would let them all through.
DRIP = Behaviour(mode="drip-body", interval_s=0.2, length=150)
HEADER_DRIP = Behaviour(mode="drip-headers", interval_s=0.2, length=150)
FEW_BYTES = 40


def prometheus(server: HostileServer, **settings: Any) -> PrometheusMetrics:
    return PrometheusMetrics(PrometheusSettings(url=server.url, timeout_s=1, **settings))


def grafana(server: HostileServer, tmp_path: Path) -> GrafanaMetrics:
    token = tmp_path / "token"
    token.write_text("glsa_bounded-read-token-0123456789")
    return GrafanaMetrics(
        GrafanaSettings(url=server.url, token_file=token, datasource_uid="prom"), PrometheusSettings(timeout_s=1)
    )


def observe(metrics: PrometheusMetrics) -> MetricsUnavailable:
    with pytest.raises(MetricsUnavailable) as raised:
        metrics.observe(TARGET, start=END - timedelta(minutes=5), end=END)
    return raised.value


# ----- the parse ----------------------------------------------------------------------------------------------------


def test_json_nested_too_deep_is_refused_before_parsing() -> None:
    with pytest.raises(http_bounded.ReadFailed) as raised:
        http_bounded.parse_json(DEEP)
    assert raised.value.kind == "too-deep"
    assert http_bounded.json_depth(b'{"a": "[[[[{{{{", "b": [[1]]}') == 3  # brackets inside strings do not count


def test_a_recursion_error_in_the_parser_is_a_read_failure() -> None:
    """With the depth check off, ``json.loads`` itself raises RecursionError: it is turned into a kind too."""
    with pytest.raises(http_bounded.ReadFailed) as raised:
        http_bounded.parse_json(DEEP, max_depth=10**9)
    assert raised.value.kind == "malformed"


# ----- Prometheus and Grafana ---------------------------------------------------------------------------------------


@pytest.fixture
def deep_server() -> Iterator[HostileServer]:
    with hostile(Behaviour(body=DEEP_ANSWER)) as server:
        yield server


def test_a_deeply_nested_answer_is_metrics_unavailable(deep_server: HostileServer, tmp_path: Path) -> None:
    assert observe(prometheus(deep_server)).kind == "too-deep"
    assert observe(grafana(deep_server, tmp_path)).kind == "too-deep"


@pytest.mark.parametrize("behaviour", [DRIP, HEADER_DRIP], ids=["body-drip", "header-drip"])
def test_a_dripped_answer_is_cut_off_at_the_deadline(behaviour: Behaviour, tmp_path: Path) -> None:
    with hostile(behaviour) as server:
        assert observe(prometheus(server)).kind == "deadline"
        assert server.last().sent < FEW_BYTES + 100  # the headers of the body drip, and a few bytes
        error = observe(grafana(server, tmp_path))
        assert error.kind == "deadline" and getattr(error, "reason", "") == "grafana-unreachable"
        assert server.last().sent < FEW_BYTES + 100
    dripped = server.served[0]
    assert dripped.sent < behaviour.length  # never the whole drip


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "until-close"])
def test_an_answer_over_the_byte_cap_is_cut_off(declare_length: bool) -> None:
    flood = Behaviour(mode="flood", length=64 * 1024 * 1024, declare_length=declare_length)
    with hostile(flood) as server:
        error = observe(prometheus(server, max_answer_bytes=64 * 1024))
        assert error.kind == "too-large"
        assert server.last().sent < flood.length // 2  # the client stopped reading long before the end


def test_an_answer_with_too_many_series_is_refused() -> None:
    series = [{"metric": {"i": str(i)}, "value": [0, "1"]} for i in range(11)]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}}).encode()
    with hostile(Behaviour(body=body)) as server:
        assert observe(prometheus(server, max_series=10)).kind == "too-many"


# ----- the cycle freezes ----------------------------------------------------------------------------------------------


class NoTrials:
    def run(self, request: TrialRequest) -> Any:
        raise AssertionError("no trial while metrics are unavailable")


class SilentAdvisor:
    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        return ()


def one_cycle(metrics: PrometheusMetrics) -> TargetStatus:
    clock = FakeClock(END)
    router = InMemoryRouter()
    ports = Ports(
        metrics=metrics,
        load_tester=NoTrials(),
        router=router,
        advisor=SilentAdvisor(),
        notifier=RecordingNotifier(),
        cluster=InMemoryCluster(clock=clock, router=router),
        clock=clock,
    )
    status = TargetStatus(phase=Phase.OBSERVING, active_config=STOCK, replicas=2, updated_at=END)
    return Reconciler(ports, Rules.from_policy(Policy())).reconcile(TARGET, status).status


@pytest.mark.parametrize(
    "behaviour", [Behaviour(body=DEEP_ANSWER), DRIP, HEADER_DRIP], ids=["deep", "body-drip", "header-drip"]
)
def test_the_cycle_freezes_on_a_hostile_answer(behaviour: Behaviour, tmp_path: Path) -> None:
    with hostile(behaviour) as server:
        for metrics in (prometheus(server), grafana(server, tmp_path)):
            status = one_cycle(metrics)
            assert status.phase is Phase.FROZEN
            assert {r.code for r in status.last_reasons} == {Code.FROZEN}  # the loop freezes, nothing raised


# ----- the other endpoints ------------------------------------------------------------------------------------------


def test_a_canary_metrics_page_is_read_within_bounds() -> None:
    with hostile(DRIP) as server:
        with pytest.raises(MetricsUnavailable) as raised:
            scrape(server.url, timeout_s=1)
        assert raised.value.kind == "deadline"
        assert server.last().sent < FEW_BYTES + 100
    flood = Behaviour(mode="flood", content_type="text/plain", length=64 * 1024 * 1024, declare_length=False)
    with hostile(flood) as server:
        with pytest.raises(MetricsUnavailable) as raised:
            scrape(server.url, timeout_s=5, max_bytes=64 * 1024)
        assert raised.value.kind == "too-large"


def test_the_quality_gate_reads_its_completions_within_bounds() -> None:
    with (
        hostile(Behaviour(body=b'{"choices": ' + DEEP + b"}")) as server,
        pytest.raises(InvalidInput, match="too-deep"),
    ):
        generate(server.url, "m", [1, 2, 3], max_tokens=4, deadline_s=5)
    with hostile(HEADER_DRIP) as server:
        with pytest.raises(TemporaryError, match="deadline"):
            generate(server.url, "m", [1, 2, 3], max_tokens=4, deadline_s=1)
        assert server.last().sent < FEW_BYTES


@pytest.mark.parametrize(
    ("behaviour", "kind"),
    [(Behaviour(body=DEEP), "too-deep"), (HEADER_DRIP, "deadline"), (DRIP, "deadline")],
    ids=["deep", "header-drip", "body-drip"],
)
def test_the_chat_models_answers_are_read_within_bounds(behaviour: Behaviour, kind: str) -> None:
    from controller.advisor.chat import make_chat_model
    from controller.advisor.endpoints import AdvisorEndpoint
    from controller.policy import LlmSettings

    with hostile(behaviour) as server:
        endpoint = AdvisorEndpoint(name="hostile", base_url=f"{server.url}/v1", model="m")
        model = make_chat_model(endpoint, LlmSettings(timeout_s=1))
        with pytest.raises(Exception) as raised:
            model.invoke("hello")
        assert describe_failure(raised.value).startswith(kind)
        if behaviour.mode != "canned":
            assert server.last().sent < FEW_BYTES + 100
