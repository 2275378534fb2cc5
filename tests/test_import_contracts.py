"""The import contracts in ``.importlinter`` hold: domain and decide stay pure (no ports, adapters, simulator,
policy loader, I/O packages or clients), act imports only the domain, the ports and the errors, and the layers of
the control loop point downwards. ``lint-imports`` checks them; a planted violation in a copy of the package
makes it fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / ".importlinter")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """The package and its contracts, copied where a test may break them."""
    shutil.copytree(REPO / "controller", tmp_path / "controller", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_the_contracts_hold() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("path", "line", "message"),
    [
        (
            "controller/decide/planted.py",
            "from controller.adapters.simulated import fleet",
            "not allowed to import controller.adapters",
        ),
        (
            "controller/decide/planted.py",
            "from controller.ports import Cluster",
            "not allowed to import controller.ports",
        ),
        ("controller/domain/planted.py", "import httpx", "not allowed to import httpx"),
        # the policy package's __init__ re-exports the loader, which reaches the simulator
        (
            "controller/decide/planted.py",
            "from controller.policy import Policy",
            "not allowed to import controller.policy.loading",
        ),
        (
            "controller/act/planted.py",
            "from controller.decide import guardrails",
            "not allowed to import controller.decide",
        ),
        (
            "controller/domain/planted.py",
            "from controller.reconcile import Reconciler",
            "not allowed to import controller.reconcile",
        ),
        # the demo's settings module importing the run closes a cycle
        ("controller/demo/model.py", "from controller.demo import run", "No cycles are allowed in controller.demo"),
    ],
)
def test_a_planted_violation_breaks_a_contract(package_copy: Path, path: str, line: str, message: str) -> None:
    planted = package_copy / path
    planted.write_text(f'"""A planted import."""\n\n{line}\n', encoding="utf-8")
    result = lint_imports(package_copy)
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stdout, result.stdout
