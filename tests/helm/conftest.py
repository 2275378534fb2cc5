"""Helm chart tests: the real helm binary (``.tools/bin/helm``) with a throwaway HOME and caches."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "shiftlight"
HELM = Path(os.environ.get("SHIFTLIGHT_HELM", REPO / ".tools" / "bin" / "helm"))


@dataclass(frozen=True)
class Helm:
    env: dict[str, str]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(HELM), *args], env=self.env, capture_output=True, text=True, timeout=120, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def schema_refusal(self, *args: str) -> str:
        """What ``helm template`` says when the chart's values schema refuses the values ``args`` set."""
        result = self.run("template", "sl", str(CHART), *args, check=False)
        assert result.returncode != 0
        assert "values don't meet the specifications of the schema" in result.stderr
        return result.stderr

    def template(self, *args: str, crds: bool = True) -> list[dict[str, Any]]:
        extra = ["--include-crds"] if crds else []
        out = self.run("template", "sl", str(CHART), "--namespace", "shiftlight", *extra, *args).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "HELM_CACHE_HOME": str(home / "cache" / "helm"),
        "HELM_CONFIG_HOME": str(home / "config" / "helm"),
        "HELM_DATA_HOME": str(home / "data" / "helm"),
    }
    return Helm(env)


def by_kind(docs: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
