"""Paths the trials compute from their own module's place: the repository root the load generator worker runs from,
the ``vllm bench`` launcher script, and the engine venv's interpreter. A module moved to another folder depth must
not point them elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.trials.engine import launchers
from controller.trials.loadgen import process, vllm_bench
from tests.support.paths import REPO


def test_the_worker_runs_from_the_repository_root() -> None:
    assert Path(process.PACKAGE_ROOT) == REPO


def test_the_bench_launcher_script_is_found() -> None:
    assert vllm_bench.BENCH_LAUNCHER.is_file()


def test_the_engine_interpreter_defaults_to_the_repositorys_engine_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHIFTLIGHT_ENGINE_PYTHON", raising=False)
    assert Path(launchers.default_engine_python()) == REPO / ".venv-engine" / "bin" / "python"
