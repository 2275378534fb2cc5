"""One scrubber for the Grafana token (and Prometheus' own bearer token): whatever Grafana (or the Prometheus behind
it) answers, no error raised while the token is loaded repeats it, whole, in part or escaped, and no Grafana error
quotes the answer's body. A 200 answer whose sample is malformed used to carry the raw sample (here, the token) into
the TunedService's status.

The stand-in here is a loopback server answering each query with a canned body; no Prometheus runs."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from controller.adapters.notify.recording import RecordingNotifier
from controller.clock import FakeClock
from controller.decide import Rules
from controller.domain import STOCK, Phase
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.scrub import fragment_length, scrub
from controller.domain.status import TargetStatus
from controller.errors import MetricsUnavailable
from controller.observe.grafana_proxy import GrafanaMetrics, GrafanaSettings
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.policy import Policy
from controller.ports import TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.testing.memory import InMemoryCluster, InMemoryRouter

pytestmark = pytest.mark.security

TOKEN = "glsa_s3cr3t-service-account-token_0123456789"
HALF, OTHER_HALF = TOKEN[: len(TOKEN) // 2], TOKEN[len(TOKEN) // 2 :]
U_ESCAPED = "".join(f"\\u{ord(c):04x}" for c in TOKEN)
END = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
TARGET = TargetRef("prod", "chat", "chat")


def leaked_forms(text: str) -> list[str]:
    """Which forms of the token ``text`` still holds (empty: none)."""
    forms = {
        "whole": TOKEN,
        "first half": HALF,
        "second half": OTHER_HALF,
        "\\u-escaped": U_ESCAPED,
        "\\u-escaped upper": U_ESCAPED.upper().replace("\\U", "\\u"),
        "JSON-escaped \\u": U_ESCAPED.replace("\\", "\\\\"),
        "URL-encoded": "".join(f"%{ord(c):02X}" for c in TOKEN),
        "URL-quoted": urllib.parse.quote(TOKEN, safe=""),
    }
    return [name for name, form in forms.items() if form in text or form[: len(form) // 2] in text]


# ----- the scrubber itself ----------------------------------------------------------------------------------------

ECHOES = [
    ("whole", f"Bearer {TOKEN} was refused"),
    ("first-half", f"token starts {HALF}..."),
    ("second-half", f"...ends {OTHER_HALF}"),
    ("middle-quarter-plus", f"saw {TOKEN[10:24]} in the header"),
    ("u-escaped", json.dumps({"auth": "Bearer " + TOKEN}, ensure_ascii=False).replace(TOKEN, U_ESCAPED)),
    ("u-escaped-upper", U_ESCAPED.upper().replace("\\U", "\\u")),
    ("json-escaped-u", json.dumps({"auth": U_ESCAPED})),
    ("half-u-escaped", "".join(f"\\u{ord(c):04x}" for c in HALF)),
    ("mixed", TOKEN[:8] + "".join(f"\\u{ord(c):04x}" for c in TOKEN[8:20]) + TOKEN[20:]),
    ("url-encoded", "".join(f"%{ord(c):02x}" for c in TOKEN)),
    ("url-quoted", "authorization=Bearer%20" + urllib.parse.quote(TOKEN, safe="")),
    (
        "bytes-repr",
        repr(("Bearer " + TOKEN).encode()).replace(TOKEN[5:20], "".join(f"\\x{ord(c):02x}" for c in TOKEN[5:20])),
    ),
    ("html-entities", "".join(f"&#{ord(c)};" for c in TOKEN)),
]


@pytest.mark.parametrize("text", [pytest.param(t, id=i) for i, t in ECHOES])
def test_every_form_of_the_token_is_scrubbed(text: str) -> None:
    clean = scrub(text, TOKEN)
    assert leaked_forms(clean) == []
    assert "<redacted>" in clean


@pytest.mark.parametrize(
    "text",
    [
        "grafana datasource prom: HTTP 401: Grafana refused the token",
        "a glsa_ prefix alone, and 0123 digits",
        TOKEN[: fragment_length(TOKEN) - 1],  # shorter than a fragment: ordinary text
        "",
    ],
)
def test_text_without_the_token_is_unchanged(text: str) -> None:
    assert scrub(text, TOKEN) == text


# ----- every error raised while the token is loaded ---------------------------------------------------------------


def vector(*samples: Any) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": list(samples)}}).encode()


#: (case, HTTP status, body) of one answer to every query.
ANSWERS = [
    ("malformed-sample", 200, vector({"metric": {}, "value": [1, TOKEN]})),
    ("malformed-sample-half", 200, vector({"metric": {}, "value": [1, HALF]})),
    ("malformed-labels", 200, vector({"metric": [TOKEN], "value": [1, "1"]})),
    ("sample-without-value", 200, vector({"metric": {"auth": TOKEN}})),
    ("token-in-a-label", 200, vector({"metric": {"auth": TOKEN, "__name__": "requests"}, "value": [1, "1"]})),
    ("u-escaped-label", 200, vector({"metric": {"auth": U_ESCAPED}, "value": [1, "x"]})),
    ("no-data", 200, json.dumps({"status": "success", "echo": TOKEN}).encode()),
    ("not-json", 200, f"<html>Bearer {TOKEN}</html>".encode()),
    ("401-echo", 401, json.dumps({"message": "invalid API key", "header": "Bearer " + TOKEN}).encode()),
    ("401-u-escaped-echo", 401, ('{"header": "Bearer ' + U_ESCAPED + '"}').encode()),
    ("500-url-encoded-echo", 500, ("authorization=Bearer%20" + urllib.parse.quote(TOKEN, safe="")).encode()),
]


@pytest.fixture
def answer() -> Iterator[list[tuple[int, bytes]]]:
    canned: list[tuple[int, bytes]] = [(200, b"{}")]

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            status, body = canned[0]
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    canned.append((0, f"http://127.0.0.1:{server.server_address[1]}".encode()))
    try:
        yield canned
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def through(answer: list[tuple[int, bytes]], tmp_path: Path, status: int, body: bytes, door: str) -> PrometheusMetrics:
    answer[0] = (status, body)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    url = answer[1][1].decode()
    if door == "prometheus":  # Prometheus directly, with its own bearer token file
        return PrometheusMetrics(PrometheusSettings(url=url, bearer_token_file=token_file, retries=0))
    settings = GrafanaSettings(url=url, token_file=token_file, datasource_uid="prom")
    return GrafanaMetrics(settings, PrometheusSettings(retries=0))


class SilentAdvisor:
    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        return ()


class NoTrials:
    def run(self, request: TrialRequest) -> Any:
        raise AssertionError("no trial while frozen")


def one_cycle(metrics: PrometheusMetrics) -> tuple[TargetStatus, RecordingNotifier]:
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
    return Reconciler(ports, Rules.from_policy(Policy())).reconcile(TARGET, status).status, notifier


@pytest.mark.parametrize("door", ["grafana", "prometheus"])
@pytest.mark.parametrize(("status", "body"), [pytest.param(s, b, id=c) for c, s, b in ANSWERS])
def test_no_error_repeats_the_token_or_the_answer(
    answer: list[tuple[int, bytes]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    status: int,
    body: bytes,
    door: str,
) -> None:
    metrics = through(answer, tmp_path, status, body, door)
    start = END - timedelta(minutes=5)
    for call in (
        lambda: metrics.observe(TARGET, start=start, end=END),
        lambda: metrics.query("up", END, "query"),
        lambda: metrics.query_range("up", start, END, 60, "range"),
        lambda: metrics.slo_counts(TARGET, Policy().slo, end=END),
    ):
        try:
            call()
        except MetricsUnavailable as exc:
            assert leaked_forms(str(exc)) == [], str(exc)
            assert exc.__cause__ is None and exc.__suppress_context__  # no traceback quotes the answer either
            if door == "grafana":  # Grafana's errors quote no body; Prometheus' keep its (scrubbed) error text
                assert "<html>" not in str(exc) and "invalid API key" not in str(exc)
    for got in metrics.report_many([TARGET], start=start, end=END).values():
        assert isinstance(got, MetricsUnavailable) and leaked_forms(str(got)) == []
    # one cycle of the loop: frozen, and neither the status tenants read nor the notification holds the token
    frozen, notifier = one_cycle(metrics)
    assert frozen.phase is Phase.FROZEN and frozen.frozen_reason
    for text in (frozen.model_dump_json(), *(n.reason for _, n in notifier.posted), caplog.text):
        assert leaked_forms(text) == [], text
