"""Layer shapes derived from model profiles, and the probe's pure helpers (no GPU, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.calibrate import gpu_probe, gpu_probe_sweeps
from controller.calibrate.shapes import (
    dense_intermediate,
    dense_matrices,
    mamba_shape,
    moe_layers,
    moe_shape,
    probe_shapes,
)
from controller.simulator.profiles import PROFILE_DIR, load_model


def test_dense_shapes_of_llama_match_its_config() -> None:
    m = load_model("llama-3.1-8b")
    assert dense_intermediate(m) == 14336
    assert {d["name"]: (d["k"], d["n"]) for d in dense_matrices(m)} == {
        "qkv": (4096, 6144),
        "o": (4096, 4096),
        "gate_up": (4096, 28672),
        "down": (14336, 4096),
        "lm_head": (4096, 128256),
    }
    assert moe_shape(m) is None
    assert mamba_shape(m) is None


def test_moe_and_mamba_shapes_of_nemotron_super() -> None:
    m = load_model("nemotron-3-super-fp8")
    assert moe_layers(m) == 40
    assert moe_shape(m, 1024) == {"num_experts": 512, "experts_per_token": 22, "d_in": 1024, "d_ff": 2688}
    assert mamba_shape(m) == {"heads": 128, "state_elems": 1048576}


def test_the_committed_probe_input_is_what_the_profiles_give() -> None:
    shapes = probe_shapes(
        load_model("llama-3.1-8b"),
        [load_model("nemotron-3-super-fp8")],
        moe_latent={"nemotron-3-super-fp8": 1024},
    )
    committed = json.loads((PROFILE_DIR / "calibration" / "h200-shapes.json").read_text())
    assert shapes == committed


@pytest.mark.parametrize(
    ("bytes_per_set", "want"),
    [(0, 1), (1024**3, 1), (64 * 1024**2, 4), (1024, 64)],
)
def test_rotations_cover_more_than_the_l2_cache(bytes_per_set: float, want: int) -> None:
    assert gpu_probe.rotations(bytes_per_set) == want


@pytest.mark.parametrize(
    ("tokens", "touched", "per_expert"),
    [(1, 22, 1), (16, 258, 2), (8192, 512, 352)],
)
def test_moe_batch_follows_uniform_routing(tokens: int, touched: int, per_expert: int) -> None:
    assert gpu_probe_sweeps.moe_batch(tokens, 512, 22) == (touched, per_expert)


@pytest.mark.parametrize("script", ["gpu_probe.py", "gpu_probe_sweeps.py", "gpu_probe_layer.py", "gpu_probe_e2e.py"])
def test_the_probe_script_needs_no_operator_dependencies(script: str) -> None:
    source = Path(gpu_probe.__file__).with_name(script).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "argparse", "json", "math", "os", "statistics", "sys", "time", "typing"}
