"""The GPU host's pair script (``scripts/gpu/loadgen_pair.py``): our client and ``vllm bench serve`` send the same
requests, sampling included (``vllm bench serve`` sends no temperature unless told, and the server's default then
samples where our trials decode greedily)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from controller.trials.loadgen_client import LoadGenerator

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "loadgen_pair.py"


@pytest.fixture(scope="module")
def pair() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loadgen_pair_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_both_tools_ask_for_the_same_temperature(pair: ModuleType, temperature: float) -> None:
    plan, _ = pair.make_plan(4, 1, 4000)
    cmd = pair.bench_command(8101, "/models/m", plan, Path("ds.json"), 4, Path("out"), "r.json", temperature)
    assert cmd.count("--temperature") == 1
    assert float(cmd[cmd.index("--temperature") + 1]) == temperature

    settings = pair.worker_settings(8101, temperature)
    ours = LoadGenerator(settings.base_url, settings.model, temperature=settings.temperature)
    assert json.loads(ours._payload(plan.requests[0]))["temperature"] == temperature


def test_the_default_is_greedy_for_both(pair: ModuleType) -> None:
    plan, _ = pair.make_plan(4, 1, 4000)
    cmd = pair.bench_command(8101, "/models/m", plan, Path("ds.json"), 4, Path("out"), "r.json", 0.0)
    assert float(cmd[cmd.index("--temperature") + 1]) == 0.0
    assert pair.worker_settings(8101, 0.0).temperature == 0.0
    assert pair.run_tool.__defaults__ == (0.0,)  # warmup_gpu.py's pair runs get the trials' greedy sampling too
