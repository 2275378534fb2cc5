"""The operator's own Prometheus metrics and its ``/metrics`` + ``/healthz`` HTTP endpoint (prometheus_client)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Bucket bounds of the decide step's wall and CPU histograms (seconds): the same, so the two read side by side.
DECIDE_BUCKETS_S = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 1)


class OperatorMetrics:
    """One registry per operator instance (two replicas may share a process in tests)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "shiftlight_decisions_total",
            "Actions decided, by action type and reason code",
            ["action", "code"],
            registry=r,
        )
        self.effects = Counter(
            "shiftlight_effects_total",
            "What acting did, by effect type and the reason code of the action behind it",
            ["effect", "code"],
            registry=r,
        )
        self.trials = Counter("shiftlight_trials_total", "Canary trials finished, by status", ["status"], registry=r)
        self.rollouts = Counter("shiftlight_rollouts_total", "Rollouts finished, by outcome", ["outcome"], registry=r)
        self.rollbacks = Counter("shiftlight_rollbacks_total", "Rollbacks executed", registry=r)
        self.weight = Gauge("shiftlight_rollout_weight", "Candidate traffic weight (percent)", ["target"], registry=r)
        self.duration = Histogram(
            "shiftlight_reconcile_duration_seconds",
            "Wall time of one observe -> decide -> act cycle (status write included)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.decide = Histogram(
            "shiftlight_decide_duration_seconds",
            "Wall time of the pure decide step of one cycle (one TunedService)",
            buckets=DECIDE_BUCKETS_S,
            registry=r,
        )
        self.decide_cpu = Histogram(
            "shiftlight_decide_cpu_seconds",
            "CPU time of the pure decide step of one cycle, on its own thread: the wall time above less the waits "
            "for the interpreter lock held by the operator's other threads (and for the cores)",
            buckets=DECIDE_BUCKETS_S,
            registry=r,
        )
        self.status_writes = Counter(
            "shiftlight_status_writes_total",
            "TunedService status writes (a cycle that changed nothing writes none)",
            registry=r,
        )
        self.status_unchanged = Counter(
            "shiftlight_status_unchanged_total",
            "Cycles whose status, conditions included, was already as stored",
            registry=r,
        )
        self.errors = Counter("shiftlight_errors_total", "Errors, by kind", ["kind"], registry=r)
        self.leader = Gauge("shiftlight_leader", "1 while this replica holds the leader Lease", registry=r)
        self.cycles = Counter("shiftlight_cycles_total", "Control cycles run", registry=r)
        self.held = Gauge(
            "shiftlight_tunedservices_held",
            "TunedServices the operator holds any state for (runtimes, workers, mirrors, Events, series)",
            registry=r,
        )

    def forget(self, target: str) -> None:
        """Drop the series of a deleted TunedService (``namespace/name``)."""
        with contextlib.suppress(KeyError):  # no series yet
            self.weight.remove(target)

    def targets(self) -> list[str]:
        """The TunedServices (``namespace/name``) that have a series here."""
        return [sample.labels["target"] for metric in self.weight.collect() for sample in metric.samples]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer:
    """Serves ``/metrics`` and ``/healthz`` on one port (port 0 picks a free one; see :attr:`port`)."""

    def __init__(
        self,
        metrics: OperatorMetrics,
        health: Callable[[], tuple[bool, str]],
        *,
        host: str = "0.0.0.0",
        port: int = 0,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.metrics.exposition(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz", "/livez"):
                    ok, message = outer.health()
                    self._send(200 if ok else 503, (message + "\n").encode(), "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found\n", "text/plain; charset=utf-8")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet: scrapes every few seconds
                return

        self.metrics = metrics
        self.health = health
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="shiftlight-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)
