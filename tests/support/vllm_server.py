"""A real tiny vLLM server for tests: build the random-weight model, start the server, stop it by PID.

Usage (any test area)::

    from tests.support.vllm_server import build_tiny_model, running_vllm

    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)
    with running_vllm(model_dir, ["--max-num-seqs", "8"]) as server:
        httpx.get(server.endpoint + "/metrics")

The server runs in the engine venv (``$SHIFTLIGHT_ENGINE_PYTHON``, default ``.venv-engine/bin/python``) with
``--enforce-eager --dtype float32 --max-model-len 512`` and an offline, quiet environment. It takes 25-65 s to
become ready on 2 CPU cores and ~3 GB of memory: share one per test session.

This module is also a pytest plugin (``-p tests.support.vllm_server`` in pyproject's addopts), with the session
fixtures every area shares:

- ``tiny_model``: the seed-0 tiny model, built once;
- ``engine_server``: ONE stock server on it for every test that needs only "an engine" (default flags; the model's
  whole 2048 positions, so long advisor prompts fit). Tests that need special flags start their own.

Every test that uses ``engine_server`` or carries the ``engine`` marker runs on one pytest-xdist worker (the group
``engine``, see ``tests/conftest.py``): the shared server starts once, and no two engines compete for the cores.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation
from controller.trials.engine.launchers import (
    CPU_ENGINE_ENV,
    CPU_TEST_ARGS,
    LocalProcessLauncher,
    default_engine_python,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL_NAME = "tiny"


class VllmStartError(RuntimeError):
    """The server did not become ready; carries the last log lines."""


@dataclass(frozen=True)
class VllmServer:
    endpoint: str  # e.g. http://127.0.0.1:41234
    model: str  # served model name
    pid: int
    startup_s: float


def build_tiny_model(directory: str | Path, seed: int = 0, *, dtype: str = "float32") -> Path:
    """Build (or reuse, when the content key matches) the tiny Llama model + tokenizer in ``directory``."""
    out = Path(directory)
    cmd = [default_engine_python(), "-m", "controller.trials.engine.tinymodel", str(out), "--seed", str(seed)]
    cmd += ["--dtype", dtype]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update({k: v for k, v in CPU_ENGINE_ENV.items() if k.startswith(("HF_", "TRANSFORMERS_"))})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building the tiny model failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out


def cache_root() -> Path:
    return REPO_ROOT / ".cache" / "vllm"


@contextmanager
def running_vllm(
    model_dir: str | Path,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    config: EngineConfig | None = None,
    served_model_name: str = TINY_MODEL_NAME,
    startup_timeout_s: float = 300.0,
) -> Iterator[VllmServer]:
    """Start a vLLM OpenAI server on a free loopback port; stop its whole process group on exit.

    Without a ``config``, the server runs what ``extra_args`` say: tuned flags there (``--speculative-config``,
    ``--max-num-seqs``...) are read into the config, since the launcher renders tuned flags from the config."""
    if config is None:
        module = ["python", "-m", "vllm.entrypoints.openai.api_server"]
        config = parse_invocation(module, ["--model", str(model_dir), *extra_args], where="test engine").config
    launcher = LocalProcessLauncher(
        model_dir,
        served_model_name=served_model_name,
        extra_args=[*CPU_TEST_ARGS, *extra_args],
        env={**CPU_ENGINE_ENV, **(env or {})},
        startup_timeout_s=startup_timeout_s,
        cache_root=cache_root(),
    )
    launch = launcher.start(config)
    try:
        if not launch.ready or launch.pid is None:
            tail = "\n".join(launch.log_tail)
            raise VllmStartError(f"vLLM did not start: {launch.error}\n{tail}")
        yield VllmServer(launch.endpoint, served_model_name, launch.pid, launch.startup_s)
    finally:
        launcher.stop(launch)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed-0 tiny model (random weights, float32), built once per session (per worker under pytest-xdist)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-seed0"), seed=0)


@pytest.fixture(scope="session")
def engine_server(tiny_model: Path) -> Iterator[VllmServer]:
    """The one stock vLLM server of the session: tiny seed-0 model, default flags, ``--max-model-len 2048`` (the
    model's positions; the later flag wins over the test default of 512)."""
    with running_vllm(tiny_model, ["--max-model-len", "2048"]) as server:
        yield server
