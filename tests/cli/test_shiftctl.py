"""shiftctl end to end over HTTP against the fake API, through the typer entry point."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from controller.cli.shiftctl.commands import app
from controller.crd.models import parse_tuned_service
from controller.domain.phases import Phase
from tests.support.kube_api import KubeAPIServer, StatusError

from .conftest import Seeder, awaiting_status

pytestmark = pytest.mark.kube

runner = CliRunner()
Reader = Callable[[str], dict[str, Any]]


def run(kubeconfig: Path, *args: str) -> Any:
    return runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)])


def test_help_and_completion() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("get", "describe", "explain", "trials", "history", "approve", "reject", "pause", "resume", "abort",
                 "rollback", "cost"):  # fmt: skip
        assert verb in result.output
    assert "--install-completion" in result.output


def test_get_table_wide_json_yaml_and_all_namespaces(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    seed("nightly", namespace="batch")
    table = run(kubeconfig, "get")
    assert table.exit_code == 0, table.output
    header, line = table.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "ACTIVE", "CANDIDATE", "WEIGHT", "GAIN", "AGE"]
    assert line.split()[:6] == ["workhorse", "AwaitingApproval", "stock", "mtp1+async+seqs256", "0%", "1.62x"]
    assert "nightly" not in table.stdout  # other namespace
    wide = run(kubeconfig, "get", "-o", "wide")
    assert "MODEL" in wide.stdout and "nemotron-3-super-nvfp4" in wide.stdout
    everywhere = run(kubeconfig, "get", "-A")
    assert everywhere.stdout.splitlines()[0].split()[0] == "NAMESPACE"
    assert "batch" in everywhere.stdout and "nightly" in everywhere.stdout
    as_json = json.loads(run(kubeconfig, "get", "workhorse", "-o", "json").stdout)
    assert as_json["status"]["phase"] == "AwaitingApproval"
    as_yaml = yaml.safe_load(run(kubeconfig, "get", "-n", "batch", "-o", "yaml").stdout)
    assert [i["metadata"]["name"] for i in as_yaml["items"]] == ["nightly"]


def test_describe_explain_trials_history_cost(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse")
    described = run(kubeconfig, "describe", "workhorse")
    assert described.exit_code == 0, described.output
    assert "Phase:         AwaitingApproval" in described.stdout
    assert "r-20261130-0900: stock -> mtp1+async+seqs256" in described.stdout
    explained = run(kubeconfig, "explain", "workhorse")
    assert "Proposed by optimizer: 1.62x goodput on the day shape" in explained.stdout
    assert "Evidence (3 trials; best first)" in explained.stdout
    trials = run(kubeconfig, "trials", "workhorse")
    rows = [r.split() for r in trials.stdout.splitlines()[1:]]
    assert [r[1] for r in rows] == ["mtp1+async+seqs256", "stock", "kv-fp8"]  # best goodput first
    assert all(r[0].startswith("workhorse-trial-") for r in rows)  # each under its Trial CR's name
    assert rows[2][2] == "infeasible"
    history = run(kubeconfig, "history", "workhorse")
    assert "2026-11-29: stock -> seqs128 promoted" in history.stdout
    cost = run(kubeconfig, "cost", "workhorse", "--gpu-hour-price", "2.5")
    assert cost.exit_code == 0, cost.output
    day = next(r.split() for r in cost.stdout.splitlines() if r.startswith("day"))
    # 2 replicas, 1458 tok/s: 2e6 / (1458 * 3600) = 0.381 GPU-h per 1M tokens; stock 0.617; x2.5 per GPU-hour
    assert day[1:] == ["mtp1+async+seqs256", "2", "1,458", "900", "1.62x", "0.381", "0.617", "0.95", "1.54"]


def test_approve_records_the_callers_identity_with_a_guarded_patch(
    kubeconfig: Path, seed: Seeder, read: Reader, kube: KubeAPIServer
) -> None:
    seed("workhorse")
    result = run(kubeconfig, "approve", "workhorse", "-n", "prod", "-m", "ship it")
    assert result.exit_code == 0, result.output
    assert "approved by alice" in result.stdout  # from the API server's SelfSubjectReview (token t-alice)
    _, status = parse_tuned_service(read("workhorse"))
    assert status.rollout is not None
    (approval,) = status.rollout.approvals
    assert (approval.by, approval.step, approval.decision, approval.comment) == ("alice", 0, "approved", "ship it")
    patch_requests = [r for r in list(kube.api) if r.method == "PATCH" and r.subresource == "status"]
    assert patch_requests[-1].data[0]["op"] == "test"  # guarded by the resourceVersion it read
    again = run(kubeconfig, "approve", "workhorse")
    assert again.exit_code == 0
    assert "already approved by alice" in again.stdout


def test_as_flag_and_kubeconfig_user_name_the_approver(
    kube: KubeAPIServer, tmp_path: Path, seed: Seeder, read: Reader
) -> None:
    seed("workhorse")
    seed("second")
    result = run(tmp_path / "kubeconfig", "approve", "workhorse", "--as", "carol")
    assert "approved by carol" in result.stdout
    # without a SelfSubjectReview answer (unknown token), the kubeconfig context's user is the identity
    plain = kube.write_kubeconfig(tmp_path / "plain", user="dave", token="t-alice", namespace="prod")
    kube.api.tokens["t-dave"] = "dave-from-review"
    by_review = run(
        kube.write_kubeconfig(tmp_path / "d", user="dave", token="t-dave", namespace="prod"), "reject", "second"
    )
    assert "rejected by dave-from-review" in by_review.stdout
    assert plain.exists()
    _, status = parse_tuned_service(read("workhorse"))
    assert status.rollout is not None and status.rollout.approvals[0].by == "carol"


def test_pause_resume_abort_rollback(kubeconfig: Path, seed: Seeder, read: Reader) -> None:
    rolling = awaiting_status(weight=25).model_copy(update={"phase": Phase.ROLLING_OUT})
    seed("workhorse", rolling)
    assert run(kubeconfig, "pause", "workhorse").exit_code == 0
    _, status = parse_tuned_service(read("workhorse"))
    assert status.rollout is not None and status.rollout.paused
    assert "already paused" in run(kubeconfig, "pause", "workhorse").stdout
    assert run(kubeconfig, "resume", "workhorse").exit_code == 0
    result = run(kubeconfig, "rollback", "workhorse", "--reason", "p95 too high")
    assert result.exit_code == 0, result.output
    _, status = parse_tuned_service(read("workhorse"))
    assert status.rollout is not None
    assert status.rollout.abort_requested and status.rollout.abort_reason == "rollback by alice: p95 too high"
    seed("idle", awaiting_status().model_copy(update={"phase": Phase.OBSERVING, "rollout": None}))
    refused = run(kubeconfig, "abort", "idle")
    assert refused.exit_code == 1
    assert refused.stderr.strip() == "error: nothing to abort: no rollout in progress (phase Observing)"


def test_not_found_is_one_line_and_non_zero(kubeconfig: Path) -> None:
    result = run(kubeconfig, "describe", "ghost")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        'Error from server (NotFound): tunedservices.shiftlight.dev "ghost" not found'
    ]


def test_forbidden_is_one_line_and_non_zero(kube: KubeAPIServer, tmp_path: Path, seed: Seeder) -> None:
    seed("workhorse")
    bob = kube.write_kubeconfig(tmp_path / "bob", user="bob", token="t-bob", namespace="prod")
    result = run(bob, "approve", "workhorse")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error from server (Forbidden):")
    assert 'User "bob" cannot patch resource "tunedservices/status"' in line


def test_conflict_after_retries_is_one_line_and_non_zero(kubeconfig: Path, seed: Seeder, kube: KubeAPIServer) -> None:
    seed("workhorse")
    path = "/apis/shiftlight.dev/v1alpha1/namespaces/prod/tunedservices/workhorse/status"
    kube.api[f"patch {path}"] << StatusError(
        status=409,
        reason="Conflict",
        message='Operation cannot be fulfilled on tunedservices.shiftlight.dev "workhorse"',
    )
    result = run(kubeconfig, "approve", "workhorse")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error from server (Conflict):")
    guarded = [r for r in list(kube.api) if r.method == "PATCH" and isinstance(r.data, list)]
    assert len(guarded) == 3  # re-read and retried, then gave up


def test_connection_refused_is_one_line_and_non_zero(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    result = run(path, "get")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: tunedservices: cannot reach the Kubernetes API")
    assert "refused" in line.lower()


def test_describe_shows_the_events_with_their_reasons(kubeconfig: Path, seed: Seeder) -> None:
    from kubernetes import client, config

    seed("workhorse")
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    event = {
        "metadata": {"generateName": "workhorse."},
        "involvedObject": {"kind": "TunedService", "name": "workhorse", "namespace": "prod"},
        "reason": "RequestApproval",
        "message": "approval needed before shifting traffic to mtp1+async+seqs256",
        "type": "Normal",
    }
    core.create_namespaced_event("prod", client.CoreV1Event.model_validate(event))
    other = event | {"involvedObject": {"kind": "TunedService", "name": "other", "namespace": "prod"}, "reason": "X"}
    core.create_namespaced_event("prod", client.CoreV1Event.model_validate(other))
    out = run(kubeconfig, "describe", "workhorse").stdout
    assert "RequestApproval  approval needed before shifting traffic to mtp1+async+seqs256" in out
    assert " X " not in out  # only this object's events


def test_kubectl_plugin_is_the_same_app() -> None:
    from importlib.metadata import entry_points

    scripts = {
        e.name: e.value for e in entry_points(group="console_scripts") if e.name in ("kubectl-shift", "shiftctl")
    }
    entry = "controller.cli.shiftctl.commands:app"
    assert scripts == {"kubectl-shift": entry, "shiftctl": entry}


def test_cost_against_an_api_price_flags_idle_windows(kubeconfig: Path) -> None:
    from kubernetes import client, config

    from controller.crd.models import status_to_wire

    from .conftest import G, P, V, awaiting_status, tuned_service

    body = tuned_service("econ")
    body["spec"]["schedule"] = [
        {"name": "night", "start_hour": 0, "end_hour": 8},
        {"name": "day", "start_hour": 8, "end_hour": 24},
    ]
    status = awaiting_status()
    day = status.schedule[0].model_copy(update={"fleet_rate_rps": 5.0, "capacity_rps": 8.0})
    night = day.model_copy(update={"window": "night", "fleet_rate_rps": 0.01, "replicas": 1})
    status = status.model_copy(update={"schedule": (day, night)})
    co = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
    co.create_namespaced_custom_object(G, V, "prod", P, body)
    co.patch_namespaced_custom_object_status(G, V, "prod", P, "econ", {"status": status_to_wire(status)})
    cost = run(kubeconfig, "cost", "econ", "--gpu-hour-price", "4", "--api-input-price", "0.3",
               "--api-output-price", "1.2")  # fmt: skip
    assert cost.exit_code == 0, cost.output
    rows = {r.split()[0]: r for r in cost.stdout.splitlines() if r.split() and r.split()[0] in ("day", "night")}
    # day: 2 replicas x 16 h x $4 = $128; 5 req/s x 57,600 s x 512 out tokens; utilisation 5 / (8 x 2)
    assert "$128.00" in rows["day"] and "31%" in rows["day"] and "self-hosted" in rows["day"]
    assert "API (idle GPUs)" in rows["night"]
