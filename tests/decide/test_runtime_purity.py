"""decide is pure at runtime, not only in the import contracts: importing ``controller.decide`` in a fresh
interpreter loads no YAML parser, no simulator, no policy loader and no I/O client (import-linter sees only the
modules decide names, not what a package's ``__init__`` pulls in on the way)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Top-level modules (and their submodules) that must not be loaded by ``import controller.decide``.
FORBIDDEN = (
    "yaml",
    "controller.simulator",
    "controller.policy.loading",
    "controller.policy.schema",
    "httpx",
    "kubernetes",
    "kopf",
    "prometheus_client",
)


def modules_loaded_by(statement: str) -> list[str]:
    """The names in ``sys.modules`` after ``statement`` runs in a fresh interpreter."""
    script = f"{statement}; import sys, json; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert isinstance(loaded, list)
    return [str(name) for name in loaded]


def forbidden_among(loaded: list[str]) -> list[str]:
    return [name for name in loaded if any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN)]


def test_importing_decide_loads_no_yaml_simulator_loader_or_client() -> None:
    loaded = modules_loaded_by("import controller.decide")
    assert "controller.decide" in loaded and "controller.policy.models" in loaded
    assert forbidden_among(loaded) == []


def test_the_policy_document_loads_without_the_loader() -> None:
    loaded = modules_loaded_by("from controller.policy import Policy, SearchSpace")
    assert forbidden_among(loaded) == []


def test_the_loader_is_still_reachable_from_the_policy_package() -> None:
    loaded = modules_loaded_by("from controller.policy import load_policy, export_json_schema, PolicyError")
    assert "controller.policy.loading" in loaded and "yaml" in loaded
