"""The chart's RBAC is exactly what the operator's code needs, proved from the API calls it makes.

``operator-api-calls.json`` holds every call the operator made in the fake-API e2e tests (``tests/reactor``,
``tests/adapters/kube``: the operator end to end, a namespaced operator, leader election, trial Pods, the
Deployment/HTTPRoute adapters, the status write), as (verb, API group, resource[/subresource], scope); the kube
tests fail when the operator makes a call the file does not list, or when the file lists one they no longer make.
Here the chart is rendered with ``helm template`` and

(a) the Roles/ClusterRoles bound to the operator's ServiceAccount allow every recorded call, where it is made
    (the release namespace for the Lease, each watched namespace, or the cluster scope);
(b) they grant nothing else: every (group, resource, verb) of every rule is used by a recorded call in that scope,
    or is on ``UNRECORDED_GRANTS`` with its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from controller.cli.main import app, watched_namespaces

from .conftest import CHART, Helm, by_kind, one
from .test_helm_chart import validate_all

pytestmark = [pytest.mark.helm, pytest.mark.security]

CALLS_FILE = Path(__file__).resolve().parent / "operator-api-calls.json"
RELEASE_NS = "shiftlight"  # helm.template() installs into this namespace
SERVICE_ACCOUNT = "sl-shiftlight"
TEAMS = ("team-a", "team-b")
#: Resources that exist only at the cluster scope (a request for them names no namespace).
CLUSTER_SCOPED = {"customresourcedefinitions", "subjectaccessreviews", "namespaces"}
#: Cluster-scoped calls only an operator started with ``--namespace`` makes (kopf resolves the namespaces it was
#: given); an all-namespaces install need not allow them.
NAMESPACED_OPERATOR_ONLY = {("list", "", "namespaces"), ("watch", "", "namespaces")}
#: Grants no recorded call uses, each with the code path that needs it. Empty: every grant is exercised.
UNRECORDED_GRANTS: dict[tuple[str, str, str], str] = {}

Call = tuple[str, str, str, str]  # verb, group, resource, scope (cluster | release | watched)


def recorded_calls() -> set[Call]:
    entries = json.loads(CALLS_FILE.read_text())["calls"]
    return {(e["verb"], e["group"], e["resource"], e["scope"]) for e in entries}


@dataclass(frozen=True)
class Grant:
    group: str
    resource: str
    verb: str
    namespace: str | None  # None: every namespace and the cluster scope (a ClusterRoleBinding)
    role: str


def operator_grants(docs: list[dict[str, Any]]) -> list[Grant]:
    """Every (group, resource, verb) the operator's ServiceAccount holds, and where."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    grants: list[Grant] = []
    for binding in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
        subjects = binding.get("subjects") or []
        if not any(s["kind"] == "ServiceAccount" and s["name"] == SERVICE_ACCOUNT for s in subjects):
            continue
        assert all(s["namespace"] == RELEASE_NS for s in subjects if s["kind"] == "ServiceAccount")
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), f"wildcard in {ref['name']}: {rule}"
                        grants.append(Grant(group, resource, verb, where, f"{ref['kind']}/{ref['name']}"))
    return grants


def allows(grants: list[Grant], verb: str, group: str, resource: str, namespace: str | None) -> bool:
    return any(
        (g.verb, g.group, g.resource) == (verb, group, resource)
        and (g.namespace is None or (namespace is not None and g.namespace == namespace))
        for g in grants
    )


def required(calls: set[Call], watched: tuple[str, ...]) -> list[tuple[str, str, str, str | None]]:
    """The concrete requests an install must allow: ``watched`` namespaces, or () for all of them."""
    out: list[tuple[str, str, str, str | None]] = []
    for verb, group, resource, scope in sorted(calls):
        if scope == "release":
            out.append((verb, group, resource, RELEASE_NS))
        elif scope == "watched":
            out += [(verb, group, resource, ns) for ns in (watched or ("any-namespace",))]
        elif not watched and (verb, group, resource) in NAMESPACED_OPERATOR_ONLY:
            continue
        elif resource.split("/")[0] in CLUSTER_SCOPED or not watched:
            out.append((verb, group, resource, None))
        # else: a request across all namespaces, which only an --all-namespaces operator makes
    return out


def unused(grants: list[Grant], calls: set[Call], watched: tuple[str, ...]) -> list[Grant]:
    """Grants no recorded call made in their scope needs (and no entry of UNRECORDED_GRANTS explains)."""
    out = []
    for g in grants:
        if (g.group, g.resource, g.verb) in UNRECORDED_GRANTS:
            continue
        if g.namespace is None:
            scopes = {"cluster"} if watched else {"cluster", "release", "watched"}
        else:
            scopes = {"release"} if g.namespace == RELEASE_NS else {"watched"}
            if g.namespace == RELEASE_NS and RELEASE_NS in watched:
                scopes.add("watched")
        if not any((g.verb, g.group, g.resource, s) in calls for s in scopes):
            out.append(g)
    return out


def test_the_recorded_calls_are_the_operators_whole_surface() -> None:
    calls = recorded_calls()
    assert len(calls) >= 25, (
        "the recording is nearly empty: run tests/reactor and tests/adapters/kube with SHIFTLIGHT_RECORD_API_CALLS=1"
    )
    for call in [
        ("watch", "shiftlight.dev", "tunedservices", "cluster"),  # kopf, --all-namespaces
        ("watch", "shiftlight.dev", "tunedservices", "watched"),  # kopf, --namespace
        ("patch", "shiftlight.dev", "tunedservices/status", "watched"),  # the status write
        ("update", "coordination.k8s.io", "leases", "release"),  # leader election
        ("create", "", "pods", "watched"),  # trial Pods
        ("update", "apps", "deployments", "watched"),  # the candidate Deployment
        ("create", "authorization.k8s.io", "subjectaccessreviews", "cluster"),  # approvals
        ("get", "", "configmaps", "watched"),  # a ConfigMap policy
    ]:
        assert call in calls, call
    assert not any(resource == "secrets" for _, _, resource, _ in calls)


@pytest.mark.parametrize("watched", [(), TEAMS], ids=["all-namespaces", "watch-namespaces"])
def test_rbac_allows_every_recorded_call_and_nothing_else(helm: Helm, watched: tuple[str, ...]) -> None:
    args = ["--set", "watchNamespaces={" + ",".join(watched) + "}"] if watched else []
    grants = operator_grants(helm.template(*args, crds=False))
    calls = recorded_calls()
    missing = [c for c in required(calls, watched) if not allows(grants, *c)]
    assert missing == [], f"the chart's RBAC refuses calls the operator makes: {missing}"
    extra = unused(grants, calls, watched)
    assert extra == [], f"the chart's RBAC grants what no recorded call needs: {extra}"


@pytest.mark.parametrize(("group", "resource"), [("", "configmaps"), ("", "secrets")])
def test_the_operator_only_reads_and_patches_configmaps_and_reads_no_secret(
    helm: Helm, group: str, resource: str
) -> None:
    """ConfigMaps: read (a policy's configMapRef, the trial cache), create and patch (its own trial cache); never
    replaced, deleted or listed. Secrets: nothing."""
    for args in ([], ["--set", "watchNamespaces={team-a}"]):
        verbs = {g.verb for g in operator_grants(helm.template(*args, crds=False)) if g.resource == resource}
        assert verbs == ({"get", "create", "patch"} if resource == "configmaps" else set())


def test_watch_namespaces_renders_roles_in_those_namespaces_only(helm: Helm) -> None:
    docs = helm.template("--set", "watchNamespaces={team-a,team-b}")
    assert validate_all(docs)["kubernetes-validate"] == len(docs)
    roles = sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind(docs, "Role"))
    assert roles == [(RELEASE_NS, "sl-shiftlight-leader-election"), *((ns, "sl-shiftlight-operator") for ns in TEAMS)]
    bindings = sorted((d["metadata"]["namespace"], d["roleRef"]["name"]) for d in by_kind(docs, "RoleBinding"))
    assert bindings == roles
    grants = operator_grants(docs)
    cluster_wide = {(g.group, g.resource, g.verb) for g in grants if g.namespace is None}
    assert {resource for _, resource, _ in cluster_wide} <= CLUSTER_SCOPED
    assert {g.namespace for g in grants} == {None, RELEASE_NS, *TEAMS}
    assert {g.resource for g in grants if g.namespace == RELEASE_NS} == {"leases"}

    # the operator is started for exactly those namespaces (parsed by the real CLI)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert namespaces_of(container["args"]) == TEAMS
    default = one(helm.template(crds=False), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert namespaces_of(default["args"]) == ()  # all namespaces, with the ClusterRole


def namespaces_of(args: list[str]) -> tuple[str, ...]:
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup) and args[0] == "operator"
    ctx = command.commands["operator"].make_context("operator", list(args[1:]))
    return watched_namespaces(ctx.params["all_namespaces"], ctx.params["namespace"])


@pytest.mark.parametrize(
    ("all_namespaces", "namespaces", "expected"),
    [(None, [], ()), (True, [], ()), (None, ["a", "b", "a"], ("a", "b")), (False, ["a"], ("a",))],
)
def test_cli_namespace_flags(all_namespaces: bool | None, namespaces: list[str], expected: tuple[str, ...]) -> None:
    assert watched_namespaces(all_namespaces, namespaces) == expected


@pytest.mark.parametrize(("all_namespaces", "namespaces"), [(True, ["a"]), (False, [])])
def test_cli_refuses_contradicting_namespace_flags(all_namespaces: bool, namespaces: list[str]) -> None:
    with pytest.raises(typer.BadParameter):
        watched_namespaces(all_namespaces, namespaces)


@pytest.mark.parametrize("bad", ["Team_A", "", "-a"])
def test_values_schema_refuses_bad_namespace_names(helm: Helm, bad: str) -> None:
    result = helm.run("template", "sl", str(CHART), "--set", f"watchNamespaces[0]={bad}", check=False)
    assert result.returncode != 0 and "/watchNamespaces/0" in result.stderr
