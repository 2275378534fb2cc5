"""`shiftctl trials [-w]` over the fake API: the TunedService's Trial CRs as rows, and the watch loop following
a running trial (driven by a fake sleep that moves the trial on) until it finishes or the timeout passes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from rich.console import Console
from typer.testing import CliRunner

from controller.cli.shiftctl.commands import app
from controller.cli.shiftctl.reads import Conn, trial_crs
from controller.cli.shiftctl.trials import trial_row, watch_trials
from controller.crd import models as crd
from controller.domain.config import EngineConfig

from .conftest import CANDIDATE, SHAPE, Seeder, trial

pytestmark = pytest.mark.kube

G, V = crd.GROUP, crd.VERSION
runner = CliRunner()
RUNNING = EngineConfig(max_num_seqs=128)


def run(kubeconfig: Path, *args: str) -> Any:
    return runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)])


def progress(stage: str, done: int, planned: int = 100, elapsed: float = 65.0, rate: float = 1234.0) -> JSONish:
    return {"stage": stage, "requestsDone": done, "requestsPlanned": planned, "elapsedSeconds": elapsed,
            "outputTokensPerS": rate}  # fmt: skip


JSONish = dict[str, Any]


@pytest.fixture
def co(kubeconfig: Path) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))


@pytest.fixture
def trials_of(seed: Seeder, co: client.CustomObjectsApi) -> Callable[[str, EngineConfig, JSONish], None]:
    seed("workhorse")

    def make(name: str, cfg: EngineConfig, status: JSONish) -> None:
        spec = crd.TrialSpec(target="workhorse", config=cfg, shape=SHAPE)
        body = {
            "apiVersion": crd.API_VERSION,
            "kind": crd.KIND_TRIAL,
            "metadata": {"name": name, "labels": {"shiftlight.dev/tuned-service": "workhorse"}},
            "spec": spec.to_wire(),
        }
        co.create_namespaced_custom_object(G, V, "prod", "trials", body)
        co.patch_namespaced_custom_object_status(G, V, "prod", "trials", name, {"status": status})

    return make


def finished(cfg: EngineConfig, goodput: float) -> JSONish:
    result = trial(cfg, goodput)
    return crd.TrialCRStatus(phase="Succeeded", config_label=cfg.label(), result=result).to_wire()


def test_trials_lists_the_trial_crs_running_first(
    kubeconfig: Path, trials_of: Callable[[str, EngineConfig, JSONish], None], co: client.CustomObjectsApi
) -> None:
    trials_of("workhorse-trial-a", CANDIDATE, finished(CANDIDATE, 1458.0))
    trials_of("workhorse-trial-b", RUNNING, {"phase": "Running", "configLabel": RUNNING.label(),
                                             "progress": progress("replay", 40)})  # fmt: skip
    other = {"apiVersion": crd.API_VERSION, "kind": crd.KIND_TRIAL, "metadata": {"name": "nightly-trial-c",
             "labels": {"shiftlight.dev/tuned-service": "nightly"}},
             "spec": crd.TrialSpec(target="nightly", config=RUNNING, shape=SHAPE).to_wire()}  # fmt: skip
    co.create_namespaced_custom_object(G, V, "prod", "trials", other)
    result = run(kubeconfig, "trials", "workhorse")
    assert result.exit_code == 0, result.output
    header, *rows = [line.split() for line in result.stdout.splitlines()]
    assert header == ["NAME", "CONFIG", "PHASE", "STAGE", "DONE", "ELAPSED", "TOK/S", "RESULT"]
    assert rows[0] == ["workhorse-trial-b", RUNNING.label(), "Running", "replay", "40/100", "1m05s", "1,234", "-"]
    assert rows[1][:5] == ["workhorse-trial-a", CANDIDATE.label(), "Succeeded", "-", "100"]
    assert rows[1][6:] == ["1,604", "measured,", "goodput", "1,458", "tok/s"]
    assert len(rows) == 2  # another TunedService's trial is not listed
    as_json = json.loads(run(kubeconfig, "trials", "workhorse", "-o", "json").stdout)
    assert sorted(i["metadata"]["name"] for i in as_json) == ["workhorse-trial-a", "workhorse-trial-b"]


def test_watch_follows_a_running_trial_until_it_finishes(
    kubeconfig: Path, trials_of: Callable[[str, EngineConfig, JSONish], None], co: client.CustomObjectsApi
) -> None:
    trials_of("workhorse-trial-a", CANDIDATE, finished(CANDIDATE, 1458.0))
    launching = {"phase": "Running", "configLabel": RUNNING.label(), "progress": progress("launch", 0, planned=0)}
    trials_of("workhorse-trial-b", RUNNING, launching)
    steps = [
        {"phase": "Running", "progress": progress("replay", 50, elapsed=30)},
        {**finished(RUNNING, 900.0), "progress": progress("done", 100, elapsed=61)},
    ]
    slept: list[float] = []
    clock = iter(range(1000))

    def sleep(seconds: float) -> None:  # the trial moves on while the watcher sleeps
        slept.append(seconds)
        co.patch_namespaced_custom_object_status(G, V, "prod", "trials", "workhorse-trial-b", {"status": steps.pop(0)})

    conn = Conn(config.new_client_from_config(str(kubeconfig)), "prod", None, None, None, None)
    out = io.StringIO()
    done, rows = watch_trials(
        lambda: trial_crs(conn, "workhorse"),
        Console(file=out, width=120, force_terminal=False),
        sleep=sleep,
        now=lambda: float(next(clock)),
    )
    assert done and slept == [2.0, 2.0] and not steps
    assert [(r.name, r.phase, r.done) for r in rows] == [("workhorse-trial-a", "Succeeded", 100),
                                                         ("workhorse-trial-b", "Succeeded", 100)]  # fmt: skip
    bars = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(bars) == 1, "one bar: the trial that finished before the watch began has none"
    assert bars[0].split()[:2] == [RUNNING.label(), "Succeeded"] and "100/100" in bars[0]
    assert "━" in bars[0]  # the bar itself


def test_watch_stops_at_the_timeout_and_the_cli_exits_non_zero(
    kubeconfig: Path, trials_of: Callable[[str, EngineConfig, JSONish], None]
) -> None:
    trials_of("workhorse-trial-b", RUNNING, {"phase": "Running", "progress": progress("replay", 10)})
    slept: list[float] = []
    clock = iter(range(0, 1000, 3))
    conn = Conn(config.new_client_from_config(str(kubeconfig)), "prod", None, None, None, None)
    done, rows = watch_trials(
        lambda: trial_crs(conn, "workhorse"),
        Console(file=io.StringIO(), width=120),
        timeout_s=10,
        sleep=slept.append,
        now=lambda: float(next(clock)),
    )
    assert not done and len(slept) == 3 and rows[0].done == 10
    result = run(kubeconfig, "trials", "workhorse", "-w", "--timeout", "0")
    assert result.exit_code == 1
    assert "timed out" in result.stderr and "workhorse-trial-b" in result.stdout


def test_watch_with_nothing_running_prints_the_table_and_exits(
    kubeconfig: Path, trials_of: Callable[[str, EngineConfig, JSONish], None]
) -> None:
    trials_of("workhorse-trial-a", CANDIDATE, finished(CANDIDATE, 1458.0))
    result = run(kubeconfig, "trials", "workhorse", "--watch")
    assert result.exit_code == 0, result.output
    assert "workhorse-trial-a" in result.stdout and "Succeeded" in result.stdout


@pytest.mark.security
def test_an_unreadable_trial_status_is_a_row_not_a_crash() -> None:
    row = trial_row({"metadata": {"name": "t"}, "spec": {"target": "w"}, "status": {"phase": "Exploded"}})
    assert (row.name, row.phase) == ("t", "Unknown") and row.result.startswith("unreadable")
