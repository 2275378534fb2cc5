"""The operator's Prometheus settings (``SHIFTLIGHT_PROMETHEUS_*``, as the chart sets them) reach the metrics source
and change what it sends and what it reads.

A stand-in for an authenticated Prometheus (Thanos, Mimir behind a gateway) runs on a loopback port in a thread: it
answers only requests that carry the bearer token it currently expects, records every query, and answers with
Prometheus-shaped series labelled as the test sets them. The metrics source is built as the kubernetes backend builds
it: ``OperatorSettings.from_env`` -> ``prometheus_settings()`` -> ``metrics_source``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.errors import MetricsUnavailable
from controller.observe.prometheus import PrometheusMetrics
from controller.reactor.settings import OperatorSettings

END = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
TARGET = TargetRef("prod", "chat", "llama-8b")


class AuthenticatedPrometheus:
    """``/api/v1/query``, behind a bearer token once ``token`` is set (401 without it); answers ``series``."""

    def __init__(self) -> None:
        self.token = ""
        self.series: list[dict[str, str]] = []
        self.seen: list[tuple[str, str]] = []  # (Authorization header, query) of every request
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                auth = self.headers.get("authorization", "")
                stand_in.seen.append((auth, form.get("query", [""])[0]))
                if stand_in.token and auth != f"Bearer {stand_in.token}":
                    self.answer(401, {"status": "error", "errorType": "unauthorized", "error": "bad token"})
                    return
                result = [{"metric": labels, "value": [END.timestamp(), "120"]} for labels in stand_in.series]
                self.answer(200, {"status": "success", "data": {"resultType": "vector", "result": result}})

            def answer(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def prometheus() -> Iterator[AuthenticatedPrometheus]:
    stand_in = AuthenticatedPrometheus()
    try:
        yield stand_in
    finally:
        stand_in.stop()


def source_from_env(env: dict[str, str]) -> PrometheusMetrics:
    """The metrics source the kubernetes backend builds from the operator's environment."""
    settings = OperatorSettings.from_env({"SHIFTLIGHT_BACKEND": "kubernetes", **env})
    return settings.metrics_source(settings.prometheus_settings(), slo=SLO())


def test_the_token_is_read_from_its_file_at_every_query_and_rotation_needs_no_restart(
    prometheus: AuthenticatedPrometheus, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    source = source_from_env(
        {"SHIFTLIGHT_PROMETHEUS_URL": prometheus.url, "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE": str(token)}
    )
    prometheus.token = "first-token"
    assert source.query("vector(1)", END, "probe") == []
    prometheus.token = "second-token"  # rotated at the source; the Secret's file follows
    with pytest.raises(MetricsUnavailable) as refused:
        source.query("vector(1)", END, "probe")
    assert "first-token" not in str(refused.value)  # the token sent is never repeated
    token.write_text("second-token\n")
    assert source.query("vector(1)", END, "probe") == []  # the same source: no restart
    assert [auth for auth, _ in prometheus.seen] == ["Bearer first-token", "Bearer first-token", "Bearer second-token"]


def test_without_a_token_file_no_token_is_sent(prometheus: AuthenticatedPrometheus) -> None:
    source = source_from_env({"SHIFTLIGHT_PROMETHEUS_URL": prometheus.url})
    prometheus.token = "required"
    with pytest.raises(MetricsUnavailable):
        source.query("vector(1)", END, "probe")
    assert [auth for auth, _ in prometheus.seen] == [""]


def requests_by_variant(source: PrometheusMetrics) -> dict[str, float]:
    counts = source.slo_counts(TARGET, SLO(), end=END, windows_s=(300,))
    return {variant: windows[300.0][1] for variant, windows in counts.items()}


def test_the_variant_label_changes_which_series_are_read(prometheus: AuthenticatedPrometheus) -> None:
    prometheus.series = [
        {"shiftlight_query": "v_requests@300s", "track": "stable"},
        {"shiftlight_query": "v_requests@300s", "track": "candidate"},
    ]
    relabelled = source_from_env(
        {"SHIFTLIGHT_PROMETHEUS_URL": prometheus.url, "SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL": "track"}
    )
    assert requests_by_variant(relabelled) == {"stable": 120.0, "candidate": 120.0}
    assert "by (track)" in prometheus.seen[-1][1] and "by (variant)" not in prometheus.seen[-1][1]
    default = source_from_env({"SHIFTLIGHT_PROMETHEUS_URL": prometheus.url})
    with pytest.raises(MetricsUnavailable, match="series without label 'variant'"):
        requests_by_variant(default)
    assert "by (variant)" in prometheus.seen[-1][1]


def test_the_default_variant_reads_series_without_the_label(prometheus: AuthenticatedPrometheus) -> None:
    prometheus.series = [{"shiftlight_query": "v_requests@300s"}]  # no relabelling in the scrape yet
    env = {"SHIFTLIGHT_PROMETHEUS_URL": prometheus.url}
    with pytest.raises(MetricsUnavailable, match="series without label 'variant'"):
        requests_by_variant(source_from_env(env))
    defaulted = source_from_env({**env, "SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT": "stable"})
    assert requests_by_variant(defaulted) == {"stable": 120.0}
