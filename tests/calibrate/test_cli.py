"""``shiftlight calibrate --raw``: fit an earlier probe's output and write the profile (no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controller.calibrate.profile import read_calibration
from controller.calibrate.run import parse_latents
from controller.cli.main import app
from controller.errors import InvalidInput
from controller.simulator.profiles import PROFILE_DIR

RAW = PROFILE_DIR / "calibration" / "h200-raw.json"


def test_calibrate_fits_a_raw_file_and_writes_a_loadable_profile(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate", "--gpu", "h200", "--raw", str(RAW), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    cal = read_calibration(tmp_path / "calibration-h200.yaml")
    assert cal.gpu == "h200"
    assert cal.held_out["gemm_points"] > 0
    assert cal.weight_gemm.bandwidth == pytest.approx(0.88, abs=0.05)  # 4.2 TB/s of a 4.8 TB/s datasheet


def test_a_refit_keeps_the_profiles_engine_section(tmp_path: Path) -> None:
    """The kernel probe does not measure the engine; refitting its points keeps what the engine bench fitted."""
    shipped = PROFILE_DIR / "calibration-h200.yaml"
    (tmp_path / "calibration-h200.yaml").write_text(shipped.read_text())
    result = CliRunner().invoke(app, ["calibrate", "--gpu", "h200", "--raw", str(RAW), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    kept = read_calibration(tmp_path / "calibration-h200.yaml").engine
    assert kept is not None
    assert kept == read_calibration(shipped).engine
    fresh = tmp_path / "fresh"
    result = CliRunner().invoke(app, ["calibrate", "--gpu", "h200", "--raw", str(RAW), "--out", str(fresh)])
    assert result.exit_code == 0, result.output
    assert read_calibration(fresh / "calibration-h200.yaml").engine is None


@pytest.mark.security
def test_a_raw_file_without_points_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "raw.json"
    bad.write_text(json.dumps({"device": {}}))
    result = CliRunner().invoke(app, ["calibrate", "--gpu", "h200", "--raw", str(bad), "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, InvalidInput)
    assert result.exception.source == str(bad)
    assert result.exception.field == "points"


@pytest.mark.parametrize(("items", "want"), [([], {}), (["m=1024"], {"m": 1024}), (["a=1", "b=2"], {"a": 1, "b": 2})])
def test_parse_latents(items: list[str], want: dict[str, int]) -> None:
    assert parse_latents(items) == want


@pytest.mark.security
@pytest.mark.parametrize("item", ["m", "m=", "m=-3", "m=x"])
def test_bad_latents_are_refused(item: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_latents([item])
    assert err.value.field == "--moe-latent"
