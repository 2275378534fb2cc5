"""The canary Job manifest runs the commands this package has: prepare, probe, fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from controller.cli.main import app

JOB = Path(__file__).resolve().parents[2] / "examples" / "calibrate-job.yaml"


def _spec() -> dict[str, Any]:
    job = yaml.safe_load(JOB.read_text())
    assert job["kind"] == "Job"
    spec = job["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def test_the_probe_runs_on_one_gpu_and_the_other_steps_on_none() -> None:
    spec = _spec()
    steps = {c["name"]: c for c in spec["initContainers"] + spec["containers"]}
    assert list(steps) == ["prepare", "probe", "fit"]
    assert steps["probe"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in steps["prepare"]["resources"]["limits"]
    assert "nvidia.com/gpu" not in steps["fit"]["resources"]["limits"]
    assert steps["probe"]["command"] == ["python3", "/work/gpu_probe.py"]
    assert spec["nodeSelector"] and spec["tolerations"]


def test_the_prepare_step_writes_what_the_probe_step_reads(tmp_path: Path) -> None:
    prepare = _spec()["initContainers"][0]
    args = [a.replace("--prepare=/work", f"--prepare={tmp_path}") for a in prepare["args"]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "shapes.json").is_file()
    assert (tmp_path / "gpu_probe.py").is_file()
    assert (tmp_path / "gpu_probe_sweeps.py").is_file()  # the probe loads its sweeps from its own folder
    assert (tmp_path / "gpu_probe_layer.py").is_file()
    assert (tmp_path / "gpu_probe_e2e.py").is_file()  # the probe step runs with --e2e


def test_the_fit_step_prints_a_profile_that_parses(tmp_path: Path) -> None:
    fit = _spec()["containers"][0]
    raw = Path(__file__).resolve().parents[2] / "controller/simulator/profiles/calibration/h200-raw.json"
    args = [a.replace("/work/raw.json", str(raw)).replace("--out=/work", f"--out={tmp_path}") for a in fit["args"]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    assert printed["gpu"] == "h200"
