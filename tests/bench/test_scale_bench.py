"""bench/scale.py's readings: Prometheus's own request count by API handler, what counts as a trial in flight
(a status write then is a change, not an idle one), and the cycle a spec change's reaction is held to."""

from __future__ import annotations

import pytest

from bench import scale

EXPOSITION = """\
# HELP prometheus_http_requests_total Counter of HTTP requests.
# TYPE prometheus_http_requests_total counter
prometheus_http_requests_total{code="200",handler="/-/ready"} 7
prometheus_http_requests_total{code="200",handler="/api/v1/query"} 468
prometheus_http_requests_total{code="400",handler="/api/v1/query"} 2
prometheus_http_requests_total{code="200",handler="/api/v1/query_range"} 1023
prometheus_http_requests_total{code="200",handler="/metrics"} 12
"""


def test_prometheus_requests_are_counted_by_api_handler_over_every_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "get", lambda url: EXPOSITION)
    assert scale.prometheus_requests("http://prometheus") == {"/api/v1/query": 470, "/api/v1/query_range": 1023}
    monkeypatch.setattr(scale, "get", lambda url: "")
    assert scale.prometheus_requests("http://prometheus") == {}


def test_a_pass_reports_queries_per_cycle() -> None:
    assert scale.PrometheusPass(cycles=620, queries=1491, by_handler={}, wall_s=1.0).per_cycle == pytest.approx(
        2.405, 1e-3
    )
    assert scale.PrometheusPass(cycles=0, queries=0, by_handler={}, wall_s=0.0).per_cycle == 0.0


@pytest.mark.parametrize(
    ("reasons", "running"),
    [
        ([{"code": "trials-running", "message": "waiting for 1 trial(s): stock"}], True),
        ([{"code": "observing", "message": "observing: 0.07 req/s"}], False),
        ([], False),
        (None, False),
    ],
)
def test_a_status_with_trials_in_flight_is_not_idle(reasons: object, running: bool) -> None:
    assert scale.running({"phase": "Observing", "last_reasons": reasons}) is running


def test_the_reaction_goal_is_one_cycle_as_the_operator_sleeps_it_plus_five_seconds() -> None:
    assert scale.cycle_length_s(1.0) == 60.0  # real time: an Observing TunedService's requeue
    assert scale.cycle_length_s(3000.0) == pytest.approx(0.02)  # the bench's compression
    assert scale.cycle_length_s(1e6) == 0.02  # never below the loop's shortest sleep
    assert scale.REACTION_SLACK_S == 5.0
