"""The Prometheus adapter against a real Prometheus scraping simulator replicas (vLLM's metric names and labels).

Targets, all scraped every second:
- ``prod/sim-chat``: two replicas, labelled ``variant=stable`` and ``variant=candidate``, under known Poisson load;
- ``prod/<a model name with quotes and braces>``: its own replica and load, to prove escaping and isolation;
- ``prod/sim-idle``: no traffic (NaN means, zero requests);
- ``partial/sim-chat``: the stable replica again, with the e2e-latency histogram dropped at scrape time;
- ``nolabel/sim-chat``: the stable replica again, without a variant label.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controller.decide.signals.slo_signal import BurnRule, SloSignalState, WindowCounts, assess
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.errors import MetricsUnavailable
from controller.observe import promql
from controller.observe import queries as q
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.observe.report import TrafficReport
from tests.observe.support import DelayProxy, LoadResult, poisson_load, running_simulator
from tests.support.prometheus_server import PrometheusServer, ScrapeTarget, running_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

WEIRD = 'we"ird} or {x="1\\'
PROMPT, OUTPUT = 256, 32
LOAD_S = 24.0


@dataclass
class World:
    prometheus: PrometheusServer
    loads: dict[str, LoadResult]
    start: datetime
    end: datetime

    def source(self, **settings: object) -> PrometheusMetrics:
        return PrometheusMetrics(PrometheusSettings(url=self.prometheus.url, **settings))  # type: ignore[arg-type]

    def client_rate(self, *names: str) -> float:
        s, e = self.start.timestamp(), self.end.timestamp()
        return sum(self.loads[n].arrivals_in(s, e) for n in names) / (e - s)

    def client_concurrency(self, *names: str) -> float:
        s, e = self.start.timestamp(), self.end.timestamp()
        return sum(self.loads[n].concurrency_in(s, e) for n in names)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("observe-sim")
    with (
        running_simulator("sim-chat", tmp, seed=1) as stable,
        running_simulator("sim-chat", tmp, seed=2) as candidate,
        running_simulator(WEIRD, tmp, seed=3) as weird,
        running_simulator("sim-idle", tmp, seed=4) as idle,
    ):
        targets = [
            ScrapeTarget(stable.address, {"namespace": "prod", "variant": "stable"}),
            ScrapeTarget(candidate.address, {"namespace": "prod", "variant": "candidate"}),
            ScrapeTarget(weird.address, {"namespace": "prod", "variant": "stable"}),
            ScrapeTarget(idle.address, {"namespace": "prod", "variant": "stable"}),
            ScrapeTarget(
                stable.address,
                {"namespace": "partial", "variant": "stable"},
                drop_metrics="vllm:e2e_request_latency_seconds.*",
            ),
            ScrapeTarget(stable.address, {"namespace": "nolabel"}),
        ]
        with running_prometheus(targets, Path(tmp) / "prometheus") as prom:
            prom.wait_for_samples('count(up == 1) == 6 and count(vllm:num_requests_running{model_name="sim-idle"})')
            loads: dict[str, LoadResult] = {}
            plan = {"stable": (stable, 4.0, 11), "candidate": (candidate, 2.0, 12), "weird": (weird, 1.0, 13)}

            def drive(name: str) -> None:
                sim, rate, seed = plan[name]
                loads[name] = poisson_load(
                    sim.endpoint, sim.model, rate=rate, duration_s=LOAD_S, prompt_tokens=PROMPT,
                    output_tokens=OUTPUT, seed=seed,
                )  # fmt: skip

            threads = [threading.Thread(target=drive, args=(n,)) for n in plan]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            first = min(load.started for load in loads.values())
            start = datetime.fromtimestamp(round(first) + 4, UTC)
            end = start + timedelta(seconds=round(LOAD_S) - 7)
            time.sleep(max(0.0, end.timestamp() + 2.5 - time.time()))  # let Prometheus scrape past the window
            yield World(prom, loads, start, end)


def report(world: World, target: TargetRef, **settings: object) -> TrafficReport:
    return world.source(**settings).report(target, start=world.start, end=world.end)


CHAT = TargetRef("prod", "chat", "sim-chat")


def test_shape_matches_the_load_sent(world: World) -> None:
    r = report(world, CHAT)
    sent_rate = world.client_rate("stable", "candidate")
    assert r.shape.arrival_rate_rps == pytest.approx(sent_rate, rel=0.10)
    assert r.shape.prompt_tokens.mean == pytest.approx(PROMPT, rel=0.10)
    assert r.shape.output_tokens.mean == pytest.approx(OUTPUT, rel=0.10)
    assert r.shape.prompt_tokens.cv < 0.05 and r.shape.output_tokens.cv < 0.05  # fixed lengths
    assert r.shape.concurrency == pytest.approx(world.client_concurrency("stable", "candidate"), rel=0.15)
    assert r.queries == 1


def test_variants_are_split_by_label(world: World) -> None:
    r = report(world, CHAT, default_variant=None)
    assert set(r.variants) == {"stable", "candidate"}
    s, e = world.start.timestamp(), world.end.timestamp()
    for name in ("stable", "candidate"):
        stats = r.variants[name].stats
        sent = world.loads[name].arrivals_in(s, e)
        assert stats.requests == pytest.approx(sent, rel=0.15, abs=2)
        assert stats.errors == 0
        assert stats.ttft_p95_s is not None and stats.tpot_p95_s is not None
        assert stats.output_tokens_per_s == pytest.approx(sent * OUTPUT / (e - s), rel=0.15)
    assert r.variants["stable"].stats.requests > r.variants["candidate"].stats.requests


def test_good_requests_counted_against_an_slo(world: World) -> None:
    lenient = PrometheusMetrics(PrometheusSettings(url=world.prometheus.url), slo=SLO(ttft_seconds=60, tpot_seconds=5))
    strict = PrometheusMetrics(
        PrometheusSettings(url=world.prometheus.url), slo=SLO(ttft_seconds=0.001, tpot_seconds=0.01)
    )
    ok = lenient.report(CHAT, start=world.start, end=world.end).variants["stable"].stats
    bad = strict.report(CHAT, start=world.start, end=world.end).variants["stable"].stats
    assert ok.good_requests == ok.requests
    assert bad.good_requests == 0


def test_model_name_with_quotes_and_braces_is_escaped_and_isolated(world: World) -> None:
    weird = TargetRef("prod", "weird", WEIRD)
    selector = PrometheusSettings().selector(weird)
    assert selector.matchers() == '{model_name="we\\"ird} or {x=\\"1\\\\",namespace="prod"}'
    r = report(world, weird)
    # only the weird replica's traffic, not sim-chat's (6 req/s)
    assert r.shape.arrival_rate_rps == pytest.approx(world.client_rate("weird"), rel=0.25)
    assert set(r.variants) == {"stable"}


def test_injection_attempt_matches_nothing(world: World) -> None:
    hostile = TargetRef("prod", "x", 'sim-chat"} or vector(1) or {model_name="')
    with pytest.raises(MetricsUnavailable, match="no series") as info:
        report(world, hostile)
    assert 'sim-chat\\"} or vector(1) or {model_name=\\"' in str(info.value)


def test_wrong_selector_is_empty_data(world: World) -> None:
    with pytest.raises(MetricsUnavailable, match=r"prod/x: freshest_sample: no series"):
        report(world, TargetRef("prod", "x", "no-such-model"))


def test_quiet_target_has_no_shape(world: World) -> None:
    idle = TargetRef("prod", "idle", "sim-idle")
    with pytest.raises(MetricsUnavailable, match=r"requests: 0\.0 requests finished"):
        report(world, idle)
    with pytest.raises(MetricsUnavailable, match="prompt_mean: value is nan"):
        report(world, idle, min_requests=0)


def test_partial_data_names_the_missing_field(world: World) -> None:
    with pytest.raises(MetricsUnavailable, match="concurrency_littles_law: no series"):
        report(world, TargetRef("partial", "chat", "sim-chat"))


def test_different_label_set_is_refused_unless_mapped(world: World) -> None:
    target = TargetRef("nolabel", "chat", "sim-chat")
    with pytest.raises(MetricsUnavailable, match="series without label 'variant'"):
        report(world, target)
    assert set(report(world, target, default_variant="stable").variants) == {"stable"}


def test_stale_data_is_refused(world: World) -> None:
    source = world.source(max_staleness_s=60)
    later = world.end + timedelta(seconds=200)
    with pytest.raises(MetricsUnavailable, match="newest sample is"):
        source.report(CHAT, start=later - timedelta(seconds=60), end=later)


def test_slow_prometheus_times_out(world: World) -> None:
    with DelayProxy(world.prometheus.url, delay_s=3.0) as proxy:
        source = PrometheusMetrics(PrometheusSettings(url=proxy.url, timeout_s=0.5))
        with pytest.raises(MetricsUnavailable, match="timed out"):
            source.report(CHAT, start=world.start, end=world.end)
        slow_but_in_time = PrometheusMetrics(PrometheusSettings(url=proxy.url, timeout_s=10))
        proxy.delay_s = 0.5
        assert slow_but_in_time.report(CHAT, start=world.start, end=world.end).queries == 1


def test_bearer_token_is_read_from_a_mounted_file(world: World, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with DelayProxy(world.prometheus.url) as proxy:
        source = PrometheusMetrics(PrometheusSettings(url=proxy.url, bearer_token_file=token))
        source.report(CHAT, start=world.start, end=world.end)
        token.write_text("rotated")
        source.report(CHAT, start=world.start, end=world.end)
    assert [h.get("authorization") for h in proxy.seen_headers] == ["Bearer s3cret", "Bearer rotated"]


def test_query_count_per_cycle(world: World) -> None:
    source = world.source()
    for _ in range(3):
        source.report(CHAT, start=world.start, end=world.end)
    assert source.queries_total == 3
    assert promql.QUERY_TAG in promql.batch(q.observe_queries(promql.Selector(model_name="m"), "60s"))


def test_one_query_for_the_whole_fleet_matches_per_target_reports(world: World) -> None:
    weird = TargetRef("prod", "weird", WEIRD)
    partial = TargetRef("partial", "chat", "sim-chat")
    nolabel = TargetRef("nolabel", "chat", "sim-chat")
    missing = TargetRef("prod", "x", "no-such-model")
    source = world.source()
    reports = source.report_many([CHAT, weird, partial, nolabel, missing], start=world.start, end=world.end)
    assert source.queries_total == 1
    for target in (CHAT, weird):
        fleet, single = reports[target], report(world, target)
        assert isinstance(fleet, TrafficReport)
        assert fleet.shape.arrival_rate_rps == pytest.approx(single.shape.arrival_rate_rps, rel=1e-9)
        assert fleet.shape.concurrency == pytest.approx(single.shape.concurrency, rel=1e-9)
        assert fleet.signals.ttft_s == single.signals.ttft_s
        assert fleet.variants.keys() == single.variants.keys()
    assert isinstance(reports[partial], MetricsUnavailable)
    assert "concurrency_littles_law: no series" in str(reports[partial])
    assert "series without label 'variant'" in str(reports[nolabel])
    assert "freshest_sample: no series" in str(reports[missing])


def test_fleet_query_failure_reaches_every_target(world: World) -> None:
    with DelayProxy(world.prometheus.url, delay_s=2.0) as proxy:
        source = PrometheusMetrics(PrometheusSettings(url=proxy.url, timeout_s=0.3))
        reports = source.report_many([CHAT, TargetRef("prod", "idle", "sim-idle")], start=world.start, end=world.end)
    assert all(isinstance(r, MetricsUnavailable) and "timed out" in str(r) for r in reports.values())


def test_slo_counts_feed_the_burn_rate_signal(world: World) -> None:
    source = world.source()
    end = world.end
    lenient = source.slo_counts(CHAT, SLO(ttft_seconds=60, tpot_seconds=5), end=end, windows_s=(10, 20))
    strict = source.slo_counts(CHAT, SLO(ttft_seconds=0.001, tpot_seconds=0.01), end=end, windows_s=(10, 20))
    assert source.queries_total == 2
    assert set(lenient) == {"stable", "candidate"}
    for variant, windows in lenient.items():
        assert set(windows) == {10.0, 20.0}
        for good, total in windows.values():
            assert total > 0 and good == pytest.approx(total)
        assert windows[20.0][1] > windows[10.0][1]
        assert all(good == 0 for good, _ in strict[variant].values())
    rules = (BurnRule(long_s=20, short_s=10, burn=10, min_requests=5),)

    def counts(data: dict[float, tuple[float, float]]) -> list[WindowCounts]:
        return [WindowCounts(window_s=w, good=g, total=t) for w, (g, t) in data.items()]

    ok, _ = assess(counts(lenient["stable"]), SloSignalState(), now=end, objective=0.99, rules=rules)
    burning, _ = assess(counts(strict["stable"]), SloSignalState(), now=end, objective=0.99, rules=rules)
    assert not ok.breaching and burning.breaching
