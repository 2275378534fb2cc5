"""The import contracts in ``.importlinter`` hold: domain and decide stay pure (no ports, adapters, simulator,
policy loader, I/O packages or clients), act imports only the domain, the ports and the errors, the layers of the
control loop point downwards (commands, operator, adapters, cycle and trials, act and decide, policy, simulator,
domain) and every package of ``controller`` sits in one of them, the top-level packages import each other in one
direction (the calibration over the simulator, never the other way), only the reactor imports kopf and only the
Kubernetes adapters and the commands import the kubernetes client.
``lint-imports`` checks them; a planted violation in a copy of the package makes it fail.
Inside decide, the concerns are layered: the plan over what a round leads to and the schedule, over the rollout,
over tuning, over capacity and search, over the plan context, over the rules, over the signals."""

from __future__ import annotations

import configparser
import os
import re
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


def test_every_package_and_top_level_module_sits_in_a_layer() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter", encoding="utf-8")
    layered = set(re.findall(r"controller\.(\w+)", config["importlinter:contract:layers"]["layers"]))
    packages = {p.parent.name for p in (REPO / "controller").glob("*/__init__.py")}
    modules = {p.stem for p in (REPO / "controller").glob("*.py")} - {"__init__", "__main__"}
    assert packages - layered == set()
    assert modules - layered == set()


@pytest.mark.parametrize(
    ("path", "line", "message"),
    [
        # the simulator reading the calibration closes a cycle (calibrate imports the simulator's profiles), also
        # through an import inside a function
        (
            "controller/simulator/planted.py",
            "from controller.calibrate import fit",
            "- .simulator -> .calibrate (1 import)",
        ),
        (
            "controller/simulator/planted.py",
            "def fit() -> None:\n    from controller.calibrate.fit import fit_calibration",
            "controller.simulator is not allowed to import controller.calibrate",
        ),
        # the policy document sits below decide, the simulator below the policy
        (
            "controller/policy/planted.py",
            "from controller.decide import plan",
            "controller.policy is not allowed to import controller.decide",
        ),
        (
            "controller/simulator/planted.py",
            "from controller.policy import loading",
            "controller.simulator is not allowed to import controller.policy",
        ),
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
        # inside decide: a signal reading a rollout step or the rules, the capacity maths reading a tuning round
        (
            "controller/decide/signals/planted.py",
            "from controller.decide.rollout import steps",
            "controller.decide.signals is not allowed to import controller.decide.rollout",
        ),
        (
            "controller/decide/capacity/planted.py",
            "from controller.decide.tuning import selection",
            "controller.decide.capacity is not allowed to import controller.decide.tuning",
        ),
        (
            "controller/decide/signals/planted.py",
            "from controller.decide.rules import Rules",
            "controller.decide.signals is not allowed to import controller.decide.rules",
        ),
        # the demo's settings module importing the run closes a cycle
        ("controller/demo/model.py", "from controller.demo import run", "No cycles are allowed in controller.demo"),
        # kopf only in the reactor
        (
            "controller/adapters/kube/planted.py",
            "import kopf",
            "- controller.adapters.kube.planted -> kopf (l.3)",
        ),
        # the kubernetes client only in the Kubernetes adapters and the commands: routing and the reactor go through
        # controller.adapters.kube
        (
            "controller/adapters/routing/planted.py",
            "from kubernetes import client",
            "- controller.adapters.routing.planted -> kubernetes (l.3)",
        ),
        (
            "controller/reactor/planted.py",
            "from kubernetes import client",
            "- controller.reactor.planted -> kubernetes (l.3)",
        ),
        # trials sit below the adapters (the Kubernetes canary trial imports the runner, never the other way)
        (
            "controller/trials/planted.py",
            "from controller.adapters.kube import cluster",
            "controller.trials is not allowed to import controller.adapters",
        ),
        # the adapters sit below the operator's composition
        (
            "controller/adapters/planted.py",
            "from controller.reactor import loop",
            "controller.adapters is not allowed to import controller.reactor",
        ),
        # the cycle does not reach the reactor
        (
            "controller/reconcile.py",
            "from controller.reactor import runtime",
            "controller.reconcile is not allowed to import controller.reactor",
        ),
    ],
)
def test_a_planted_violation_breaks_a_contract(package_copy: Path, path: str, line: str, message: str) -> None:
    planted = package_copy / path
    planted.write_text(f'"""A planted import."""\n\n{line}\n', encoding="utf-8")
    result = lint_imports(package_copy)
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stdout, result.stdout
