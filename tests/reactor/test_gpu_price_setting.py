"""The GPU-hour price an admin sets (``SHIFTLIGHT_GPU_HOUR_USD``, chart ``cost.gpuHourUsd``) and the API price the
daily digest compares against (``SHIFTLIGHT_API_INPUT_USD_PER_MILLION``, ``SHIFTLIGHT_API_OUTPUT_USD_PER_MILLION``):
parsed at start (a bad value stops the operator with one line naming the variable), and carried into a TunedService's
price, falling back to the list price of the GPU profile its ``spec.gpuType`` maps to. The kubernetes backend hands
that price to each TunedService's reconciler (the decision message's cost) and to its digest (against the fake API).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from controller.crd.models import TunedServiceSpec, parse_tuned_service
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.reactor.gpu_price import SETTING_SOURCE, gpu_price
from controller.reactor.kubernetes_backend import KubernetesBackend, digest_rules
from controller.reactor.settings import ConnectionSettings, OperatorSettings
from controller.simulator.profiles import load_gpu
from tests.support.kube_api import running_kube_api

REPO = Path(__file__).resolve().parents[2]

GPU = "SHIFTLIGHT_GPU_HOUR_USD"
API_IN = "SHIFTLIGHT_API_INPUT_USD_PER_MILLION"
API_OUT = "SHIFTLIGHT_API_OUTPUT_USD_PER_MILLION"


def tuned_service_body(gpu_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "metadata": {"name": "workhorse", "namespace": "prod"},
        "spec": {
            "workload": {"deployments": ["workhorse"], "service": "workhorse"},
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": gpu_type,
        },
    }


def spec(gpu_type: str) -> TunedServiceSpec:
    parsed, _ = parse_tuned_service(tuned_service_body(gpu_type))
    return parsed


def test_the_prices_from_the_environment() -> None:
    settings = OperatorSettings.from_env({GPU: "3.25", API_IN: "0.5", API_OUT: "2"})
    assert settings.gpu_hour_usd == 3.25
    assert (settings.api_input_usd_per_million, settings.api_output_usd_per_million) == (0.5, 2.0)
    unset = OperatorSettings.from_env({GPU: "", API_IN: ""})
    assert unset.gpu_hour_usd is None and unset.api_input_usd_per_million == 0.0
    assert OperatorSettings.from_env({GPU: "0"}).gpu_hour_usd == 0.0  # free GPUs are a price, not "unset"


@pytest.mark.parametrize("name", [GPU, API_IN, API_OUT])
@pytest.mark.parametrize("value", ["-1", "three", "nan", "inf"])
def test_a_bad_price_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(InvalidInput) as err:
        OperatorSettings.from_env({name: value})
    assert err.value.field == name


def test_a_bad_gpu_hour_price_stops_the_operator_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIFTLIGHT_", "KUBE"))}
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "operator"],
        cwd=tmp_path,
        env=env | {"HOME": str(tmp_path), GPU: "-2"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [done.stderr.strip()]  # one line
    assert done.stderr.startswith(f"error: environment:{GPU}: ")


def test_the_setting_wins_then_the_gpu_profiles_list_price_then_none() -> None:
    priced = OperatorSettings(gpu_hour_usd=2.5)
    set_price = gpu_price(spec("H200-141GB"), priced)
    assert set_price is not None and (set_price.usd_per_hour, set_price.source) == (2.5, SETTING_SOURCE)
    listed = gpu_price(spec("H200-141GB"), OperatorSettings())
    assert listed is not None
    assert listed.usd_per_hour == load_gpu("h200").cost_per_hour_usd
    assert listed.source == "list price of the h200 profile"
    assert gpu_price(spec("MI300X"), OperatorSettings()) is None  # no profile: GPU-hours only
    assert listed.usd(10.0, window="day") == pytest.approx(10 * load_gpu("h200").cost_per_hour_usd)


def test_the_digest_prices_the_schedule_with_the_same_price_and_the_api_price() -> None:
    settings = replace(OperatorSettings.from_env({GPU: "4", API_IN: "0.25", API_OUT: "1.5"}), slack_digest_hour=7)
    rules = digest_rules(spec("MI300X"), settings)
    assert rules is not None
    assert (rules.hour, rules.gpu_usd_per_hour) == (7, 4.0)
    assert (rules.api.input_per_million, rules.api.output_per_million) == (0.25, 1.5)
    listed = digest_rules(spec("H200-141GB"), replace(settings, gpu_hour_usd=None))
    assert listed is not None and listed.gpu_usd_per_hour == load_gpu("h200").cost_per_hour_usd
    unknown = digest_rules(spec("MI300X"), replace(settings, gpu_hour_usd=None))
    assert unknown is not None and unknown.gpu_usd_per_hour == 0.0


@pytest.mark.kube
def test_the_kubernetes_backend_gives_each_tuned_services_reconciler_its_price(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text((REPO / "policies/v1/default.yaml").read_text())
    with running_kube_api() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = config.new_client_from_config(str(kubeconfig))
        settings = OperatorSettings(
            backend="kubernetes", connection=ConnectionSettings(kubeconfig=str(kubeconfig)), policy_dir=policies
        )

        def reconciler(backend: KubernetesBackend, gpu_type: str) -> Any:
            body = tuned_service_body(gpu_type)
            body["metadata"]["uid"] = f"uid-{gpu_type}"
            parsed, _ = parse_tuned_service(body)
            return backend.runtime(TargetRef("prod", "workhorse", "m"), parsed, body).reconciler

        listed = reconciler(KubernetesBackend(settings, api), "H200-141GB")
        assert (listed.gpu_price.source, listed.gpu_price.usd_per_hour) == (
            "list price of the h200 profile",
            load_gpu("h200").cost_per_hour_usd,
        )
        assert listed.rules.digest.gpu_usd_per_hour == load_gpu("h200").cost_per_hour_usd
        priced = reconciler(KubernetesBackend(replace(settings, gpu_hour_usd=1.75), api), "H200-141GB")
        assert (priced.gpu_price.source, priced.gpu_price.usd_per_hour) == (SETTING_SOURCE, 1.75)
        assert reconciler(KubernetesBackend(settings, api), "MI300X").gpu_price is None


def test_the_simulator_backend_gives_its_reconciler_the_same_price(tmp_path: Path) -> None:
    """The walkthrough's backend: a simulated H200 fleet's decisions are priced like the kubernetes backend's."""
    from controller.reactor.simulator_backend import SimulatorBackend

    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text((REPO / "policies/v1/default.yaml").read_text())
    body = tuned_service_body("H200-141GB")
    body["spec"]["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
    body["metadata"]["uid"] = "uid-sim"
    parsed, _ = parse_tuned_service(body)
    with running_kube_api() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = config.new_client_from_config(str(kubeconfig))
        settings = OperatorSettings(
            backend="simulator", connection=ConnectionSettings(kubeconfig=str(kubeconfig)), policy_dir=policies
        )
        target = TargetRef("prod", "workhorse", "m")
        listed = SimulatorBackend(settings, api).runtime(target, parsed, body).reconciler
        assert listed.gpu_price is not None
        assert (listed.gpu_price.source, listed.gpu_price.usd_per_hour) == (
            "list price of the h200 profile",
            load_gpu("h200").cost_per_hour_usd,
        )
        priced = SimulatorBackend(replace(settings, gpu_hour_usd=1.75), api).runtime(target, parsed, body).reconciler
        assert priced.gpu_price is not None and priced.gpu_price.source == SETTING_SOURCE
