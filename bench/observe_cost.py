"""What one observe cycle costs against a real Prometheus: queries and seconds for 1, 50 and 500 targets.

    .venv/bin/python -m bench.observe_cost [--targets 1,50,500] [--minutes 10] [--repeat 3]

Synthetic vLLM series (all the families the observe query reads, vLLM's names, labels and buckets; ~90 series per
target, one point every 15 s) are backfilled with promtool into a fresh Prometheus (Debian package) started on a
free loopback port. A cycle observes every target once, sequentially, over a 5-minute window through
:class:`controller.observe.prometheus.PrometheusMetrics.report` (the ``MetricsSource`` path: one query per target);
the median of ``--repeat`` cycles is reported, with the spread. For reference it also shows the per-target path on
4 threads and the fleet path (``report_many``: one query per cycle for all targets). Ends with one line:

    observe: 500 targets, X.X queries/target, Y.YY s/cycle
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from controller.domain.observation import TargetRef
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.observe.synthetic import SyntheticTarget, write_openmetrics_files
from tests.support.prometheus_server import backfill_openmetrics, start_prometheus


def synthetic_targets(n: int) -> list[SyntheticTarget]:
    out = []
    for i in range(n):
        rate = 0.5 + (i % 17) * 0.7
        out.append(
            SyntheticTarget(
                model_name=f"model-{i:03d}",
                namespace=f"team-{i % 10}",
                variant="candidate" if i % 5 == 0 else "stable",
                rate=lambda ts, rate=rate: rate,
                prompt_mean=128 * (1 + i % 8),
                output_mean=64 * (1 + i % 4),
                latency_s=1.0 + (i % 6),
            )
        )
    return out


@dataclass(frozen=True)
class Window:
    """The targets observed and the window each observe() reads."""

    refs: list[TargetRef]
    start: datetime
    end: datetime


def observe_cycle(source: PrometheusMetrics, window: Window, n: int, threads: int = 1) -> tuple[float, int]:
    """One cycle of one observe() per target over the first ``n`` targets: its seconds and its queries."""
    before = source.queries_total
    began = time.perf_counter()

    def one(ref: TargetRef) -> None:
        report = source.report(ref, start=window.start, end=window.end)
        assert report.shape.arrival_rate_rps > 0

    if threads == 1:
        for ref in window.refs[:n]:
            one(ref)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, window.refs[:n]))
    return time.perf_counter() - began, source.queries_total - before


def per_target_cycles(
    settings: PrometheusSettings, window: Window, counts: list[int], repeat: int
) -> dict[int, tuple[float, float]]:
    """Cycles of one observe() per target (the MetricsSource path), then the largest count on 4 threads: the
    queries per target and the median seconds per cycle of each count."""
    largest = counts[-1]
    source = PrometheusMetrics(settings)
    observe_cycle(source, window, min(5, largest))  # warm connections and Prometheus caches
    result: dict[int, tuple[float, float]] = {}
    print(f"{'targets':>8} {'queries/target':>15} {'s/cycle':>9} {'min-max':>13} {'ms/target':>10}")
    for n in counts:
        runs = [observe_cycle(source, window, n) for _ in range(repeat)]
        seconds = [r[0] for r in runs]
        queries = runs[0][1] / n
        median = statistics.median(seconds)
        result[n] = (queries, median)
        print(
            f"{n:>8} {queries:>15.1f} {median:>9.2f} {min(seconds):>6.2f}-{max(seconds):<6.2f}"
            f" {1000 * median / n:>10.1f}"
        )
    parallel = PrometheusMetrics(settings)
    p_seconds, _ = observe_cycle(parallel, window, largest, threads=4)
    print(f"per-target queries on 4 threads: {largest} targets in {p_seconds:.2f} s")
    return result


def fleet_cycles(settings: PrometheusSettings, window: Window, counts: list[int], repeat: int) -> None:
    """Cycles of one report_many() over the fleet."""
    fleet = PrometheusMetrics(settings)
    print(f"{'fleet':>8} {'queries/target':>15} {'s/cycle':>9} {'min-max':>13} {'ms/target':>10}")
    for n in counts:
        runs = []
        for _ in range(repeat):
            before = fleet.queries_total
            began = time.perf_counter()
            reports = fleet.report_many(window.refs[:n], start=window.start, end=window.end)
            runs.append((time.perf_counter() - began, fleet.queries_total - before))
            failed = [str(r) for r in reports.values() if isinstance(r, Exception)]
            assert not failed, failed[:3]
        seconds = [r[0] for r in runs]
        median = statistics.median(seconds)
        print(
            f"{n:>8} {runs[0][1] / n:>15.3f} {median:>9.2f} {min(seconds):>6.2f}-{max(seconds):<6.2f}"
            f" {1000 * median / n:>10.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--targets", default="1,50,500", help="comma-separated target counts")
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of synthetic history per target")
    parser.add_argument("--repeat", type=int, default=3, help="cycles per target count (median reported)")
    parser.add_argument("--window-s", type=float, default=300.0, help="observe window")
    args = parser.parse_args(argv)
    counts = sorted(int(x) for x in args.targets.split(","))
    largest = counts[-1]

    workdir = Path(tempfile.mkdtemp(prefix="shiftlight-observe-bench-"))
    prometheus = None
    try:
        end = time.time() - 900
        start = end - args.minutes * 60
        targets = synthetic_targets(largest)
        t0 = time.perf_counter()
        files, samples = write_openmetrics_files(workdir / "openmetrics", targets, start=start, end=end, step_s=15)
        t1 = time.perf_counter()
        backfill_openmetrics(files, workdir)
        t2 = time.perf_counter()
        shutil.rmtree(workdir / "openmetrics")
        prometheus = start_prometheus([], workdir)
        t3 = time.perf_counter()
        print(
            f"data: {largest} targets, {samples / 1e6:.2f} M samples ({samples // largest // int(args.minutes * 4 + 1)}"
            f" series/target); written {t1 - t0:.1f} s, backfilled {t2 - t1:.1f} s, Prometheus ready {t3 - t2:.1f} s"
        )
        settings = PrometheusSettings(url=prometheus.url, max_staleness_s=args.minutes * 60 + 3600)
        window_end = datetime.fromtimestamp(end - 15, UTC)
        window = Window(
            [TargetRef(t.namespace, t.model_name, t.model_name) for t in targets],
            window_end - timedelta(seconds=args.window_s),
            window_end,
        )
        result = per_target_cycles(settings, window, counts, args.repeat)
        fleet_cycles(settings, window, counts, args.repeat)
        queries, seconds = result[largest]
        print("(the line below is the MetricsSource path: one observe() per target)")
        print(f"observe: {largest} targets, {queries:.1f} queries/target, {seconds:.2f} s/cycle")
        return 0
    finally:
        if prometheus is not None:
            prometheus.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
