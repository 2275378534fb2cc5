"""No operator credential in anything a tenant or Slack reads.

An OpenAI-compatible endpoint that echoes the API key in its 401 (raw, base64 at each byte alignment, hex, upper
case) used to put the whole key into the agent's fallback reason, then into the proposal's rationale, the
``RunTrial`` reason in ``status.last_reasons`` and the Slack digest. A Prometheus URL with ``user:pass@`` was
printed in every ``MetricsUnavailable`` and by ``AdvisorEndpoint.describe()``, and a Prometheus error answer was
quoted (300 characters), so a token echoed in base64, hex or upper case survived the scrubber.

The endpoints are a loopback stand-in (:mod:`tests.support.hostile_http`); no Prometheus or LLM runs."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.notify.slack_format import digest_entry, digest_message
from controller.advisor.chat import make_chat_model
from controller.advisor.endpoints import AdvisorEndpoint
from controller.advisor.graph import AgentAdvisor
from controller.clock import FakeClock
from controller.decide import OptimizerAdvisor, Rules
from controller.domain import STOCK, LengthDistribution, Observation, Phase, TrafficShape
from controller.domain.observation import TargetRef, VariantStats
from controller.domain.proposal import AdvisorContext
from controller.domain.scrub import forget_secrets, register_secret, scrub_known, strip_userinfo
from controller.domain.slo import SLO
from controller.domain.status import Reason, TargetStatus, TuningRound
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.errors import MetricsUnavailable
from controller.observe.grafana_proxy import GrafanaMetrics, GrafanaSettings
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.policy import Policy, load_policy
from controller.ports import TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter
from tests.support.hostile_http import Behaviour, HostileServer, hostile

pytestmark = pytest.mark.security

KEY = "sk-proj-Z3kq8LmN2pQ7rStUvWx9yAbCdEfGh0123"
TOKEN = "prom_tok-4f9a1c2b3d4e5f60718293a4b5c6d7e8"
PASSWORD = "s3cr3t-basic-Passw0rd"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TARGET = TargetRef("team-a", "chat", "llama")
SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=16.0,
    prompt_tokens=LengthDistribution(mean=512, cv=0.5),
    output_tokens=LengthDistribution(mean=128, cv=0.5),
)


def escaped(secret: str) -> dict[str, str]:
    """The forms an upstream may echo ``secret`` in."""
    raw = secret.encode()
    forms = {"raw": secret, "upper": secret.upper(), "hex": raw.hex(), "HEX": raw.hex().upper()}
    for offset, prefix in enumerate(("", "x", "xy")):
        b64 = base64.b64encode(prefix.encode() + raw).decode()
        forms[f"base64@{offset}"] = b64
        forms[f"base64url-nopad@{offset}"] = base64.urlsafe_b64encode(prefix.encode() + raw).decode().rstrip("=")
    forms["basic-auth"] = base64.b64encode(b"Bearer " + raw).decode()
    return forms


def leaks(text: str, secret: str) -> list[str]:
    """Which forms of ``secret`` (or the middle half of each) ``text`` still holds."""
    out = []
    for name, form in escaped(secret).items():
        core = form[len(form) // 4 : -len(form) // 4] if len(form) > 16 else form
        if form in text or core in text:
            out.append(name)
    return out


def echoing(secret: str) -> bytes:
    """An error body quoting ``secret`` in every form, OpenAI style."""
    message = "Incorrect API key provided: " + " ".join(f"{k}={v}" for k, v in escaped(secret).items())
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": "bad_key"}}).encode()


@pytest.fixture(autouse=True)
def no_registered_secrets() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


# ----- the scrubber ---------------------------------------------------------------------------------------------------


def test_every_escaped_form_of_a_registered_secret_is_scrubbed() -> None:
    register_secret(KEY)
    for name, form in escaped(KEY).items():
        shown = scrub_known(f"upstream said: {form} (end)")
        assert not leaks(shown, KEY), name
        assert shown.startswith("upstream said: ") and shown.endswith(" (end)")
    assert scrub_known("the model passed 97% of checks") == "the model passed 97% of checks"


def test_url_userinfo_is_stripped_from_every_message() -> None:
    assert strip_userinfo("GET https://bob:hunter2@prom.example:9090/api failed") == (
        "GET https://prom.example:9090/api failed"
    )
    assert "hunter2" not in Reason(code="x", message="see http://u:hunter2@h/x").message


# ----- the LLM endpoint -----------------------------------------------------------------------------------------------


class FineMetrics:
    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        stable = VariantStats(variant="stable", requests=3000, ttft_p95_s=0.3, tpot_p95_s=0.02, output_tokens_per_s=300)
        return Observation(target=str(target), start=start, end=end, shape=SHAPE, variants={"stable": stable})


class Canary:
    def run(self, request: TrialRequest) -> TrialResult:
        pct = Percentiles(p50=0.1, p95=0.2, p99=0.3)
        return TrialResult(
            config=request.config,
            shape=request.shape,
            slo=request.slo,
            status=TrialStatus.MEASURED,
            completed=100,
            output_tokens_per_s=1000.0,
            ttft_s=pct,
            tpot_s=pct,
        )


@pytest.fixture
def echoing_llm() -> Iterator[HostileServer]:
    with hostile(Behaviour(status=401, body=echoing(KEY))) as server:
        yield server


def agent(server: HostileServer, tmp_path: Path) -> tuple[Policy, AgentAdvisor]:
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    endpoint = AdvisorEndpoint(name="echo", base_url=f"{server.url}/v1", model="m", api_key_file=key_file)
    policy = load_policy(Path(__file__).parents[2] / "policies" / "v1" / "default.yaml")
    policy = policy.model_copy(update={"llm": policy.llm.model_copy(update={"enabled": True, "advisor": "echo"})})
    chat = make_chat_model(endpoint, policy.llm)
    return policy, AgentAdvisor(policy, chat_model=chat, optimizer=OptimizerAdvisor(policy))


def test_a_key_echoed_by_the_llm_endpoint_reaches_no_reason_status_or_digest(
    echoing_llm: HostileServer, tmp_path: Path
) -> None:
    policy, advisor = agent(echoing_llm, tmp_path)
    result = advisor.advise(AdvisorContext(TARGET, SHAPE, SLO(), STOCK, (), 2))
    assert echoing_llm.served and echoing_llm.served[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent
    assert result.fallback_reason.startswith("the chat model is unavailable: HTTP 401")
    assert not leaks(result.fallback_reason, KEY)
    assert result.proposals and all(not leaks(p.rationale, KEY) for p in result.proposals)

    clock = FakeClock(NOW)
    router = InMemoryRouter()
    cluster = InMemoryCluster(clock=clock, router=router)
    cluster.deploy(TARGET, "stable", STOCK, 2)
    ports = Ports(
        metrics=FineMetrics(),
        load_tester=Canary(),
        router=router,
        advisor=advisor,
        notifier=RecordingNotifier(),
        cluster=cluster,
        clock=clock,
    )
    round_ = TuningRound(id="day-1", window="all-day", shape=SHAPE, started_at=NOW - timedelta(minutes=5), reason="x")
    status = TargetStatus(phase=Phase.TRIALLING, tuning=round_, replicas=2, updated_at=NOW)
    cycle = Reconciler(ports, Rules.from_policy(policy)).reconcile(TARGET, status)
    assert "RunTrial" in [type(a).__name__ for a in cycle.plan.actions]
    trial_reasons = [r.message for r in cycle.status.last_reasons if "optimizer takes over" in r.message]
    assert trial_reasons  # the rationale, with why the optimizer proposed, reached the status
    assert not leaks(cycle.status.model_dump_json(), KEY)
    digest = json.dumps(digest_message(NOW.date(), [digest_entry(TARGET, cycle.status)]))
    assert not leaks(digest, KEY)


def test_the_slack_digest_scrubs_a_registered_key_whatever_the_status_holds() -> None:
    register_secret(KEY)
    raw = TargetStatus(updated_at=NOW).model_copy(
        update={"frozen_reason": "upstream: " + " ".join(escaped(KEY).values()) + " at https://u:pw@h/"}
    )
    digest = json.dumps(digest_message(NOW.date(), [digest_entry(TARGET, raw)]))
    assert not leaks(digest, KEY) and "u:pw@" not in digest


def test_describe_prints_no_url_userinfo() -> None:
    endpoint = AdvisorEndpoint(name="hosted", base_url=f"https://svc:{PASSWORD}@llm.example/v1", model="m")
    assert PASSWORD not in endpoint.describe() and "svc:" not in endpoint.describe()
    assert "https://llm.example/v1" in endpoint.describe()


# ----- Prometheus and Grafana -----------------------------------------------------------------------------------------


def observe(metrics: PrometheusMetrics) -> MetricsUnavailable:
    with pytest.raises(MetricsUnavailable) as raised:
        metrics.observe(TARGET, start=NOW - timedelta(minutes=5), end=NOW)
    return raised.value


def test_a_prometheus_url_with_userinfo_never_appears_in_an_error() -> None:
    with hostile(Behaviour(status=500, body=b"{}")) as server:
        url = server.url.replace("http://", f"http://admin:{PASSWORD}@")
        error = observe(PrometheusMetrics(PrometheusSettings(url=url, timeout_s=2)))
        assert error.kind == "http-status"
        assert PASSWORD not in str(error) and "admin:" not in str(error)
        assert server.url in str(error)  # the URL without its userinfo
        assert not leaks(str(error), PASSWORD)
    error = observe(PrometheusMetrics(PrometheusSettings(url=f"http://admin:{PASSWORD}@127.0.0.1:9", timeout_s=2)))
    assert error.kind == "connection" and PASSWORD not in str(error) and "admin:" not in str(error)


@pytest.mark.parametrize("status", [500, 400, 401])
def test_a_prometheus_error_answer_echoing_the_token_is_not_quoted(status: int) -> None:
    body = json.dumps({"status": "error", "errorType": "internal", "error": echoing(TOKEN).decode()}).encode()
    with hostile(Behaviour(status=status, body=body)) as server:
        error = observe(PrometheusMetrics(PrometheusSettings(url=server.url, bearer_token=TOKEN, timeout_s=2)))
    assert error.kind == "http-status"
    assert f"HTTP {status} (internal)" in str(error)  # the status and Prometheus' error word, nothing else
    assert not leaks(str(error), TOKEN)
    assert "Incorrect" not in str(error)


def test_a_grafana_url_with_userinfo_never_appears_in_an_error(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("glsa_" + TOKEN)
    with hostile(Behaviour(status=502, body=echoing("glsa_" + TOKEN))) as server:
        url = server.url.replace("http://", f"http://admin:{PASSWORD}@")
        metrics = GrafanaMetrics(
            GrafanaSettings(url=url, token_file=token, datasource_uid="prom"), PrometheusSettings(timeout_s=2)
        )
        error = observe(metrics)
    assert getattr(error, "reason", "") == "grafana-datasource-down"
    assert PASSWORD not in str(error) and "admin:" not in str(error)
    assert not leaks(str(error), "glsa_" + TOKEN)
