"""shiftctl keeps kubectl's habits, against the fake API through the typer entry point: names and numbers are never
cut at any terminal width, every read verb speaks ``-o table|wide|yaml|json|name``, ``get -w`` prints a row per
change, ``--as`` is taken by every write verb, ``status --timeout`` exits 0/1/2 for CI, and TunedService names
complete in the shell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
import typer
import yaml
from kubernetes import client, config
from typer.testing import CliRunner

from controller.adapters.kube.crs import trial_name_for
from controller.cli.shiftctl import follow as follow
from controller.cli.shiftctl.commands import app
from controller.cli.shiftctl.reads import connect, get_body, list_bodies
from controller.cli.shiftctl.terminal import complete_names
from controller.crd.models import status_to_wire
from controller.domain.phases import Phase
from controller.domain.status import Reason
from tests.support.kube_api import KubeAPIServer

from .conftest import CANDIDATE, SHAPE, G, P, Seeder, V, awaiting_status, tuned_service

pytestmark = pytest.mark.kube

runner = CliRunner()
LONG_NS = "inference-platform-production-eu-west"
LONG_NAME = "llama-3-1-70b-instruct-customer-support-chat-assistant"
LONG_MODEL = "meta-llama/Llama-3.1-70B-Instruct-with-a-long-fine-tune-suffix"
LONG_REASON = (
    "approval needed before shifting traffic to mtp1+async+seqs256: 1.62x goodput on the day shape, "
    "measured over three trials on the canary with the SLO met at every percentile the policy names"
)


def run(kubeconfig: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)], env=env)


def seed_long(kubeconfig: Path) -> None:
    co = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
    body = tuned_service(LONG_NAME)
    body["spec"]["model"]["name"] = LONG_MODEL
    co.create_namespaced_custom_object(G, V, LONG_NS, P, body)
    status = awaiting_status().model_copy(update={"last_reasons": (Reason(message=LONG_REASON),)})
    co.patch_namespaced_custom_object_status(G, V, LONG_NS, P, LONG_NAME, {"status": status_to_wire(status)})


# ----- names never cut -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", ["80", "120"])
def test_get_wide_and_trials_keep_every_name_and_number_whole(kubeconfig: Path, width: str) -> None:
    seed_long(kubeconfig)
    wide = run(kubeconfig, "get", "-A", "-o", "wide", env={"COLUMNS": width})
    assert wide.exit_code == 0, wide.output
    header, line = wide.stdout.splitlines()
    assert header.split() == [
        "NAMESPACE", "NAME", "PHASE", "ACTIVE", "CANDIDATE", "WEIGHT", "GAIN", "AGE", "MODEL", "WINDOW", "TRIALS",
        "REASON",
    ]  # fmt: skip
    for whole in (LONG_NS, LONG_NAME, "mtp1+async+seqs256", "1.62x", LONG_MODEL, LONG_REASON):
        assert whole in line
    trials = run(kubeconfig, "trials", LONG_NAME, "-n", LONG_NS, env={"COLUMNS": width})
    assert trials.exit_code == 0, trials.output
    best = trials.stdout.splitlines()[1].split()
    expected = trial_name_for(LONG_NAME, CANDIDATE, SHAPE)
    assert best[:5] == [expected, "mtp1+async+seqs256", "measured", "1,458", "1,604"]  # goodput, output tok/s
    assert "…" not in wide.stdout + trials.stdout


# ----- -o on every read verb -----------------------------------------------------------------------------------

READS = [
    ("get", "workhorse"),
    ("describe", "workhorse"),
    ("explain", "workhorse"),
    ("trials", "workhorse"),
    ("history", "workhorse"),
    ("cost", "workhorse"),
    ("status", "workhorse", "--timeout", "0s"),
]


@pytest.mark.parametrize("verb", READS, ids=[r[0] for r in READS])
def test_every_read_verb_speaks_json_yaml_and_name(kubeconfig: Path, seed: Seeder, verb: tuple[str, ...]) -> None:
    seed("workhorse")
    as_json = run(kubeconfig, *verb, "-o", "json")
    as_yaml = run(kubeconfig, *verb, "-o", "yaml")
    as_name = run(kubeconfig, *verb, "-o", "name")
    assert as_json.exit_code == as_yaml.exit_code == (2 if verb[0] == "status" else 0), as_json.output
    assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout)  # the same data either way
    assert as_name.exit_code == 0, as_name.output
    if verb[0] == "trials":
        assert as_name.stdout.splitlines()[0] == f"trial.shiftlight.dev/{trial_name_for('workhorse', CANDIDATE, SHAPE)}"
    else:
        assert as_name.stdout.splitlines() == ["tunedservice.shiftlight.dev/workhorse"]


def test_describe_and_explain_json_carry_the_object_and_the_reasoning(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    described = json.loads(run(kubeconfig, "describe", "workhorse", "-o", "json").stdout)
    assert described["object"]["status"]["phase"] == "AwaitingApproval"
    explained = json.loads(run(kubeconfig, "explain", "workhorse", "-o", "json").stdout)
    assert explained["phase"] == "AwaitingApproval"
    assert explained["trials"][0]["name"] == trial_name_for("workhorse", CANDIDATE, SHAPE)
    assert explained["approvalEvidence"]["candidate"] == "mtp1+async+seqs256"


# ----- get -w ------------------------------------------------------------------------------------------------


def test_get_watch_prints_the_table_then_a_row_per_change(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    seed("nightly")
    conn = connect(str(kubeconfig), None, "prod")
    co = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
    printed: list[tuple[list[str], bool]] = []
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the change lands while the watcher waits
        sleeps.append(seconds)
        if len(sleeps) == 1:
            rolling = awaiting_status(weight=25).model_copy(update={"phase": Phase.ROLLING_OUT})
            co.patch_namespaced_custom_object_status(G, V, "prod", P, "workhorse", {"status": status_to_wire(rolling)})

    shown = follow.watch_changes(
        lambda: list_bodies(conn, False),
        lambda bodies, header: printed.append(([b["metadata"]["name"] for b in bodies], header)),
        sleep=sleep,
        polls=3,
    )
    assert shown == 1
    assert printed == [(["nightly", "workhorse"], True), (["workhorse"], False)]
    assert len(sleeps) == 3


def test_get_watch_through_the_cli_prints_the_table_and_stops_at_the_request_timeout(
    kubeconfig: Path, seed: Seeder
) -> None:
    seed("workhorse")
    result = run(kubeconfig, "get", "-w", "--request-timeout", "0s")
    assert result.exit_code == 0, result.output
    assert result.stdout.split()[:2] == ["NAME", "PHASE"]
    assert "workhorse" in result.stdout
    bad = run(kubeconfig, "get", "-w", "--request-timeout", "soon")
    assert bad.exit_code == 2  # a usage error, as kubectl's


# ----- --as on every write verb ----------------------------------------------------------------------------------


def test_pause_and_resume_take_as_and_send_it_as_impersonation(
    kubeconfig: Path, seed: Seeder, kube: KubeAPIServer
) -> None:
    seed("workhorse", awaiting_status(weight=25).model_copy(update={"phase": Phase.ROLLING_OUT}))
    paused = run(kubeconfig, "pause", "workhorse", "--as", "carol")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.strip() == "tunedservice.shiftlight.dev/workhorse paused by carol"
    resumed = run(kubeconfig, "resume", "workhorse", "--as", "dave")
    assert resumed.stdout.strip() == "tunedservice.shiftlight.dev/workhorse resumed by dave"
    patches = [r for r in list(kube.api) if r.method == "PATCH" and isinstance(r.data, list)]  # the verbs' patches
    assert [r.headers.get("Impersonate-User") for r in patches] == ["carol", "dave"]


@pytest.mark.parametrize("verb", ["approve", "reject", "pause", "resume", "abort", "rollback"])
def test_every_write_verb_takes_as(verb: str) -> None:
    assert "--as" in runner.invoke(app, [verb, "--help"]).stdout


# ----- status --timeout ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "code"),
    [
        (Phase.OBSERVING, 0),
        (Phase.ROLLED_BACK, 1),
        (Phase.FROZEN, 1),
        (Phase.AWAITING_APPROVAL, 2),
        (Phase.ROLLING_OUT, 2),
    ],
)
def test_status_exits_0_when_healthy_1_when_degraded_2_on_timeout(
    kubeconfig: Path, seed: Seeder, phase: Phase, code: int
) -> None:
    update: dict[str, Any] = {"phase": phase}
    if phase in (Phase.OBSERVING, Phase.FROZEN):
        update["rollout"] = None
    if phase is Phase.FROZEN:
        update["frozen_reason"] = "metrics missing"
    seed("workhorse", awaiting_status().model_copy(update=update))
    result = run(kubeconfig, "status", "workhorse", "--timeout", "0s")
    assert result.exit_code == code, result.output
    assert result.stdout.split()[0] == {0: "Healthy", 1: "Degraded", 2: "Progressing"}[code]


def test_status_waits_through_progressing_until_healthy(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    conn = connect(str(kubeconfig), None, "prod")
    co = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
    clock = [0.0]
    lines: list[str] = []

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] >= 4:  # promoted on the third look
            done = awaiting_status().model_copy(
                update={"phase": Phase.OBSERVING, "rollout": None, "active_config": CANDIDATE}
            )
            co.patch_namespaced_custom_object_status(G, V, "prod", P, "workhorse", {"status": status_to_wire(done)})

    state, timed_out = follow.wait_for_health(
        lambda: get_body(conn, "workhorse"), lines.append, timeout_s=60, sleep=sleep, now=lambda: clock[0]
    )
    assert (state, timed_out) == (follow.Health.HEALTHY, False)
    assert [line.split()[0] for line in lines] == ["Progressing", "Healthy"]
    assert lines[-1] == "Healthy - Observing on mtp1+async+seqs256"


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("500ms", 0.5)]
)
def test_durations_read_as_kubectl_writes_them(text: str, seconds: float) -> None:
    assert follow.parse_duration(text) == seconds


# ----- completion ------------------------------------------------------------------------------------------------


def test_tunedservice_names_complete_from_the_api(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    seed("worker-b")
    seed("nightly")
    command = typer.main.get_command(app)
    ctx = click.Context(command)
    ctx.params = {"kubeconfig": str(kubeconfig), "namespace": "prod", "context": None}
    assert complete_names(ctx, "work") == ["worker-b", "workhorse"]
    ctx.params = {"kubeconfig": str(kubeconfig.parent / "missing"), "namespace": "prod", "context": None}
    assert complete_names(ctx, "") == []  # no cluster: no names, no error


def test_the_shell_completes_names_through_the_app(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    env = {
        "_SHIFTCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "shiftctl describe wor",
        "COMP_CWORD": "2",
        "KUBECONFIG": str(kubeconfig),
    }
    result = runner.invoke(app, [], env=env, prog_name="shiftctl")
    assert result.stdout.split() == ["workhorse"]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_prints_the_shell_script(shell: str) -> None:
    result = runner.invoke(app, ["completion", shell])
    assert result.exit_code == 0, result.output
    assert f"_SHIFTCTL_COMPLETE=complete_{shell}" in result.stdout
