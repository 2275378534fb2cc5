"""A real Prometheus server for tests and benchmarks: own config, own storage folder, free loopback port.

    with running_prometheus([ScrapeTarget("127.0.0.1:8000", {"variant": "stable"})], tmp_path) as prom:
        PrometheusConnect(prom.url).custom_query("up")

The Debian ``prometheus`` binary is used (``PROMETHEUS_BIN`` overrides). Scrapes every second; the process is
stopped by its PID. :func:`backfill_openmetrics` loads synthetic history with ``promtool tsdb
create-blocks-from openmetrics`` before the server starts, so weeks of data for hundreds of targets load in seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml


@dataclass(frozen=True)
class ScrapeTarget:
    """One ``host:port`` to scrape, with labels attached to all its series."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"
    drop_metrics: str | None = None
    """Regex of metric names dropped at scrape time (``metric_relabel_configs``), e.g. to simulate partial data."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    found = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
    if not found:
        raise FileNotFoundError("prometheus binary not found: install the Debian package (scripts/install-tools.sh)")
    return found


def promtool_binary() -> str:
    found = os.environ.get("PROMTOOL_BIN") or shutil.which("promtool")
    if not found:
        raise FileNotFoundError("promtool not found: it ships with the Debian prometheus package")
    return found


def write_config(path: Path, targets: Sequence[ScrapeTarget], scrape_interval_s: float = 1.0) -> Path:
    """A Prometheus config with one job per target (jobs allow different metrics paths and labels)."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    jobs = []
    for i, t in enumerate(targets):
        job: dict[str, object] = {
            "job_name": f"target-{i}",
            "metrics_path": t.metrics_path,
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "static_configs": [{"targets": [t.address], "labels": dict(t.labels)}],
        }
        if t.drop_metrics:
            job["metric_relabel_configs"] = [{"source_labels": ["__name__"], "regex": t.drop_metrics, "action": "drop"}]
        jobs.append(job)
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval}, "scrape_configs": jobs}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class PrometheusServer:
    """A started Prometheus process. Use :func:`running_prometheus` rather than constructing it directly."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, workdir: Path, log_path: Path) -> None:
        self.process = process
        self.port = port
        self.workdir = workdir
        self.log_path = log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout_s}s:\n{self.log_tail()}")

    def wait_for_samples(self, query: str, timeout_s: float = 30.0) -> None:
        """Block until ``query`` returns at least one series (e.g. ``up == 1`` after the first scrape)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                answer = httpx.get(f"{self.url}/api/v1/query", params={"query": query}, timeout=2.0).json()
                if answer["data"]["result"]:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"no samples for {query!r} after {timeout_s}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the process by its PID: SIGTERM, then SIGKILL if it does not exit."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=timeout_s)


def start_prometheus(
    targets: Sequence[ScrapeTarget],
    workdir: Path,
    *,
    scrape_interval_s: float = 1.0,
    retention: str = "90d",
    port: int | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = 30.0,
) -> PrometheusServer:
    """Write a config for ``targets``, start Prometheus on a free loopback port with storage under ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    storage = workdir / "data"
    storage.mkdir(exist_ok=True)
    config = write_config(workdir / "prometheus.yml", targets, scrape_interval_s)
    port = port or free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={storage}",
                f"--storage.tsdb.retention.time={retention}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = PrometheusServer(process, port, workdir, log_path)
    try:
        server.wait_ready(ready_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running_prometheus(targets: Sequence[ScrapeTarget], workdir: Path, **kwargs: object) -> Iterator[PrometheusServer]:
    server = start_prometheus(targets, workdir, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def backfill_openmetrics(sources: Path | Sequence[Path], workdir: Path, *, workers: int = 4) -> Path:
    """Turn OpenMetrics text files (each ending in ``# EOF``) into TSDB blocks under ``workdir/data``.

    Call before :func:`start_prometheus` with the same ``workdir``; the server picks the blocks up at start.
    Samples must be older than the server's start and inside its retention. promtool re-reads its input once per
    2-hour block it writes, so split long histories into one file per 2 hours
    (:func:`controller.observe.synthetic.write_openmetrics_files` does).
    """
    storage = workdir / "data"
    storage.mkdir(parents=True, exist_ok=True)
    files = [sources] if isinstance(sources, Path) else list(sources)

    def one(source: Path) -> None:
        cmd = [promtool_binary(), "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(storage)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"promtool backfill of {source} failed ({result.returncode}): {result.stderr[-2000:]}")

    # each file becomes its own blocks, so files are independent: run a few promtool processes at once
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(files)))) as pool:
        list(pool.map(one, files))
    return storage
