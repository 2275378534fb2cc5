"""The calibration profile: the shipped one loads, a bad one is refused with the file and field named."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.calibrate.profile import (
    dump_calibration,
    load_calibration,
    parse_calibration,
    read_calibration,
)
from controller.errors import InvalidInput


@functools.cache
def _shipped_once() -> dict[str, Any]:
    cal = load_calibration("h200")
    assert cal is not None
    data = yaml.safe_load(dump_calibration(cal))
    assert isinstance(data, dict)
    return data


def _shipped() -> dict[str, Any]:
    return copy.deepcopy(_shipped_once())


def test_the_shipped_h200_profile_loads_and_names_what_it_measured_on() -> None:
    cal = load_calibration("h200")
    assert cal is not None
    assert cal.gpu == "h200"
    assert cal.measured_on.device == "NVIDIA H200"
    assert "llama-3.1-8b" in cal.measured_on.models
    assert cal.raw_file == "calibration/h200-raw.json"
    assert cal.points and cal.held_out


def test_a_gpu_without_a_profile_has_no_calibration() -> None:
    assert load_calibration("rtx-3090") is None


def test_dump_and_parse_round_trip() -> None:
    cal = load_calibration("h200")
    assert cal is not None
    assert parse_calibration(yaml.safe_load(dump_calibration(cal)), "x.yaml") == cal


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value


_DELETE = object()


@pytest.mark.security
@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("weight_gemm.bandwidth", 0.0, "weight_gemm.bandwidth"),
        ("weight_gemm.mfu.y", [2.0] * 8, "weight_gemm.mfu"),
        ("weight_gemm.mfu.x", [64.0, 32.0] + [1e3 + i for i in range(6)], "weight_gemm.mfu"),
        ("moe_gemm.efficiency.y", [0.5], "moe_gemm.efficiency"),
        ("decode_attention.fixed_s", -1.0, "decode_attention.fixed_s"),
        ("overhead.graph_kernel_s", "fast", "overhead.graph_kernel_s"),
        ("layer_ops.bandwidth", 0.0, "layer_ops.bandwidth"),
        ("layer_ops.kernel_efficiency.y", [2.0] * 14, "layer_ops.kernel_efficiency"),
        ("layer_ops.kernel_efficiency", _DELETE, "layer_ops.kernel_efficiency"),
        ("layer_ops.kernel_s", 1e-6, "layer_ops.kernel_s"),
        ("gemm_chain.efficiency.x", [0.0] * 14, "gemm_chain.efficiency"),
        ("gemm_chain.efficiency", _DELETE, "gemm_chain.efficiency"),
        ("engine.cpu_step_base_s", -1e-3, "engine.cpu_step_base_s"),
        ("engine.v1_runner_step_s", 1.0, "engine.v1_runner_step_s"),
        ("engine.prefill_compute_scale", 0.0, "engine.prefill_compute_scale"),
        ("engine.fp8_kv_step_bytes", "two", "engine.fp8_kv_step_bytes"),
        ("engine.vllm", _DELETE, "engine.vllm"),
        ("gpu", _DELETE, "gpu"),
        ("surprise", 1, "surprise"),
        ("schema_version", 2, ""),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(path: str, value: Any, field: str) -> None:
    data = _shipped()
    _set(data, path, value)
    with pytest.raises(InvalidInput) as err:
        parse_calibration(data, "calibration-h200.yaml")
    assert err.value.source == "calibration-h200.yaml"
    assert err.value.field.startswith(field)


@pytest.mark.security
@pytest.mark.parametrize("text", ["- a list\n", "gpu: [unclosed\n", ""])
def test_a_file_that_is_not_a_profile_is_refused_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "calibration-x.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInput) as err:
        read_calibration(path)
    assert err.value.source == str(path)


def test_a_profile_from_before_the_layer_primitives_still_loads_without_them() -> None:
    data = _shipped()
    del data["layer_ops"], data["gemm_chain"]
    cal = parse_calibration(data, "calibration-h200.yaml")
    assert cal.layer_ops is None and cal.gemm_chain is None


def test_the_shipped_profile_has_the_layer_primitives() -> None:
    cal = load_calibration("h200")
    assert cal is not None and cal.layer_ops is not None and cal.gemm_chain is not None
    assert cal.layer_ops.kernels_per_layer == (22.0, 24.0)  # the profiler's count, as the stack's code says
    assert 0.0 < cal.layer_ops.bandwidth <= 1.2
    assert {"layer_ops_median", "gemm_chain_median"} <= set(cal.held_out)
