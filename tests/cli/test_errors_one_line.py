"""Every command's error is one line on stderr naming the cause and the setting: exit 1, or 2 for a usage error.

The commands run as a user runs them (a child process, from a folder outside the repository); an unexpected error
is one line too, and ``--debug`` gives its traceback.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from controller.cli.app import App, take_debug_flag

pytestmark = pytest.mark.slow  # each test runs the CLI in a fresh interpreter

SHIFTLIGHT = [sys.executable, "-m", "controller.cli.main"]
SHIFTCTL = [sys.executable, "-m", "controller.cli.shiftctl.commands"]


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SHIFTLIGHT_", "KUBE"))}
    base["HOME"] = str(cwd)  # no ~/.kube/config of the machine's
    return subprocess.run(
        args,
        cwd=cwd,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


MALFORMED_KUBECONFIGS = {
    "not-yaml.yaml": "apiVersion: v1\nkind: Config\nclusters: [\n  - name: x\n   bad: ::\n",
    "misshapen.yaml": "apiVersion: v1\nkind: Config\nclusters: 5\ncontexts: 7\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED_KUBECONFIGS))
def test_shiftctl_with_a_malformed_kubeconfig(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(MALFORMED_KUBECONFIGS[name])
    done = run([*SHIFTCTL, "get", "--kubeconfig", name], tmp_path)
    assert done.returncode == 1
    assert f"kubeconfig {name}:" in one_error_line(done)


def test_shiftctl_with_a_malformed_kubeconfig_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(MALFORMED_KUBECONFIGS["not-yaml.yaml"])
    done = run([*SHIFTCTL, "get", "-A"], tmp_path, KUBECONFIG=str(path))
    assert done.returncode == 1
    assert f"kubeconfig {path}: not valid YAML" in one_error_line(done)


def test_the_demo_outside_the_repository_names_the_policy_setting(tmp_path: Path) -> None:
    done = run([*SHIFTLIGHT, "demo", "--out", "out"], tmp_path)
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith("error: --policy: ")
    assert "policies/v1/hybrid-mtp-workstation.yaml" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SHIFTLIGHT_BACKEND", "kubernets"),
        ("SHIFTLIGHT_LOG_FORMAT", "xml"),
        ("SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS", "ten"),
        ("SHIFTLIGHT_CANARY_TOLERATIONS", "[{"),
    ],
)
def test_a_bad_operator_setting_stops_the_operator_naming_it(tmp_path: Path, name: str, value: str) -> None:
    done = run([*SHIFTLIGHT, "operator"], tmp_path, **{name: value})
    assert done.returncode == 1
    assert f"environment:{name}: " in one_error_line(done)


def test_the_operator_with_a_malformed_kubeconfig_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(MALFORMED_KUBECONFIGS["misshapen.yaml"])
    done = run([*SHIFTLIGHT, "operator"], tmp_path, KUBECONFIG=str(path), SHIFTLIGHT_HEALTH_PORT="0")
    assert done.returncode == 1
    assert f"kubeconfig {path}: not a valid kubeconfig" in one_error_line(done)


KUBECONFIG_NOWHERE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("taken", [True, False])
def test_a_health_port_the_operator_cannot_listen_on_is_named(tmp_path: Path, taken: bool) -> None:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG_NOWHERE)
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1] if taken else 70000
        done = run(
            [*SHIFTLIGHT, "operator"],
            tmp_path,
            KUBECONFIG=str(tmp_path / "kubeconfig"),
            SHIFTLIGHT_LEADER_ELECTION="false",
            SHIFTLIGHT_HEALTH_PORT=str(port),
            SHIFTLIGHT_METRICS_PORT="0",
        )
    assert done.returncode == 1
    assert one_error_line(done).startswith(f"error: SHIFTLIGHT_HEALTH_PORT: cannot listen on 0.0.0.0:{port}: ")


def test_calibrate_without_pytorch_says_so_in_one_line(tmp_path: Path) -> None:
    assert importlib.util.find_spec("torch") is None, "the operator's environment carries no PyTorch"
    done = run([*SHIFTLIGHT, "calibrate", "--gpu", "h200", "--out", "cal", "--quick"], tmp_path)
    assert done.returncode == 1
    line = one_error_line(done)
    assert "needs PyTorch" in line and sys.executable in line
    assert "--prepare" in line and "--raw" in line


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["demo", "--hours", "0"], "'--hours'"),
        (["demo", "--no-such-flag"], "--no-such-flag"),
        (["operator", "--all-namespaces", "--namespace", "a"], "--namespace"),
    ],
)
def test_usage_errors_exit_2_in_one_line_naming_the_option(tmp_path: Path, args: list[str], hint: str) -> None:
    done = run([*SHIFTLIGHT, *args], tmp_path)
    assert done.returncode == 2
    line = one_error_line(done)
    assert hint in line
    assert line.endswith(f"see 'python -m controller.cli.main {args[0]} --help'")


def test_shiftctl_usage_error_exits_2_in_one_line(tmp_path: Path) -> None:
    done = run([*SHIFTCTL, "get", "--no-such-flag"], tmp_path)
    assert done.returncode == 2
    assert "--no-such-flag" in one_error_line(done)


# ----- the boundary itself ------------------------------------------------------------------------------------


def broken_app() -> App:
    app = App(add_completion=False)

    @app.command()
    def crash(n: int = 1) -> None:
        raise ZeroDivisionError(f"division by zero in step {n}")

    @app.command()
    def done(code: int = 0) -> None:
        raise typer.Exit(code)

    return app


def test_an_unexpected_error_is_one_line_pointing_at_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHIFTLIGHT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        broken_app()(["crash", "--n", "3"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err == (
        "error: unexpected ZeroDivisionError: division by zero in step 3 (run again with --debug for the traceback)\n"
    )


def test_debug_lets_the_traceback_through(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ZeroDivisionError, match="step 3"):
        broken_app()(["crash", "--debug", "--n", "3"])
    monkeypatch.setenv("SHIFTLIGHT_DEBUG", "1")
    with pytest.raises(ZeroDivisionError, match="step 4"):
        broken_app()(["crash", "--n", "4"])


def test_exit_codes_of_the_commands_pass_through() -> None:
    for code in (0, 3):
        with pytest.raises(SystemExit) as exit_:
            broken_app()(["done", "--code", str(code)])
        assert exit_.value.code == code


@pytest.mark.parametrize(
    ("argv", "debug", "rest"),
    [
        (["get", "--debug", "x"], True, ["get", "x"]),
        (["get", "x"], False, ["get", "x"]),
        (["trial", "--", "--debug"], False, ["trial", "--", "--debug"]),
    ],
)
def test_take_debug_flag(argv: list[str], debug: bool, rest: list[str]) -> None:
    assert take_debug_flag(argv) == (debug, rest)


def test_a_bad_trial_config_is_one_line_naming_each_field(tmp_path: Path) -> None:
    config = '{"bogus": 1, "max_num_seqs": "many"}'
    done = run([*SHIFTLIGHT, "trial", "--simulate-model", "x", "--config", config], tmp_path)
    assert done.returncode == 2
    line = one_error_line(done)
    assert line.startswith("error: --config: invalid EngineConfig: ")
    assert "max_num_seqs: " in line and "bogus: " in line


def test_a_simulated_replica_of_an_unknown_model_fails_in_one_line(tmp_path: Path) -> None:
    done = run([*SHIFTLIGHT, "simulate", "--model", "no-such-model", "--gpu", "h200", "--port", "0"], tmp_path)
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith("error: engine failed to start: ") and "'no-such-model'" in line
