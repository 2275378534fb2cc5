"""docs/install.md and docs/operator.md, followed literally on the simulator path, against the fake Kubernetes API.

The walkthrough's commands are read from the docs at run time (the convention is in ``doc_commands``): change a
marked block and this test runs the new commands. It goes from ``helm install`` with the simulator backend through
applying ``examples/tunedservice.yaml`` and ``shiftctl approve`` (the rollout then moves traffic) to ``shiftctl
rollback`` (traffic back on stable), with the operator's real entry point as its own process.

What has no fake-API form is translated by :data:`TRANSLATIONS`, each entry saying what stands in for what; a
command with no entry fails the test, so a new kind of command in the docs needs a line here.
"""

from __future__ import annotations

import base64
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from controller.domain.phases import Phase
from tests.support.kube_api import KubeAPI, KubeAPIServer, running_kube_api
from tests.walkthrough.doc_commands import DocCommand, walkthrough_commands

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "docs/install.md", REPO / "docs/operator.md"]
HELM = Path(os.environ.get("SHIFTLIGHT_HELM", REPO / ".tools" / "bin" / "helm"))
BIN = Path(sys.executable).parent

USER, OPERATOR = "alice", "system:serviceaccount:shiftlight:shiftlight"
APPROVER_RULES = {(USER, "approve", "configrollouts"), (USER, "patch", "tunedservices/status")}
"""What the fake API denies the walkthrough's user until ``kubectl create rolebinding ... shiftlight-approver``."""

TIME_SCALE = "600"
"""Simulated seconds per real second in this test (the docs' ``simulator.timeScale`` is for a person watching)."""

WAIT_S = 600.0
"""The most a ``-w`` waits for its phase: a bound against a hang, not a speed assertion."""

pytestmark = [pytest.mark.kube, pytest.mark.helm, pytest.mark.slow]

CRDS = {
    name: (crd["spec"]["group"], crd["spec"]["versions"][0]["name"], crd["spec"]["names"]["plural"], crd)
    for crd in (yaml.safe_load(p.read_text()) for p in sorted((REPO / "charts/shiftlight/crds").glob("*.yaml")))
    for name in [
        crd["spec"]["names"]["plural"],
        crd["spec"]["names"]["singular"],
        *crd["spec"]["names"].get("shortNames", []),
    ]
}
OTHER_KINDS = {"httproute": ("gateway.networking.k8s.io", "v1", "httproutes")}


@dataclass
class Walkthrough:
    server: KubeAPIServer
    tmp: Path
    user_kubeconfig: Path
    operator_kubeconfig: Path
    seen: list[dict[str, Any]] = field(default_factory=list)
    """Every TunedService body a ``-w`` saw, in order."""
    operator: subprocess.Popen[bytes] | None = None
    operator_log: Path | None = None

    @property
    def api(self) -> client.ApiClient:
        return config.new_client_from_config(str(self.user_kubeconfig))

    def run(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, "KUBECONFIG": str(self.user_kubeconfig), "COLUMNS": "200", **(env or {})}
        result = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=120, check=False)
        print(f"$ {shlex.join(argv)}  (exit {result.returncode})\n{result.stdout}{result.stderr}")
        return result


# ----- the translations: what stands in for what ---------------------------------------------------------------


def no_cluster_needed(w: Walkthrough, cmd: DocCommand) -> None:
    """The fake API is the cluster, and the operator runs from this checkout: no cluster or image to make."""


def helm_install(w: Walkthrough, cmd: DocCommand) -> None:
    """``helm template`` with the same flags; the operator Deployment's container runs as a local process: its
    command, its env (fieldRefs filled in), its mounted ConfigMaps and Secrets written to files at the mount paths'
    stand-ins. Changed for the fake API: KUBECONFIG (the operator's user), the health and metrics ports (free
    ones) and SHIFTLIGHT_TIME_SCALE (:data:`TIME_SCALE`)."""
    release, chart, *flags = cmd.argv[2:]
    home = w.tmp / "helm-home"
    helm_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CACHE_HOME": str(home)}
    rendered = subprocess.run(
        [str(HELM), "template", release, str(REPO / chart), *flags],
        cwd=REPO, env=helm_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, f"{cmd.where}\n{rendered.stderr}"
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    namespace = flags[flags.index("-n") + 1] if "-n" in flags else "default"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    root = w.tmp / "pod"
    mounts: dict[str, Path] = {}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        target = mounts[mount["mountPath"]] = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        volume = volumes[mount["name"]]
        source = volume.get("configMap") or volume.get("secret")
        if source is None:
            continue  # an emptyDir
        name = source.get("name") or source.get("secretName")
        obj = next(d for d in docs if d["kind"] in ("ConfigMap", "Secret") and d["metadata"]["name"] == name)
        data: dict[str, str] = obj.get("data") or {}
        if obj["kind"] == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in data.items()} | (obj.get("stringData") or {})
        for item in source.get("items") or [{"key": k, "path": k} for k in data]:
            (target / item["path"]).parent.mkdir(parents=True, exist_ok=True)
            (target / item["path"]).write_text(data[item["key"]])
    fields = {"metadata.name": f"{release}-walkthrough", "metadata.namespace": namespace}
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ}  # the interpreter's own paths
    for var in container.get("env", []):
        value = fields[var["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in var else str(var["value"])
        for path, stand_in in mounts.items():
            if value == path or value.startswith(path + "/"):
                value = str(stand_in) + value[len(path) :]
        env[var["name"]] = value
    env.update(
        KUBECONFIG=str(w.operator_kubeconfig),
        SHIFTLIGHT_HEALTH_PORT=str(free_port()),
        SHIFTLIGHT_METRICS_PORT=str(free_port()),
        SHIFTLIGHT_TIME_SCALE=TIME_SCALE,
    )
    argv = [str(BIN / container["command"][0]), *container.get("command", [])[1:], *container.get("args", [])]
    w.operator_log = w.tmp / "operator.log"
    w.operator = subprocess.Popen(argv, cwd=w.tmp, env=env, stdout=w.operator_log.open("w"), stderr=subprocess.STDOUT)


def resource(name: str) -> tuple[str, str, str]:
    name = name.lower()
    if name in CRDS:
        return CRDS[name][:3]
    return OTHER_KINDS[name.removesuffix("s")]


def kubectl_apply(w: Walkthrough, cmd: DocCommand) -> None:
    """Each object of the file created through the API, or replaced where it exists (as ``apply`` leaves it)."""
    co = client.CustomObjectsApi(w.api)
    for body in yaml.safe_load_all((REPO / cmd.argv[cmd.argv.index("-f") + 1]).read_text()):
        group, version = body["apiVersion"].split("/")
        plural = resource(body["kind"])[2]
        namespace = body["metadata"].get("namespace") or option(cmd, "-n") or "default"
        try:
            co.create_namespaced_custom_object(group, version, namespace, plural, body)
        except client.ApiException as exc:
            assert exc.status == 409, f"{cmd.where}: {exc}"
            live = co.get_namespaced_custom_object(group, version, namespace, plural, body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            co.replace_namespaced_custom_object(group, version, namespace, plural, body["metadata"]["name"], body)


def option(cmd: DocCommand, *names: str) -> str | None:
    for i, arg in enumerate(cmd.argv):
        if arg in names and i + 1 < len(cmd.argv):
            return cmd.argv[i + 1]
        if arg.partition("=")[0] in names and "=" in arg:
            return arg.partition("=")[2]
    return None


def jsonpath(obj: Any, path: str) -> Any:
    for part in path.strip(".").split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def printer_row(body: dict[str, Any], wide: bool) -> list[str]:
    """A TunedService as ``kubectl get`` prints it: NAME and the CRD's printer columns."""
    row = [body["metadata"]["name"]]
    for column in CRDS["tunedservices"][3]["spec"]["versions"][0]["additionalPrinterColumns"]:
        if column.get("priority", 0) == 0 or wide:
            value = jsonpath(body, column["jsonPath"])
            row.append("" if value is None else str(value))
    return row


def kubectl_get(w: Walkthrough, cmd: DocCommand) -> None:
    """A read through the API (TunedServices in the CRD's printer columns). ``-w`` on TunedServices: a watch until
    the named TunedService's PHASE is the one in the last row of the command's sample output."""
    group, version, plural = resource(cmd.argv[2])
    namespace = option(cmd, "-n", "--namespace") or "default"
    co = client.CustomObjectsApi(w.api)
    listed = co.list_namespaced_custom_object(group, version, namespace, plural)
    for item in listed["items"]:
        print(
            " ".join(printer_row(item, "wide" in cmd.argv) if plural == "tunedservices" else [item["metadata"]["name"]])
        )
    if "-w" not in cmd.argv:
        return
    assert plural == "tunedservices" and cmd.sample, f"{cmd.where}: a watch needs a TunedService and a sample row"
    name, phase = cmd.sample[-1].split()[:2]
    assert phase in {p.value for p in Phase}, f"{cmd.where}: {phase!r} in the sample is no phase"
    if any(i["metadata"]["name"] == name and jsonpath(i, ".status.phase") == phase for i in listed["items"]):
        w.seen.append(next(i for i in listed["items"] if i["metadata"]["name"] == name))
        return
    deadline = time.monotonic() + WAIT_S
    version_seen = listed["metadata"]["resourceVersion"]
    while time.monotonic() < deadline:
        stream = watch.Watch().stream(
            co.list_namespaced_custom_object, group, version, namespace, plural,
            resource_version=version_seen, timeout_seconds=30,
        )  # fmt: skip
        for event in stream:
            body = event["object"]
            version_seen = body["metadata"]["resourceVersion"]
            if body["metadata"]["name"] != name:
                continue
            w.seen.append(body)
            print(" ".join(printer_row(body, False)))
            if jsonpath(body, ".status.phase") == phase:
                return
        assert w.operator is not None and w.operator.poll() is None, f"{cmd.where}: the operator exited"
    raise AssertionError(f"{cmd.where}: {name} never reached {phase}\n{operator_tail(w)}")


def kubectl_create_rolebinding(w: Walkthrough, cmd: DocCommand) -> None:
    """The fake API has no RBAC engine: binding ``shiftlight-approver`` lifts the user's denials of its rules."""
    assert option(cmd, "--clusterrole") == "shiftlight-approver", cmd.where
    w.server.api.denials -= APPROVER_RULES


def kubectl_auth_can_i(w: Walkthrough, cmd: DocCommand) -> None:
    """A SubjectAccessReview for the user; the answer must be the one the line's note shows."""
    verb, what = cmd.argv[3], cmd.argv[4]
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=USER,
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=what.split(".")[0], group=what.partition(".")[2], namespace=option(cmd, "-n")
            ),
        )
    )
    allowed = client.AuthorizationV1Api(w.api).create_subject_access_review(review).status.allowed
    assert ("yes" if allowed else "no") == cmd.note.split()[0], cmd.where


def shiftctl(w: Walkthrough, cmd: DocCommand) -> None:
    """The installed ``shiftctl`` (``kubectl shift`` is the same entry point, ``kubectl-shift``) as the user. It
    must succeed, unless its sample output is an ``error:`` line: then it must exit 1."""
    args = cmd.argv[2:] if cmd.argv[0] == "kubectl" else cmd.argv[1:]
    result = w.run([str(BIN / "shiftctl"), *args])
    expected = 1 if cmd.sample and cmd.sample[0].startswith("error:") else 0
    assert result.returncode == expected, f"{cmd.where}\n{result.stdout}{result.stderr}\n{operator_tail(w)}"


Translation = Callable[[Walkthrough, DocCommand], None]

TRANSLATIONS: list[tuple[tuple[str, ...], Translation]] = [
    (("kind", "create", "cluster"), no_cluster_needed),
    (("make", "image"), no_cluster_needed),
    (("kind", "load"), no_cluster_needed),
    (("helm", "install"), helm_install),
    (("kubectl", "apply"), kubectl_apply),
    (("kubectl", "get"), kubectl_get),
    (("kubectl", "create", "rolebinding"), kubectl_create_rolebinding),
    (("kubectl", "auth", "can-i"), kubectl_auth_can_i),
    (("kubectl", "shift"), shiftctl),
    (("shiftctl",), shiftctl),
]


def translation(cmd: DocCommand) -> Translation:
    for prefix, run in TRANSLATIONS:
        if cmd.argv[: len(prefix)] == prefix:
            return run
    raise AssertionError(f"{cmd.where}: no translation for this command (add one to TRANSLATIONS)")


# ----- the test -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def operator_tail(w: Walkthrough) -> str:
    return w.operator_log.read_text()[-4000:] if w.operator_log is not None and w.operator_log.exists() else ""


def verbs(commands: list[DocCommand]) -> list[str]:
    """The shiftctl verbs of the walkthrough, in order."""
    out = []
    for cmd in commands:
        args = (
            cmd.argv[2:] if cmd.argv[:2] == ("kubectl", "shift") else cmd.argv[1:] if cmd.argv[0] == "shiftctl" else ()
        )
        out.extend(args[:1])
    return out


def test_every_walkthrough_command_has_a_translation_and_the_walk_approves_then_rolls_back() -> None:
    commands = walkthrough_commands(DOCS, REPO)
    for cmd in commands:
        translation(cmd)
    shown = verbs(commands)
    assert "approve" in shown and ("rollback" in shown or "abort" in shown), shown
    assert shown.index("approve") < max(i for i, v in enumerate(shown) if v in ("rollback", "abort"))
    assert any(c.argv[:2] == ("helm", "install") and "operator.backend=simulator" in c.argv for c in commands)


@pytest.fixture
def walkthrough(tmp_path: Path) -> Iterator[Walkthrough]:
    api = KubeAPI(tokens={"t-alice": USER, "t-operator": OPERATOR}, denials=set(APPROVER_RULES))
    with running_kube_api(api) as server:
        w = Walkthrough(
            server=server,
            tmp=tmp_path,
            user_kubeconfig=server.write_kubeconfig(tmp_path / "alice", user=USER, token="t-alice", namespace="ml"),
            operator_kubeconfig=server.write_kubeconfig(tmp_path / "operator", user="operator", token="t-operator"),
        )
        try:
            yield w
        finally:
            if w.operator is not None:
                w.operator.send_signal(signal.SIGTERM)
                try:
                    w.operator.wait(timeout=60)
                finally:
                    if w.operator.poll() is None:
                        w.operator.kill()
                        w.operator.wait()


def test_the_docs_walkthrough_reaches_an_approved_rollout_and_rolls_it_back(walkthrough: Walkthrough) -> None:
    w = walkthrough
    for cmd in walkthrough_commands(DOCS, REPO):
        print(f"--- {cmd.where}")
        translation(cmd)(w, cmd)
    # the approval let the rollout move traffic: some watched status had it rolling out, approved by the user
    moving = [b for b in w.seen if jsonpath(b, ".status.phase") == Phase.ROLLING_OUT.value]
    assert moving, [jsonpath(b, ".status.phase") for b in w.seen]
    approvals = jsonpath(moving[-1], ".status.rollout.approvals") or []
    assert [a["by"] for a in approvals] == [USER]
    # and the rollback put every request back on stable, on the HTTPRoute the example names
    co = client.CustomObjectsApi(w.api)
    ts = co.get_namespaced_custom_object("shiftlight.dev", "v1alpha1", "ml", "tunedservices", "llama-8b")
    assert jsonpath(ts, ".status.summary.canaryWeight") == 0
    assert jsonpath(ts, ".status.summary.activeConfig") == "stock"
    route = co.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", "ml", "httproutes", "llama-8b")
    weights = {ref["name"]: ref.get("weight", 1) for ref in route["spec"]["rules"][0]["backendRefs"]}
    assert weights == {"llama-8b": 100, "llama-8b-candidate": 0}
