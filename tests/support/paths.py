"""Where the tests' own data lives, so a test file can move without re-counting ``parents[...]``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
MANIFESTS = TESTS / "adapters" / "manifests"
KUBE_DATA = TESTS / "kube"
ENGINE_LOGS = TESTS / "trials" / "engine_logs"
