"""The simulator backend plays exactly the model and GPU a TunedService's spec names, or refuses it.

A spec whose model or GPU has no simulator profile (``gpuType: H100-80GB``: there is no H100 profile), or whose
policy targets another model or GPU, is refused with a code and the spec field; nothing is simulated. A
calibration profile the admin mounts (``SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE``) drives the fleets and trials on its
GPU and no others; one that cannot be read is refused at start, naming the variable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.adapters.simulated.fleet import SimulatedCluster
from controller.adapters.simulated.loadtester import SimulatedLoadTester
from controller.crd.models import TunedServiceSpec, parse_tuned_service
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.reactor.runtime import EventingCluster, TargetRuntime
from controller.reactor.settings import OperatorSettings, SimulatorSettings
from controller.reactor.simulator_backend import SimulatorBackend, SimulatorRefusal, simulated_hardware
from controller.simulator.profiles import PROFILE_DIR

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tunedservice.yaml"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GB300 = "gb300-dgx-station"


def spec_of(model: str, gpu: str, **model_fields: str) -> TunedServiceSpec:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["model"] = {"name": model, **model_fields}
    body["spec"]["gpuType"] = gpu
    spec, _ = parse_tuned_service(body)
    return spec


def test_an_h100_is_refused_naming_the_gpu_field() -> None:
    spec = spec_of(LLAMA, "H100-80GB")
    with pytest.raises(SimulatorRefusal) as refused:
        simulated_hardware(spec, None, None)
    assert (refused.value.code, refused.value.field) == ("simulator-unknown-gpu", "spec.gpuType")
    assert refused.value.reason == "SimulatorUnsupported"


@pytest.mark.parametrize(
    ("model", "gpu", "profile", "expected"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "H200-141GB", "dense", ("llama-3.1-8b", "h200")),
        ("llama-3.1-8b", "h200", "generic", ("llama-3.1-8b", "h200")),
        ("/models/my-finetune", "gb300-dgx-station", "nemotron-3-super-nvfp4", ("nemotron-3-super-nvfp4", GB300)),
        ("Qwen/Qwen3.6-27B-int4", "RTX-3090", "generic", ("qwen3.6-27b-int4", "rtx-3090")),
    ],
)  # fmt: skip
def test_a_spec_maps_to_the_profiles_of_its_model_and_gpu(
    model: str, gpu: str, profile: str, expected: tuple[str, str]
) -> None:
    assert simulated_hardware(spec_of(model, gpu, profile=profile), None, None) == expected


@pytest.mark.parametrize(
    ("model", "gpu", "policy", "code", "field"),
    [
        ("mistralai/Mistral-7B-Instruct-v0.3", "H200", (None, None), "simulator-unknown-model", "spec.model.name"),
        ("meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", (None, None), "simulator-unknown-gpu", "spec.gpuType"),
        ("meta-llama/Llama-3.1-8B-Instruct", "H200", ("nemotron-3-super-nvfp4", None), "simulator-model-mismatch",
         "spec.model.name"),
        ("meta-llama/Llama-3.1-8B-Instruct", "H200", ("llama-3.1-8b", "gb300-dgx-station"), "simulator-gpu-mismatch",
         "spec.gpuType"),
    ],
)  # fmt: skip
def test_what_the_simulator_cannot_play_is_refused_with_a_code_and_the_field(
    model: str, gpu: str, policy: tuple[str | None, str | None], code: str, field: str
) -> None:
    with pytest.raises(SimulatorRefusal) as refused:
        simulated_hardware(spec_of(model, gpu), *policy)
    assert (refused.value.code, refused.value.field, refused.value.source) == (code, field, "simulator")


def backend(tmp_path: Path, calibration: Path | None = None) -> SimulatorBackend:
    settings = OperatorSettings(
        policy_dir=REPO / "policies" / "v1",
        mirror_crs=False,
        simulator=SimulatorSettings(calibration_file=calibration),
    )
    return SimulatorBackend(settings, client.ApiClient(), background_trials=False)


def runtime_of(sim: SimulatorBackend, model: str, gpu: str, preset: str) -> TargetRuntime:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["uid"] = f"{model}-{gpu}"
    body["spec"].update(model={"name": model}, gpuType=gpu, policy={"preset": preset})
    del body["spec"]["workload"]["httpRoute"]  # no Gateway API to mirror onto
    spec, _ = parse_tuned_service(body)
    return sim.runtime(TargetRef("ml", "llama-8b", model), spec, body)


def fleet_and_trials(runtime: TargetRuntime) -> tuple[Any, SimulatedLoadTester]:
    cluster = runtime.ports.cluster
    assert isinstance(cluster, EventingCluster) and isinstance(cluster.inner, SimulatedCluster)
    tester = runtime.ports.load_tester
    assert isinstance(tester, SimulatedLoadTester)
    return cluster.inner.fleet, tester


def test_a_runtime_simulates_the_specs_model_and_gpu(tmp_path: Path) -> None:
    fleet, tester = fleet_and_trials(
        runtime_of(backend(tmp_path), "meta-llama/Llama-3.1-8B-Instruct", "H200", "dense-8b-h200")
    )
    assert (fleet.model, fleet.gpu) == ("llama-3.1-8b", "h200")
    assert (tester.model, tester.gpu) == ("llama-3.1-8b", "h200")
    assert fleet.perf.calibration is None and tester.perf.calibration is None  # the built-in constants


def test_a_runtime_for_hardware_without_a_profile_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    sim = backend(tmp_path)
    with pytest.raises(SimulatorRefusal) as refused:
        runtime_of(sim, "meta-llama/Llama-3.1-8B-Instruct", "H100-80GB", "default")
    assert refused.value.code == "simulator-unknown-gpu"
    assert sim.held() == set()


def test_a_mounted_calibration_drives_the_fleets_and_trials_on_its_gpu_only(tmp_path: Path) -> None:
    mounted = tmp_path / "calibration.yaml"
    shutil.copy(PROFILE_DIR / "calibration-h200.yaml", mounted)
    sim = backend(tmp_path, mounted)
    assert sim.calibration is not None and sim.calibration.gpu == "h200"
    fleet, tester = fleet_and_trials(runtime_of(sim, "meta-llama/Llama-3.1-8B-Instruct", "H200", "dense-8b-h200"))
    assert fleet.perf.calibration == sim.calibration and tester.perf.calibration == sim.calibration
    assert tester.perf is not fleet.perf  # trials run on threads of their own
    other, other_tester = fleet_and_trials(runtime_of(sim, "nemotron-3-super-nvfp4", "gb300-dgx-station", "default"))
    assert other.perf.calibration is None and other_tester.perf.calibration is None


@pytest.mark.parametrize(
    ("content", "why"),
    [(None, "cannot read"), ("gpu: h200\n", "invalid calibration profile")],
)
def test_a_calibration_that_cannot_be_loaded_is_refused_at_start(tmp_path: Path, content: str | None, why: str) -> None:
    path = tmp_path / "calibration.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InvalidInput, match=why) as refused:
        backend(tmp_path, path)
    assert refused.value.field == "SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE"


def test_a_calibration_of_a_gpu_without_a_profile_is_refused_at_start(tmp_path: Path) -> None:
    data = yaml.safe_load((PROFILE_DIR / "calibration-h200.yaml").read_text())
    data["gpu"] = "h100"
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InvalidInput) as refused:
        backend(tmp_path, path)
    assert refused.value.field == "SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE" and "'h100'" in str(refused.value)


def test_the_calibration_setting_comes_from_the_environment(tmp_path: Path) -> None:
    settings = OperatorSettings.from_env({"SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE": str(tmp_path / "c.yaml")})
    assert settings.simulator.calibration_file == tmp_path / "c.yaml"


@pytest.mark.parametrize(("switch", "calibrated"), [("1", True), ("", False)])
def test_the_process_wide_calibration_switch(switch: str, calibrated: bool) -> None:
    """``SHIFTLIGHT_SIMULATOR_CALIBRATED=1`` puts every model built without an explicit calibration on its GPU's
    shipped profile (read once, at import, so in a process of its own)."""
    probe = (
        "from controller.simulator.perf import PerformanceModel\n"
        "print(PerformanceModel.named('llama-3.1-8b', 'h200').calibration is not None)"
    )
    env = {**os.environ, "SHIFTLIGHT_SIMULATOR_CALIBRATED": switch}
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(calibrated)
