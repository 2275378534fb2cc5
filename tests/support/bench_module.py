"""Load a script under ``bench/`` as a module, so tests can call its pure helpers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(script: str, module_name: str) -> ModuleType:
    """``bench/<script>`` as the module ``module_name`` (registered in ``sys.modules``: dataclasses resolve their
    module by name)."""
    spec = importlib.util.spec_from_file_location(module_name, BENCH_DIR / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
