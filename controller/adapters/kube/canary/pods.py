"""Canary trial Pods on the canary pool, as a trial Launcher (manifest from
:class:`controller.trials.engine.launchers.KubernetesTrialManifest`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from kubernetes import client

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest
from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.manifests import JSON
from controller.adapters.kube.pod_template import PodSource
from controller.domain.config import EngineConfig
from controller.errors import NotFound, ShiftlightError, TemporaryError
from controller.trials.engine.launchers import Launch
from controller.trials.engine.log import EngineLog

#: How much of a canary container's log is read to find why it failed: vLLM prints the root cause before its
#: wrapper tracebacks, which alone can run past a hundred lines; what is kept of it is bounded (EngineLog).
POD_LOG_LINES = 2000
POD_LOG_BYTES = 1 << 20


class KubernetesLauncher:
    """Trial launcher on the canary pool: creates the trial Pod (:class:`KubernetesTrialManifest`), waits for it to
    be Ready with an IP, and deletes it at teardown. A Pod that fails, is evicted or never becomes ready is a
    launch error with the reason (from its status and container state), which the runner turns into an
    ``infeasible`` result. Use it as ``TrialRunner(KubernetesLauncher(api, manifest), ...)`` (the LoadTester port).
    The Pod is owned by the TunedService, so Kubernetes collects anything left behind."""

    source = "kubernetes"

    def __init__(
        self,
        api: client.ApiClient,
        manifest: KubernetesTrialManifest,
        *,
        poll_s: float = 1.0,
        endpoint_host: Callable[[JSON], str] | None = None,
        pod_source: Callable[[], PodSource | None] | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.manifest = manifest
        self.poll_s = poll_s
        self.endpoint_host = endpoint_host or (lambda pod: str(pod["status"]["podIP"]))
        self.pod_source = pod_source
        """The user's pod template, read at each trial (e.g. ``KubeCluster.pod_source``); None: a bare-model Pod.
        A template Shiftlight cannot rewrite raises :class:`InvalidInput` (no Pod is created)."""

    def _read(self, name: str) -> JSON | None:
        try:
            with kube_errors(f"trial pod {self.manifest.namespace}/{name}"):
                pod = self.core.read_namespaced_pod(name, self.manifest.namespace)
        except NotFound:
            return None
        result: JSON = self.core.api_client.sanitize_for_serialization(pod)
        return result

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        trial_id = f"{config.key()[:8]}-{uuid.uuid4().hex[:6]}"
        body = self.manifest.pod(config, trial_id, self.pod_source() if self.pod_source else None)
        name = body["metadata"]["name"]
        port = self.manifest.port
        t0 = time.monotonic()
        launch = Launch(endpoint="", model=self.manifest.served_model_name, ready=False, startup_s=0.0, _handle=name)
        try:
            with kube_errors(f"create trial pod {self.manifest.namespace}/{name}"):
                self.core.create_namespaced_pod(self.manifest.namespace, body)  # type: ignore[arg-type]
        except ShiftlightError as exc:
            launch.error = f"cannot create the trial pod: {exc}"
            return launch
        deadline = t0 + (timeout_s if timeout_s is not None else float(self.manifest.startup_timeout_s))
        while True:
            try:
                pod = self._read(name)
            except TemporaryError:
                pod = {}
            status = (pod or {}).get("status") or {}
            phase = status.get("phase")
            if pod is None or phase in ("Failed", "Succeeded"):
                launch.startup_s = time.monotonic() - t0
                launch.error = _pod_failure(pod, name)
                launch.log_tail = self.logs(launch)
                return launch
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if ready and status.get("podIP"):
                launch.ready = True
                launch.startup_s = time.monotonic() - t0
                launch.endpoint = f"http://{self.endpoint_host(pod)}:{port}"
                return launch
            if time.monotonic() >= deadline:
                launch.startup_s = time.monotonic() - t0
                launch.error = f"trial pod {name} not ready within {deadline - t0:.0f} s ({phase or 'Pending'})"
                launch.log_tail = self.logs(launch)
                self.stop(launch)
                return launch
            time.sleep(self.poll_s)

    def logs(self, launch: Launch) -> tuple[str, ...]:
        name = launch._handle
        if not isinstance(name, str):
            return launch.log_tail
        try:
            text = self.core.read_namespaced_pod_log(
                name, self.manifest.namespace, tail_lines=POD_LOG_LINES, limit_bytes=POD_LOG_BYTES
            )
        except Exception:  # no logs yet, or the API cannot serve them: the status says why
            return launch.log_tail
        text = str(text)
        if text.lstrip().startswith("{") and "apiVersion" in text:
            return launch.log_tail  # an API object, not container output: no logs to show
        return EngineLog.of(text.splitlines()).lines()

    def stop(self, launch: Launch) -> None:
        name = launch._handle
        if not isinstance(name, str):
            return
        try:
            with kube_errors(f"delete trial pod {self.manifest.namespace}/{name}"):
                self.core.delete_namespaced_pod(name, self.manifest.namespace, _preload_content=False)
        except NotFound:
            pass


def _pod_failure(pod: JSON | None, name: str) -> str:
    if pod is None:
        return f"trial pod {name} disappeared (deleted or evicted; is the canary node gone?)"
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if terminated:
            why = terminated.get("reason") or "Error"
            code, message = terminated.get("exitCode"), terminated.get("message", "")
            return f"engine container {why} (exit code {code}): {message}".strip()
    return (
        f"trial pod {name} {status.get('phase')}: {status.get('reason') or status.get('message') or 'no reason given'}"
    )


__all__ = ["KubernetesLauncher"]
