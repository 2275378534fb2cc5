"""The demo shows its progress: a line per simulated hour as soon as the hour is simulated, before the report."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

from controller.demo.model import TimelinePoint
from controller.demo.progress import hour_progress
from controller.demo.run import DEMO_START
from controller.simulator.traffic.diurnal import DiurnalTraffic

REPO = Path(__file__).resolve().parents[2]


def point(at: datetime, *, replicas: int = 2, config: str = "stock", weight: int = 0) -> TimelinePoint:
    return TimelinePoint(
        at=at,
        concurrency=8.0,
        arrival_rate=1.0,
        prompt_mean=512.0,
        output_mean=256.0,
        tokens_per_s=1200.0,
        stock_tokens_per_s=1000.0,
        requests=10,
        good_requests=9,
        candidate_weight=weight,
        stable_config=config,
        phase="RollingOut",
        gpu_seconds=120.0,
        output_tokens=1000.0,
        prompt_tokens=2000.0,
        replicas=replicas,
    )


def test_an_hours_progress_sums_its_own_points_and_actions_only() -> None:
    windows = DiurnalTraffic(7, "coding-agents").windows
    day_hour = next(h for h in range(24) if next(w for w in windows if w.contains(h)).name == "day")
    start = DEMO_START + timedelta(days=1, hours=day_hour)
    minute = timedelta(minutes=1)
    points = [
        point(start - 5 * minute, replicas=9),  # the hour before
        point(start, replicas=2),
        point(start + 30 * minute, replicas=3, config="mtp1", weight=25),
        point(start + 60 * minute, replicas=9),  # the hour after
    ]
    actions = [
        (start - minute, "Promote", ""),
        (start, "RunTrial", ""),
        (start + 10 * minute, "RunTrial", ""),
        (start + 20 * minute, "SetWeights", ""),
        (start + 60 * minute, "Rollback", ""),
    ]
    hour = hour_progress(start, DEMO_START, points, actions, windows)
    assert (hour.day, hour.window, hour.replicas, hour.config, hour.candidate_weight) == (2, "day", 3, "mtp1", 25)
    assert (hour.requests, hour.gain, hour.slo_attainment) == (20, 1.2, 0.9)
    assert hour.actions == (("RunTrial", 2), ("SetWeights", 1))
    assert hour.line() == (
        f"hour {day_hour:02d}:00 (day 2)  window day  3 replicas  config mtp1  phase RollingOut  1.20x stock  "
        "SLO 90.0% of 20  candidate at 25%  RunTrial x2, SetWeights"
    )


def test_the_demo_command_prints_the_hours_before_the_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "demo", "--hours", "1.5", "--out", str(tmp_path / "demo")],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("SHIFTLIGHT_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream: the order the lines were written in
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    # a line for each simulated hour (the last one part-way), each as it is done, then the report as before
    assert lines[0].startswith("hour 00:00  window night  ")
    assert lines[1].startswith("hour 01:00  window night  ")
    assert "RunTrial" in lines[0]  # the first hour trials candidates on the canary
    assert lines[2].startswith("Shiftlight demo: ")
    assert sum(line.startswith("hour ") for line in lines) == 2
    assert lines[-2].startswith("report: ")
    assert lines[-1].startswith("summary: peak gain over stock ")
    assert (tmp_path / "demo" / "report.txt").read_text().splitlines()[0] == lines[2]
