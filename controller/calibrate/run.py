"""``shiftlight calibrate``: write the shapes, run the GPU probe, fit, write the calibration profile."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from controller.calibrate.fit import fit_calibration, held_out_summary
from controller.calibrate.shapes import probe_shapes
from controller.errors import InvalidInput, PermanentError
from controller.simulator.calibration_profile import Calibration, dump_calibration, parse_calibration
from controller.simulator.profiles import load_gpu, load_model

PROBE = Path(__file__).with_name("gpu_probe.py")
#: The scripts the probe loads from its own folder: its kernel sweeps, one layer's parts and the end-to-end stack.
PROBE_SIBLINGS = tuple(
    Path(__file__).with_name(name) for name in ("gpu_probe_sweeps.py", "gpu_probe_layer.py", "gpu_probe_e2e.py")
)


def parse_latents(items: Sequence[str]) -> dict[str, int]:
    """``MODEL=WIDTH`` pairs (the expert input width of latent-MoE models)."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, width = item.partition("=")
        if not sep or not width.isdigit() or int(width) <= 0:
            raise InvalidInput(f"expected MODEL=WIDTH, got {item!r}", field="--moe-latent")
        out[name] = int(width)
    return out


def read_raw(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"cannot read the probe's output: {exc}", source=str(path)) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("points"), list):
        raise InvalidInput("the probe's output has no list of points", source=str(path), field="points")
    return raw


def build_profile(raw: dict[str, Any], gpu: str, raw_file: str = "") -> Calibration:
    """Fit every point, and record the held-out errors of a fit on half of them."""
    g = load_gpu(gpu)
    cal = fit_calibration(raw, g, raw_file=raw_file)
    return cal.model_copy(update={"held_out": held_out_summary(raw, g)})


def require_torch(python: str) -> None:
    """Refuse, in one line, to start the probe with a Python that has no PyTorch (looked up, not imported)."""
    found = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"],
        check=False,
        capture_output=True,
    )
    if found.returncode != 0:
        raise PermanentError(
            f"the GPU probe needs PyTorch, and {python} has none: install torch (with CUDA) there, run the probe "
            "where it is installed (--prepare DIR writes it out; then fit its raw.json with --raw FILE)"
        )


def run_probe(shapes: dict[str, Any], workdir: Path, *, quick: bool, e2e: bool, python: str = sys.executable) -> Path:
    """Run the GPU probe in a child process (it needs PyTorch and a GPU); returns the path of its raw.json."""
    require_torch(python)
    shapes_path = workdir / "shapes.json"
    shapes_path.write_text(json.dumps(shapes, indent=1))
    cmd = [python, str(PROBE), "--shapes", str(shapes_path), "--out", str(workdir)]
    if quick:
        cmd.append("--quick")
    if e2e:
        cmd.append("--e2e")
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise InvalidInput(f"the GPU probe failed (exit status {done.returncode})", source=str(PROBE))
    return workdir / "raw.json"


def prepare_probe(folder: Path, dense_model: str, other_models: Sequence[str], moe_latent: Sequence[str]) -> Path:
    """Write ``shapes.json`` and a copy of the probe scripts to ``folder``; returns the shapes file."""
    folder.mkdir(parents=True, exist_ok=True)
    shapes = probe_shapes(
        load_model(dense_model), [load_model(m) for m in other_models], moe_latent=parse_latents(moe_latent)
    )
    path = folder / "shapes.json"
    path.write_text(json.dumps(shapes, indent=1))
    for script in (PROBE, *PROBE_SIBLINGS):
        (folder / script.name).write_text(script.read_text())
    return path


def calibrate(
    *,
    gpu: str,
    dense_model: str,
    other_models: Sequence[str],
    moe_latent: Sequence[str],
    out_dir: Path,
    raw_path: Path | None,
    quick: bool,
    e2e: bool,
) -> tuple[Path, Calibration]:
    """Measure (or read ``raw_path``), fit and write ``calibration-<gpu>.yaml`` and the raw points to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if raw_path is None:
        shapes = probe_shapes(
            load_model(dense_model), [load_model(m) for m in other_models], moe_latent=parse_latents(moe_latent)
        )
        with tempfile.TemporaryDirectory() as tmp:
            raw = read_raw(run_probe(shapes, Path(tmp), quick=quick, e2e=e2e))
        raw_path = out_dir / f"{gpu}-raw.json"
        raw_path.write_text(json.dumps(raw, indent=1))
    else:
        raw = read_raw(raw_path)
    try:
        raw_name = str(raw_path.resolve().relative_to(out_dir.resolve()))
    except ValueError:
        raw_name = raw_path.name
    cal = build_profile(raw, gpu, raw_file=raw_name)
    path = out_dir / f"calibration-{gpu}.yaml"
    if path.exists():  # the kernel probe does not measure the engine: a profile's engine section stays
        previous = parse_calibration(yaml.safe_load(path.read_text()), str(path))
        cal = cal.model_copy(update={"engine": previous.engine})
    path.write_text(HEADER.format(gpu=gpu) + dump_calibration(cal))
    return path, cal


HEADER = (
    "# Calibration profile of {gpu}: written by `shiftlight calibrate` from the GPU probe's timings.\n"
    "# Efficiencies are fractions of the GPU profile's datasheet numbers; see docs/simulator.md, 'Calibration'.\n"
)
