"""`shiftlight operator`: start leader election, the health/metrics endpoint and kopf.

``run_operator(settings)`` runs until interrupted; :class:`OperatorRuntime` is the same thing as an object that
tests (and embedders) can start and stop, and whose registry they can hand to ``kopf.testing.KopfRunner``.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Sequence

import kopf
from kopf._core.engines.peering import Identity  # kopf.run's identity type (a NewType of str)

from controller.adapters.kube.client import ApiClient, load_api_client
from controller.adapters.kube.lease import AlwaysLeader, LeaderElector
from controller.adapters.notify.grafana import FanOutNotifier, GrafanaAnnotator
from controller.adapters.notify.slack import SlackNotifier
from controller.errors import PermanentError
from controller.ports import Notifier
from controller.reactor.backends import make_backend
from controller.reactor.handlers import build_registry
from controller.reactor.logs import configure_logging
from controller.reactor.logs import log_formatter as log_formatter  # where the log formats used to live
from controller.reactor.loop import ControlLoop
from controller.reactor.metrics import HealthServer, OperatorMetrics
from controller.reactor.runtime import Backend
from controller.reactor.scheduler import CycleScheduler
from controller.reactor.settings import OperatorSettings

log = logging.getLogger(__name__)


class OperatorRuntime:
    """Everything one operator replica runs next to kopf: leader election, the control loop, HTTP endpoints."""

    def __init__(
        self,
        settings: OperatorSettings,
        *,
        api: ApiClient | None = None,
        backend: Backend | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.api = api or load_api_client(settings.connection.kubeconfig, settings.connection.context)
        self.metrics = OperatorMetrics()
        self._slack: SlackNotifier | None = None
        self._annotator: GrafanaAnnotator | None = None
        if notifier is None:
            notifier = self._notifier_from_settings(settings)
        self.elector: LeaderElector | AlwaysLeader
        if settings.leader.enabled:
            self.elector = LeaderElector(
                self.api, settings.leader, on_change=lambda lead: self.metrics.leader.set(1 if lead else 0)
            )
        else:
            self.elector = AlwaysLeader()
            self.metrics.leader.set(1)
        self.backend = backend or make_backend(settings, self.api, notifier=notifier)
        self.loop = ControlLoop(settings, self.api, self.backend, self.elector, self.metrics)
        self.scheduler = CycleScheduler(self.loop)
        self.registry = build_registry(self.scheduler, self.api)
        self._stop = threading.Event()
        self._leader_thread = threading.Thread(
            target=self.elector.run, args=(self._stop,), name="shiftlight-leader", daemon=True
        )
        self.servers: list[HealthServer] = []

    def _notifier_from_settings(self, settings: OperatorSettings) -> Notifier | None:
        """Slack (when its webhook file is mounted) and Grafana annotations (when switched on), as one notifier."""
        notifiers: list[Notifier] = []
        if settings.slack_webhook_file is not None and settings.slack_webhook_file.exists():
            self._slack = SlackNotifier.from_secret_file(settings.slack_webhook_file, channel=settings.slack_channel)
            notifiers.append(self._slack)
        if settings.grafana is not None and settings.grafana.annotations:
            self._annotator = GrafanaAnnotator(settings.grafana)
            notifiers.append(self._annotator)
        if not notifiers:
            return None
        return notifiers[0] if len(notifiers) == 1 else FanOutNotifier(notifiers)

    def health(self) -> tuple[bool, str]:
        alive = self._leader_thread.is_alive()
        leader = self.elector.is_leader()
        return alive, f"{'ok' if alive else 'leader election stopped'} identity={self.elector.identity} leader={leader}"

    def start(self) -> OperatorRuntime:
        self._leader_thread.start()
        ports = {p for p in (self.settings.health_port, self.settings.metrics_port) if p is not None}
        for port in sorted(ports):
            try:
                server = HealthServer(self.metrics, self.health, host=self.settings.metrics_host, port=port)
            except (OSError, OverflowError) as exc:  # a port taken, privileged or out of range: name the setting
                self.stop()
                names = [
                    name
                    for name, value in (
                        ("SHIFTLIGHT_HEALTH_PORT", self.settings.health_port),
                        ("SHIFTLIGHT_METRICS_PORT", self.settings.metrics_port),
                    )
                    if value == port
                ]
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise PermanentError(
                    f"{' and '.join(names)}: cannot listen on {self.settings.metrics_host}:{port}: {reason}"
                ) from None
            self.servers.append(server.start())
        return self

    def stop(self, *, release: bool = True) -> None:
        """Stop the cycles, leader election and the endpoints; ``release=False`` leaves the Lease to expire (as a
        crash does)."""
        self.scheduler.stop()
        if isinstance(self.elector, LeaderElector):
            self.elector.release_on_exit = release
        self._stop.set()
        self._leader_thread.join(timeout=30)
        for server in self.servers:
            server.stop()
        self.servers.clear()
        if self._slack is not None:
            self._slack.close()
        if self._annotator is not None:
            self._annotator.close()

    def kopf_args(self) -> list[str]:
        """Arguments for ``kopf run`` (e.g. under ``KopfRunner``)."""
        args = ["run", "--standalone"]
        if self.settings.all_namespaces or not self.settings.namespaces:
            return [*args, "--all-namespaces"]
        for ns in self.settings.namespaces:
            args += ["--namespace", ns]
        return args


def settle_heap() -> None:
    """Collect once, then leave everything alive now (the modules, their classes and schemas, the API client, the
    settings: about 110,000 objects, kept for as long as the process runs) out of the collector's later passes
    (``gc.freeze``). A full pass walks every object it tracks while holding the interpreter lock, so every cycle
    thread, kopf's event loop and the Lease renewal stand still for it: with the start-up objects in it one took
    about 0.1 s on its own and 80-300 ms in a 500-TunedService run; what the cycles make later is still collected."""
    gc.collect()
    gc.freeze()


def run_operator(settings: OperatorSettings) -> None:
    """Run one operator replica until interrupted (SIGINT/SIGTERM)."""
    runtime = OperatorRuntime(settings).start()
    settle_heap()
    log.info(
        "shiftlight operator %s: backend=%s leader-election=%s",
        runtime.elector.identity,
        settings.backend,
        settings.leader.enabled,
    )
    try:
        kopf.run(
            registry=runtime.registry,
            # kopf would otherwise derive one from the OS user name, which an arbitrary container uid (65532, or
            # one the cluster assigns) has none of
            identity=Identity(runtime.elector.identity),
            standalone=True,
            clusterwide=settings.all_namespaces or not settings.namespaces,
            namespaces=() if settings.all_namespaces or not settings.namespaces else settings.namespaces,
        )
    finally:
        runtime.stop()


def main(*, all_namespaces: bool = True, namespaces: Sequence[str] = ()) -> None:
    """Entry point for ``shiftlight operator``: settings from ``SHIFTLIGHT_*`` environment variables."""
    settings = OperatorSettings.from_env(all_namespaces=all_namespaces, namespaces=tuple(namespaces))
    configure_logging(settings)
    run_operator(settings)


if __name__ == "__main__":
    main()
