"""Fixtures for operator tests: the fake API, a kubeconfig, a short policy, operator replicas under KopfRunner.

The operator's code talks to the fake API as its own user (``operator_api``, ``operator_kubeconfig``); the tests
set things up and look at them as an admin (``api``). Every call the operator's user makes is recorded and must
be listed in ``tests/helm/operator-api-calls.json``, which the chart's least-privilege test checks the rendered
RBAC against. ``SHIFTLIGHT_RECORD_API_CALLS=1`` rewrites that file from the calls of the tests that ran (run all of
``tests/reactor`` and ``tests/adapters/kube`` then). Under pytest-xdist each worker writes its calls to a folder
the controller names, and the controller checks (or writes) them all together once the workers are done.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client, config

from controller.adapters.kube.lease import LeaderSettings
from controller.reactor.backends import make_backend
from controller.reactor.loop import ControlLoop
from controller.reactor.metrics import OperatorMetrics
from controller.reactor.run import OperatorRuntime
from controller.reactor.runtime import Backend
from controller.reactor.settings import ConnectionSettings, LoopSettings, OperatorSettings
from tests.support.kube_api import APICall, KubeAPI, KubeAPIServer, running_kube_api
from tests.support.paths import MANIFESTS

G, V = "shiftlight.dev", "v1alpha1"
REPO = Path(__file__).resolve().parents[2]

OPERATOR_USER = "system:serviceaccount:shiftlight:op"
CALLS_FILE = REPO / "tests/helm/operator-api-calls.json"
RELEASE_NAMESPACES = frozenset({"shiftlight", "ops"})
"""Namespaces the tests use as the operator's own (the Lease's); every other namespace is a watched one."""

Call = tuple[str, str, str, str]
"""(verb, API group, resource[/subresource], scope): scope is ``cluster``, ``release`` or ``watched``."""


def rbac_call(call: APICall) -> Call:
    """A recorded request in the terms RBAC grants it: namespaces reduced to the role they play."""
    if call.namespace is None:
        return (call.verb, call.group, call.resource, "cluster")
    scope = "release" if call.namespace in RELEASE_NAMESPACES else "watched"
    return (call.verb, call.group, call.resource, scope)


def load_calls(path: Path = CALLS_FILE) -> dict[Call, list[str]]:
    """The committed calls, each with the tests that make it."""
    entries = json.loads(path.read_text())["calls"] if path.exists() else []
    return {(e["verb"], e["group"], e["resource"], e["scope"]): list(e["tests"]) for e in entries}


class CallLog:
    """The operator's calls of this session, per test; checked against (or written to) ``CALLS_FILE``."""

    def __init__(self) -> None:
        self.committed = load_calls()
        self.by_test: dict[str, set[Call]] = {}

    def add(self, test: str, calls: list[APICall]) -> set[Call]:
        made = {rbac_call(c) for c in calls if c.user == OPERATOR_USER}
        self.by_test.setdefault(test, set()).update(made)
        return made

    def unlisted(self, made: set[Call]) -> list[Call]:
        return sorted(made - set(self.committed))

    def stale(self) -> list[Call]:
        """Committed calls that none of their tests made, though all of those tests ran."""
        made = set().union(*self.by_test.values()) if self.by_test else set()
        return sorted(
            call
            for call, tests in self.committed.items()
            if call not in made and tests and all(t in self.by_test for t in tests)
        )

    def write(self, path: Path = CALLS_FILE) -> None:
        tests: dict[Call, set[str]] = {}
        for test, calls in self.by_test.items():
            for call in calls:
                tests.setdefault(call, set()).add(test)
        entries = [
            {"verb": v, "group": g, "resource": r, "scope": s, "tests": sorted(tests[(v, g, r, s)])}
            for v, g, r, s in sorted(tests)
        ]
        path.write_text(json.dumps({"calls": entries}, indent=1) + "\n")

    def dump(self, path: Path) -> None:
        """This process's calls per test, for the process that checks them all (pytest-xdist's controller)."""
        path.write_text(json.dumps({test: sorted(calls) for test, calls in self.by_test.items()}))

    def merge(self, path: Path) -> None:
        for test, calls in json.loads(path.read_text()).items():
            self.by_test.setdefault(test, set()).update((v, g, r, s) for v, g, r, s in calls)


def check_or_record(log: CallLog) -> str | None:
    """At the end of a session: rewrite ``CALLS_FILE`` when recording, else what is wrong with it (or None)."""
    if os.environ.get("SHIFTLIGHT_RECORD_API_CALLS") == "1":
        log.write()
        return None
    stale = log.stale()
    if stale:
        return f"{CALLS_FILE.name} lists API calls the operator no longer makes (drop them, and their RBAC): {stale}"
    return None


CALLS_DIR = pytest.StashKey[Path]()
CALLS_DIR_INPUT = "shiftlight_api_calls_dir"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller, as it starts a worker: the folder the worker leaves its operator calls in."""
    config = node.config
    if CALLS_DIR not in config.stash:
        config.stash[CALLS_DIR] = Path(tempfile.mkdtemp(prefix="shiftlight-api-calls-"))
    node.workerinput[CALLS_DIR_INPUT] = str(config.stash[CALLS_DIR])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """pytest-xdist's controller: the calls of all workers together against ``CALLS_FILE``, once."""
    directory = session.config.stash.get(CALLS_DIR, None)
    if directory is None:
        return
    try:
        dumps = sorted(directory.glob("*.json"))
        if not dumps:
            return
        log = CallLog()
        for dump in dumps:
            log.merge(dump)
        problem = check_or_record(log)
        if problem:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"ERROR: {problem}", red=True, bold=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def api_calls(request: pytest.FixtureRequest) -> Iterator[CallLog]:
    log = CallLog()
    yield log
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is not None and CALLS_DIR_INPUT in workerinput:
        # a pytest-xdist worker saw only its share of the tests: the controller checks all of them together
        log.dump(Path(workerinput[CALLS_DIR_INPUT]) / f"{workerinput['workerid']}.json")
        return
    problem = check_or_record(log)
    assert problem is None, problem


@pytest.fixture
def kube(request: pytest.FixtureRequest, api_calls: CallLog) -> Iterator[KubeAPIServer]:
    with running_kube_api(KubeAPI(tokens={"t-alice": "alice", "t-operator": OPERATOR_USER, "t-admin": "admin"})) as srv:
        yield srv
    made = api_calls.add(request.node.nodeid, srv.api.calls)
    if os.environ.get("SHIFTLIGHT_RECORD_API_CALLS") != "1":
        unlisted = api_calls.unlisted(made)
        assert not unlisted, (
            f"the operator made API calls that {CALLS_FILE.name} does not list, so the chart's RBAC is not proven "
            f"for them (re-record with SHIFTLIGHT_RECORD_API_CALLS=1 and grant them in rbac.yaml): {unlisted}"
        )


@pytest.fixture
def operator_kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "operator.kubeconfig", user="operator", token="t-operator")


@pytest.fixture
def alice_kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "alice.kubeconfig", user="alice", token="t-alice", namespace="prod")


@pytest.fixture
def admin_kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "admin.kubeconfig", user="admin", token="t-admin")


@pytest.fixture
def api(admin_kubeconfig: Path) -> client.ApiClient:
    """The tests' own client (an admin): setting things up and looking at them, not the operator's calls."""
    return config.new_client_from_config(str(admin_kubeconfig))


@pytest.fixture
def operator_api(operator_kubeconfig: Path) -> client.ApiClient:
    """The operator's client: every call it makes is recorded and must be allowed by the chart's RBAC."""
    return config.new_client_from_config(str(operator_kubeconfig))


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """The hybrid-MTP preset, short: three steps, one-minute bake, five requests per variant, manual approval."""
    policy = yaml.safe_load((REPO / "policies/v1/hybrid-mtp-workstation.yaml").read_text())
    policy["rollout"] = {"steps": [25, 50, 100], "bake_seconds": 60, "min_samples": 5}
    policy["trial_budget"] = {"max_trials": 3, "canary_gpu_minutes": 90, "trial_duration_s": 20, "warmup_s": 2}
    policy["llm"] = {"enabled": False}
    policy["approval"] = "manual"
    out = tmp_path / "policies"
    out.mkdir()
    (out / "e2e.yaml").write_text(yaml.safe_dump(policy))
    return out


def tuned_service(name: str = "workhorse", *, route: str | None = "workhorse") -> dict[str, Any]:
    workload: dict[str, Any] = {"deployments": [name], "service": name}
    if route:
        workload["httpRoute"] = route
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TunedService",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {
            "workload": workload,
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": "gb300-dgx-station",
            "policy": {"preset": "e2e"},
            "approvalMode": "manual",
        },
    }


def http_route(name: str = "workhorse") -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {
            "parentRefs": [{"name": "inference-gateway"}],
            "rules": [{"backendRefs": [{"name": name, "port": 8000, "weight": 100}]}],
        },
    }


@dataclass
class Replica:
    runtime: OperatorRuntime
    runner: KopfRunner


OperatorFactory = Callable[..., Any]


@pytest.fixture
def settings_for(operator_kubeconfig: Path, policy_dir: Path) -> Callable[[str], OperatorSettings]:
    def make(identity: str) -> OperatorSettings:
        return OperatorSettings(
            connection=ConnectionSettings(kubeconfig=str(operator_kubeconfig)),
            policy_dir=policy_dir,
            leader=LeaderSettings(
                identity=identity,
                lease_namespace="shiftlight",
                lease_duration_s=4.0,
                renew_deadline_s=3.0,
                retry_period_s=0.2,
            ),
            loop=LoopSettings(time_scale=300.0, idle_s=0.1, min_sleep_s=0.02),
            health_port=0,
            metrics_port=None,
            metrics_host="127.0.0.1",
        )

    return make


@contextmanager
def operator(
    settings: OperatorSettings, api: client.ApiClient, *, backend: Backend | None = None, release: bool = True
) -> Iterator[OperatorRuntime]:
    """One operator replica: leader election + endpoints + kopf under KopfRunner, stopped by leaving the block."""
    runtime = OperatorRuntime(settings, api=api, backend=backend).start()
    try:
        with KopfRunner(runtime.kopf_args(), registry=runtime.registry) as runner:
            yield runtime
        if runner.exception is not None:
            raise runner.exception
    finally:
        runtime.stop(release=release)


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate`` returns something truthy (returned); fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


class AlwaysLeader:
    """Leadership for a control loop driven cycle by cycle in a test."""

    def is_leader(self) -> bool:
        return True


def kubernetes_loop(operator_kubeconfig: Path, policy_dir: Path, **settings: Any) -> ControlLoop:
    """A control loop on the ``kubernetes`` backend, as the operator's own user, driven by ``loop.cycle``."""
    operator_settings = OperatorSettings(
        backend="kubernetes",
        connection=ConnectionSettings(kubeconfig=str(operator_kubeconfig)),
        policy_dir=policy_dir,
        health_port=None,
        metrics_port=None,
        **settings,
    )
    api = config.new_client_from_config(str(operator_kubeconfig))
    return ControlLoop(operator_settings, api, make_backend(operator_settings, api), AlwaysLeader(), OperatorMetrics())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def production_deployment(tensor_parallel: int) -> dict[str, Any]:
    deployment = next(
        d
        for d in yaml.safe_load_all((MANIFESTS / "production-stack.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    deployment["metadata"] = {"name": "workhorse", "namespace": "prod"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    command[command.index("--tensor-parallel-size") + 1] = str(tensor_parallel)
    return deployment
