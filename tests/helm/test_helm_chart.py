"""The Helm chart rendered by the real helm binary, every object validated offline.

* ``helm lint --strict``; ``helm template`` with default and non-default values;
* every rendered object passes ``kubernetes-validate --strict`` (Kubernetes 1.37 schemas), except the optional
  Prometheus Operator ServiceMonitor, which has no schema there and is validated against its own (vendored);
* ``values.schema.json`` rejects bad values; RBAC has no wildcards and exactly the intended rules;
* a sample TunedService is validated against the rendered CRD's openAPIV3Schema, and the sample HTTPRoute against the
  Gateway API v1 HTTPRoute schema (vendored in ``schemas/``).
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import referencing
import referencing.jsonschema
import yaml

from controller.crd import schema
from controller.reactor.settings import OperatorSettings

from .conftest import CHART, REPO, Helm, by_kind, one

pytestmark = pytest.mark.helm

HERE = Path(__file__).resolve().parent
NONDEFAULT = HERE / "values-nondefault.yaml"
K8S_VERSION = "1.37.0"
#: Kinds kubernetes-validate has no schema for, and the vendored schema file (``schemas/``) each is checked with.
VENDORED = {"ServiceMonitor": "servicemonitor-v1.json", "HTTPRoute": "httproute-v1.json"}


def vendored_validator(kind: str) -> jsonschema.Draft4Validator:
    """A vendored OpenAPI schema (unknown fields refused); its ObjectMeta $ref resolves to Kubernetes' own schema."""
    source = json.loads((HERE / "schemas" / VENDORED[kind]).read_text())
    meta_uri = "/api/_definitions.json"
    definitions_file = (
        Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}-local-strict"
    ) / "_definitions.json"
    converted = schema.to_json_schema(source, forbid_unknown=True)
    converted["properties"]["metadata"] = {"$ref": f"{meta_uri}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    definitions = json.loads(definitions_file.read_text())
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        meta_uri,
        referencing.Resource.from_contents(definitions, default_specification=referencing.jsonschema.DRAFT202012),
    )
    return jsonschema.Draft4Validator(converted, registry=registry)


def validate_all(docs: list[dict[str, Any]]) -> dict[str, int]:
    """kubernetes-validate --strict on every object (vendored schemas for the kinds it lacks); returns counts."""
    counts = {"kubernetes-validate": 0, "vendored": 0}
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            counts["kubernetes-validate"] += 1
        except kubernetes_validate.SchemaNotFoundError:
            assert doc["kind"] in VENDORED, f"no schema for {doc['kind']}"
            vendored_validator(doc["kind"]).validate(doc)
            counts["vendored"] += 1
    return counts


def test_lint_strict(helm: Helm) -> None:
    result = helm.run("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    result = helm.run("lint", "--strict", str(CHART), "-f", str(NONDEFAULT))
    assert "0 chart(s) failed" in result.stdout


def test_default_render_is_valid(helm: Helm) -> None:
    docs = helm.template()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["CustomResourceDefinition"] * 3
        + ["ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
        + ["Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "ConfigMap", "Secret"]
        + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )
    assert validate_all(docs) == {"kubernetes-validate": 18, "vendored": 0}
    for doc in docs:
        cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
        if doc["kind"] not in cluster_scoped | {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}:
            assert doc["metadata"]["namespace"] == "shiftlight", doc["metadata"]["name"]


def test_nondefault_render_is_valid(helm: Helm) -> None:
    docs = helm.template("-f", str(NONDEFAULT))
    assert validate_all(docs) == {"kubernetes-validate": 18, "vendored": 1}
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    service = one(docs, "Service", "shiftlight-metrics")
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_operator_deployment_defaults(helm: Helm) -> None:
    docs = helm.template()
    deployment = one(docs, "Deployment", "sl-shiftlight")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 2
    assert container["image"] == "ghcr.io/shiftlight/shiftlight:0.1.0"
    assert pod["serviceAccountName"] == "sl-shiftlight"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"health": 8080, "metrics": 9090}
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    env = env_of(deployment)
    assert env["SHIFTLIGHT_LEASE_NAME"] == "shiftlight-leader"
    assert env["SHIFTLIGHT_LEASE_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["SHIFTLIGHT_PROMETHEUS_URL"] == "http://prometheus-operated.monitoring.svc:9090"
    assert env["SHIFTLIGHT_POLICY_DIR"] == "/etc/shiftlight/policies/v1"
    assert env["SHIFTLIGHT_BACKEND"] == "kubernetes"
    assert env["SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS"] == "5"
    assert env["SHIFTLIGHT_TRIAL_CACHE_MAX_ENTRIES"] == "200"
    assert container["command"] == ["shiftlight"] and container["args"] == ["operator", "--all-namespaces"]
    assert "SHIFTLIGHT_SLACK_WEBHOOK_FILE" not in env and "SHIFTLIGHT_LLM_ENDPOINT" not in env
    assert {m["mountPath"] for m in container["volumeMounts"]} == {
        "/tmp",
        "/etc/shiftlight/policies",
        "/var/run/secrets/shiftlight/trial-cache",
    }
    # the trial cache's signing key: a generated Secret, mounted as a file (never a value or an env var)
    assert env["SHIFTLIGHT_TRIAL_CACHE_KEY_FILE"] == "/var/run/secrets/shiftlight/trial-cache/key"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["trial-cache-key"]["secret"] == {
        "secretName": "sl-shiftlight-trial-cache-key",
        "items": [{"key": "key", "path": "key"}],
    }
    secret = one(docs, "Secret", "sl-shiftlight-trial-cache-key")
    assert len(base64.b64decode(secret["data"]["key"])) >= 32
    own = helm.template("--set", "trials.cacheKey.existingSecret=admin-key,trials.cacheKey.secretKey=k")
    assert by_kind(own, "Secret") == []
    own_volumes = {v["name"]: v for v in one(own, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert own_volumes["trial-cache-key"]["secret"]["secretName"] == "admin-key"
    assert env_of(one(own, "Deployment"))["SHIFTLIGHT_TRIAL_CACHE_KEY_FILE"].endswith("/trial-cache/k")
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_operator_deployment_nondefault(helm: Helm) -> None:
    docs = helm.template("-f", str(NONDEFAULT))
    deployment = one(docs, "Deployment", "shiftlight")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "registry.example.com/shiftlight:0.1.0-rc1"
    env = env_of(deployment)
    assert env["SHIFTLIGHT_LEASE_NAME"] == "shiftlight-prod-leader"
    assert env["SHIFTLIGHT_BACKEND"] == "simulator"
    assert json.loads(env["SHIFTLIGHT_LLM_ADVISORS"]) == [
        {
            "name": "default",
            "base_url": "http://vllm-advisor.ml.svc:8000/v1",
            "model": "qwen2.5-7b-instruct",
            "api_key_file": "/var/run/secrets/shiftlight/llm/default/token",
        },
        {"name": "local", "base_url": "http://vllm.prod.svc:8000/v1", "model": "the-managed-model"},
    ]
    advisors = OperatorSettings.from_env(env).llm_advisors  # the operator reads exactly what the chart renders
    assert [(a.name, a.base_url, str(a.api_key_file)) for a in advisors] == [
        ("default", "http://vllm-advisor.ml.svc:8000/v1", "/var/run/secrets/shiftlight/llm/default/token"),
        ("local", "http://vllm.prod.svc:8000/v1", "None"),
    ]
    assert env["SHIFTLIGHT_SLACK_WEBHOOK_FILE"] == "/var/run/secrets/shiftlight/slack/webhook-url"
    assert env["SHIFTLIGHT_SLACK_CHANNEL"] == "#ml-serving"
    assert json.loads(env["SHIFTLIGHT_CANARY_NODE_SELECTOR"]) == {"shiftlight.dev/pool": "canary"}
    assert json.loads(env["SHIFTLIGHT_CANARY_TOLERATIONS"])[0]["key"] == "shiftlight.dev/canary"
    assert env["SHIFTLIGHT_EXTRA"] == "1"
    # Secrets arrive as mounted files, never as env values.
    assert not any("secretKeyRef" in str(v) for v in env.values())
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["slack-secret"]["secret"] == {
        "secretName": "shiftlight-slack",
        "items": [{"key": "webhook-url", "path": "webhook-url"}],
    }
    assert volumes["llm-default"]["secret"] == {
        "secretName": "shiftlight-llm",
        "items": [{"key": "token", "path": "token"}],
    }
    assert "llm-local" not in volumes
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["llm-default"] == "/var/run/secrets/shiftlight/llm/default"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert one(docs, "ServiceAccount")["metadata"]["annotations"] == {"iam.example.com/role": "shiftlight"}
    lease_role = one(docs, "Role", "shiftlight-leader-election")
    assert lease_role["rules"][1]["resourceNames"] == ["shiftlight-prod-leader"]


def test_single_replica_has_no_pdb(helm: Helm) -> None:
    docs = helm.template("--set", "replicaCount=1")
    assert by_kind(docs, "PodDisruptionBudget") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "replicaCount=notanint"], "/replicaCount"),
        (["--set", "replicaCount=0"], "/replicaCount"),
        (["--set", "replicas=3"], "replicas"),
        (["--set", "prometheus.url=prometheus:9090"], "/prometheus/url"),
        (["--set", "slack.enabled=true"], "/slack/existingSecret"),
        (["--set", "llm.enabled=true"], "enabled"),
        (["--set", "llm.advisors[0].name=default"], "/llm/advisors/0"),
        (["--set", "llm.advisors[0].name=Bad_Name,llm.advisors[0].endpoint=http://x,llm.advisors[0].model=m"], "name"),
        (
            ["--set", "llm.advisors[0].name=a,llm.advisors[0].endpoint=file:///etc/passwd,llm.advisors[0].model=m"],
            "endpoint",
        ),
        (["--set", "operator.logLevel=verbose"], "/operator/logLevel"),
        (["--set", "operator.backend=docker"], "/operator/backend"),
        (["--set", "canary.tolerations[0].operator=Maybe"], "/canary/tolerations/0/operator"),
        (["--set", "leaderElection.leaseName="], "/leaderElection/leaseName"),
        (["--set", "rbac.readableSecrets[0]=slack"], "readableSecrets"),
        (["--set", "trials.progressIntervalSeconds=0"], "/trials/progressIntervalSeconds"),
        (["--set", "trials.cacheMaxEntries=0"], "/trials/cacheMaxEntries"),
        (["--set", "trials.cacheDir=/tmp/x"], "cacheDir"),
        (["--set", "trials.cacheKey.secretKey=a/b"], "/trials/cacheKey/secretKey"),
        (["--set", "trials.cacheKey.value=hunter2"], "value"),
    ],
)
def test_values_schema_rejects_bad_values(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.schema_refusal(*args)


def rules_of(docs: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = one(docs, kind, name)["rules"]
    return rules


def flat(rules: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    return {
        (group, resource, verb, ",".join(rule.get("resourceNames", [])))
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_is_enumerated_and_least_privilege(helm: Helm) -> None:
    docs = helm.template("-f", str(NONDEFAULT))
    for doc in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        for rule in doc["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), f"wildcard in {doc['metadata']['name']}: {rule}"
            assert "nonResourceURLs" not in rule
    # The operator's own rules are proved against its recorded API calls in test_rbac_least_privilege.py.
    operator = flat(rules_of(docs, "ClusterRole", "shiftlight-operator"))
    assert not any(resource == "secrets" for _, resource, _, _ in operator)
    # policy ConfigMaps are read; the trial cache ConfigMap is created and merge-patched; none is listed or deleted
    assert {verb for _, resource, verb, _ in operator if resource == "configmaps"} == {"get", "create", "patch"}

    lease = flat(rules_of(docs, "Role", "shiftlight-leader-election"))
    assert lease == {
        ("coordination.k8s.io", "leases", "create", ""),
        ("coordination.k8s.io", "leases", "get", "shiftlight-prod-leader"),
        ("coordination.k8s.io", "leases", "update", "shiftlight-prod-leader"),
    }
    approver = flat(rules_of(docs, "ClusterRole", "shiftlight-approver"))
    assert ("shiftlight.dev", "configrollouts", "approve", "") in approver
    assert ("shiftlight.dev", "tunedservices/status", "patch", "") in approver
    assert not any(verb in {"create", "delete", "update"} for _, _, verb, _ in approver)
    viewer = flat(rules_of(docs, "ClusterRole", "shiftlight-viewer"))
    assert {verb for _, _, verb, _ in viewer} == {"get", "list", "watch"}

    binding = one(docs, "ClusterRoleBinding", "shiftlight-operator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "shiftlight", "namespace": "shiftlight"}]


def test_policies_and_dashboard_configmaps_carry_the_sources(helm: Helm) -> None:
    docs = helm.template()
    policies = one(docs, "ConfigMap", "sl-shiftlight-policies")
    chart_policies = CHART / "policies"
    sources = sorted(chart_policies.rglob("*.yaml"))
    assert sources, "the chart has no policy presets"
    expected = {".".join(p.relative_to(chart_policies).parts): p.read_text() for p in sources}
    assert policies["data"] == expected
    volume = next(v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "policies")
    assert {i["key"]: i["path"] for i in volume["configMap"]["items"]} == {
        ".".join(p.relative_to(chart_policies).parts): str(p.relative_to(chart_policies)) for p in sources
    }
    dashboard = one(docs, "ConfigMap", "sl-shiftlight-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = CHART / "dashboards" / "shiftlight-dashboard.json"
    assert json.loads(dashboard["data"]["shiftlight-dashboard.json"]) == json.loads(source.read_text())


def test_chart_copies_are_identical_to_their_sources() -> None:
    """The chart carries copies (helm cannot read outside the chart); `python -m controller.crd.generate
    charts/shiftlight/crds` refreshes them."""
    pairs = [(REPO / "charts/grafana/shiftlight-dashboard.json", CHART / "dashboards/shiftlight-dashboard.json")]
    pairs += [(p, CHART / "policies" / p.relative_to(REPO / "policies")) for p in (REPO / "policies").rglob("*.yaml")]
    copies = {CHART / "dashboards/shiftlight-dashboard.json", *(CHART / "policies").rglob("*.yaml")}
    assert copies == {copy for _, copy in pairs}, "the chart has copies without a source"
    for source, chart_copy in pairs:
        assert source.is_file()
        assert chart_copy.read_bytes() == source.read_bytes(), (
            f"{chart_copy} differs from {source}: run python -m controller.crd.generate charts/shiftlight/crds"
        )


def test_notes_give_next_steps(helm: Helm) -> None:
    out = helm.run("install", "sl", str(CHART), "-n", "shiftlight", "--dry-run=client").stdout
    notes = out[out.index("NOTES:") :]
    for line in ("kubectl get ts -A", "shiftctl get -n", "shiftctl explain", "shiftctl approve <name> -n"):
        assert line in notes
    assert "--set slack.enabled=true --set slack.existingSecret=shiftlight-slack" in notes


# ----- CRs and HTTPRoutes against their own schemas ---------------------------------------------------


def crd_validator(docs: list[dict[str, Any]], kind: str) -> jsonschema.Draft4Validator:
    crd = next(d for d in by_kind(docs, "CustomResourceDefinition") if d["spec"]["names"]["kind"] == kind)
    open_api = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft4Validator(
        schema.to_json_schema(open_api, forbid_unknown=True), format_checker=jsonschema.FormatChecker()
    )


def test_sample_tunedservice_validates_against_the_rendered_crd(helm: Helm) -> None:
    validator = crd_validator(helm.template(), "TunedService")
    sample = yaml.safe_load((REPO / "examples" / "tunedservice.yaml").read_text())
    validator.validate(sample)
    broken = copy.deepcopy(sample)
    broken["spec"]["canaryPool"]["gpuCount"] = -1
    broken["spec"]["approvalMode"] = "yolo"
    assert sorted(e.validator for e in validator.iter_errors(broken)) == ["enum", "minimum"]


def test_sample_httproute_validates_against_the_gateway_api_schema() -> None:
    validator = vendored_validator("HTTPRoute")
    route = yaml.safe_load((REPO / "examples" / "httproute.yaml").read_text())
    validator.validate(route)
    weights = [b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]]
    assert weights == [100, 0]
    # the weight split Shiftlight writes mid-rollout is valid too; bad weights and names are not
    moved = copy.deepcopy(route)
    moved["spec"]["rules"][0]["backendRefs"][0]["weight"] = 75
    moved["spec"]["rules"][0]["backendRefs"][1]["weight"] = 25
    validator.validate(moved)
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][0]["backendRefs"][1]["weight"] = -1
    broken["spec"]["rules"][0]["backendRefs"][0]["name"] = ""
    broken["metadata"]["name"] = 7
    broken["spec"]["rules"][0]["backendRef"] = []  # a typo
    assert sorted(e.validator for e in validator.iter_errors(broken)) == [
        "additionalProperties",
        "minLength",
        "minimum",
        "type",
    ]


def test_servicemonitor_schema_catches_mistakes(helm: Helm) -> None:
    monitor = one(helm.template("-f", str(NONDEFAULT)), "ServiceMonitor")
    validator = vendored_validator("ServiceMonitor")
    validator.validate(monitor)
    broken = copy.deepcopy(monitor)
    broken["spec"]["endpoints"][0]["intervall"] = "15s"
    del broken["spec"]["selector"]
    assert sorted(e.validator for e in validator.iter_errors(broken)) == ["additionalProperties", "required"]


def test_minimal_render_with_everything_optional_off(helm: Helm) -> None:
    docs = helm.template(
        "--set",
        "rbac.create=false,serviceAccount.create=false,serviceAccount.name=ops,policies.enabled=false",
        "--set",
        "dashboard.enabled=false,metrics.service.enabled=false,podDisruptionBudget.enabled=false",
        "--set",
        "topologySpreadConstraints=null,trials.cacheKey.existingSecret=ops-cache-key",
        "--set",
        "approvals.admissionPolicy.enabled=false",
        crds=False,
    )
    assert [d["kind"] for d in docs] == ["Deployment"]  # the trial cache key is not optional: the admin's Secret
    assert validate_all(docs) == {"kubernetes-validate": 1, "vendored": 0}
    pod = docs[0]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ops"
    assert "topologySpreadConstraints" not in pod
    assert [v["name"] for v in pod["volumes"]] == ["tmp", "trial-cache-key"]
    assert "SHIFTLIGHT_POLICY_DIR" not in env_of(docs[0])
