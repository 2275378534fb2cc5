"""Candidates, stable and trial pods derived from foreign-shaped vLLM manifests (``manifests/*.yaml``, each written
from a published shape named at its top).

For each manifest: the derived pod template equals the user's except the tuned flags and labels (a structural
diff), every other flag stays in place and order, the derived argv parses back to the config it was derived for,
and candidate and trial pods are matched by none of the user's selectors (Deployment, Service, InferencePool,
router) while stable pods still are. The shell-string pod is refused, naming the container and the flag.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
import pytest
import yaml

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest, OwnerRef, Toleration
from controller.adapters.kube.manifests import deployment_manifest, service_manifest
from controller.adapters.kube.pod_template import (
    PodSource,
    baseline_config,
    derive_pod_template,
    engine_invocation,
    hygienic_labels,
    selector_matches,
)
from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from tests.support.paths import MANIFESTS

SHIFTLIGHT = {"shiftlight.dev/tuned-service": "chat", "shiftlight.dev/variant": "candidate"}

JSON = dict[str, Any]


def _docs(name: str) -> list[JSON]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def _selectors(docs: list[JSON]) -> tuple[dict[str, str], ...]:
    """Every label selector of the user's objects: Deployments, Services, InferencePools, router discovery."""
    out: list[dict[str, str]] = []
    for d in docs:
        spec = d.get("spec") or {}
        if d["kind"] in ("Deployment", "InferencePool"):
            out.append(dict((spec.get("selector") or {}).get("matchLabels") or {}))
        if d["kind"] == "Service":
            out.append(dict(spec.get("selector") or {}))
        for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            args = list(c.get("args") or [])
            if "--k8s-label-selector" in args:
                text = args[args.index("--k8s-label-selector") + 1]
                out.append(dict(kv.split("=", 1) for kv in text.split(",")))
    return tuple(s for s in out if s)


@dataclass(frozen=True)
class Case:
    file: str
    container: str
    baseline: EngineConfig
    candidate: EngineConfig


CASES = [
    Case(
        "vllm-docs-k8s.yaml",
        "mistral-7b",
        EngineConfig(max_num_batched_tokens=1024),
        EngineConfig(max_num_batched_tokens=4096, max_num_seqs=128, async_scheduling=True, omp_num_threads=4),
    ),
    Case(
        "production-stack.yaml",
        "vllm",
        EngineConfig(enable_prefix_caching=False, tensor_parallel_size=1, max_num_seqs=32, gpu_memory_utilization=0.85),
        EngineConfig(enable_prefix_caching=True, max_num_seqs=64, gpu_memory_utilization=0.9, kv_cache_dtype="fp8"),
    ),
    Case(
        "llm-d-sidecars.yaml",
        "modelserver",
        EngineConfig(
            tensor_parallel_size=2,
            max_num_seqs=1024,
            enable_prefix_caching=True,
            speculative_method="ngram",
            num_speculative_tokens=3,
            prompt_lookup_max=4,
            omp_num_threads=8,
        ),
        EngineConfig(tensor_parallel_size=2, max_num_seqs=512, speculative_method="mtp", num_speculative_tokens=1),
    ),
    Case(
        "config-file.yaml",
        "vllm-openai",
        EngineConfig(max_num_seqs=128, kv_cache_dtype="fp8", max_num_batched_tokens=8192),
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=2048, async_scheduling=False),
    ),
]


def _source(case: Case) -> tuple[PodSource, list[JSON]]:
    docs = _docs(case.file)
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment"
        and any(c["name"] == case.container for c in d["spec"]["template"]["spec"]["containers"])
    )
    config_maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    source = PodSource(
        template=deployment["spec"]["template"],
        container=case.container,
        config_maps=config_maps,
        selectors=_selectors(docs),
        where=f"deployment {deployment['metadata']['name']}",
    )
    return source, docs


def _diff(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Paths where two JSON values differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b)):
            yield from _diff(a.get(key), b.get(key), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path


def _container_index(template: Mapping[str, Any], name: str) -> int:
    return next(i for i, c in enumerate(template["spec"]["containers"]) if c["name"] == name)


def _untuned_tokens(source: PodSource) -> list[str]:
    inv = engine_invocation(source)
    drop = {p for use in inv.flags for p in use.positions}
    return [t for i, t in enumerate(inv.argv) if i not in drop]


def _with_template(source: PodSource, template: Mapping[str, Any]) -> PodSource:
    return PodSource(template, source.container, source.config_maps, source.selectors, source.where)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_the_users_current_config_is_parsed(case: Case) -> None:
    source, _ = _source(case)
    assert baseline_config(source) == case.baseline


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
@pytest.mark.parametrize("variant", ["candidate", "stable", "trial"])
def test_derived_pod_is_the_users_own_but_for_tuned_flags_and_labels(case: Case, variant: str) -> None:
    source, _ = _source(case)
    labels = {**SHIFTLIGHT, "shiftlight.dev/variant": variant}
    derived = derive_pod_template(source, case.candidate, variant=variant, labels=labels)
    i = _container_index(source.template, case.container)
    engine = f".spec.containers[{i}]"
    allowed = {f"{engine}.command", f"{engine}.args"}
    if case.candidate.omp_num_threads != case.baseline.omp_num_threads:
        allowed.add(f"{engine}.env")
    changed = {p for p in _diff(source.template, derived) if not p.startswith(".metadata.labels.")}
    assert changed <= allowed, changed - allowed
    user_env = [e for e in source.template["spec"]["containers"][i].get("env") or [] if e["name"] != "OMP_NUM_THREADS"]
    assert [e for e in derived["spec"]["containers"][i].get("env") or [] if e["name"] != "OMP_NUM_THREADS"] == user_env
    # every other flag in place and order; only the tuned ones differ
    derived_source = _with_template(source, derived)
    assert _untuned_tokens(derived_source) == _untuned_tokens(source)
    # the derived argv parses back to the config it was derived for
    assert engine_invocation(derived_source).config == case.candidate
    # labels: Shiftlight's added, the user's kept or (candidate, trial) rewritten where a selector matched them
    user = source.template["metadata"]["labels"]
    assert {k: derived["metadata"]["labels"][k] for k in labels} == labels
    for key in user:
        assert key in derived["metadata"]["labels"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_candidate_and_trial_pods_are_out_of_the_users_selectors(case: Case) -> None:
    source, _ = _source(case)
    user = source.template["metadata"]["labels"]
    assert any(selector_matches(s, user) for s in source.selectors)  # the fixture's selectors do select its pods
    for variant in ("candidate", "trial"):
        pod = derive_pod_template(source, case.candidate, variant=variant, labels=SHIFTLIGHT)["metadata"]["labels"]
        assert [s for s in source.selectors if selector_matches(s, pod)] == []
        # labels no selector uses are kept as they are
        used = {k for s in source.selectors for k in s}
        assert {k: v for k, v in pod.items() if k in user and k not in used} == {
            k: v for k, v in user.items() if k not in used
        }
    stable = derive_pod_template(source, case.candidate, variant="stable", labels=SHIFTLIGHT)["metadata"]["labels"]
    assert [selector_matches(s, stable) for s in source.selectors] == [
        selector_matches(s, user) for s in source.selectors
    ]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_deployment_and_trial_pod_are_valid_kubernetes_objects(case: Case) -> None:
    source, _ = _source(case)
    target = TargetRef(namespace="default", name="chat", model="unused")
    deployment = deployment_manifest(target, "candidate", case.candidate, 1, image="unused", source=source)
    kubernetes_validate.validate(deployment, "1.30", strict=True)
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector_matches(selector, deployment["spec"]["template"]["metadata"]["labels"])
    assert [
        s for s in source.selectors if selector_matches(s, deployment["spec"]["template"]["metadata"]["labels"])
    ] == []

    manifest = KubernetesTrialManifest(
        namespace="default",
        target_name="chat",
        model="unused",
        served_model_name="chat",
        node_selector={"shiftlight.dev/pool": "canary"},
        tolerations=(Toleration(key="shiftlight.dev/canary", value="true"),),
        owner=OwnerRef(api_version="shiftlight.dev/v1alpha1", kind="TunedService", name="chat", uid="u-1"),
        override_image="registry.example/vllm:canary",
    )
    pod = manifest.pod(case.candidate, "abc123", source)
    kubernetes_validate.validate(pod, "1.30", strict=True)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"shiftlight.dev/pool": "canary"}
    assert {"key": "shiftlight.dev/canary", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    engine = spec["containers"][_container_index(pod, case.container)]
    assert engine["image"] == "registry.example/vllm:canary"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "canary-trial"
    assert [s for s in source.selectors if selector_matches(s, pod["metadata"]["labels"])] == []
    trial_source = _with_template(source, {"metadata": pod["metadata"], "spec": spec})
    assert engine_invocation(trial_source).config == case.candidate
    assert _untuned_tokens(trial_source)[: len(_untuned_tokens(source))] == _untuned_tokens(source)
    # everything else of the user's pod is kept (volumes, probes, env, sidecars, security, affinity)
    user_spec = source.template["spec"]
    for key in ("volumes", "initContainers", "securityContext", "affinity", "serviceAccountName", "runtimeClassName"):
        assert spec.get(key) == user_spec.get(key)
    user_engine = user_spec["containers"][_container_index(source.template, case.container)]
    for key in ("volumeMounts", "livenessProbe", "readinessProbe", "startupProbe", "resources", "envFrom", "ports"):
        assert engine.get(key) == user_engine.get(key)


def test_a_served_model_name_reaches_a_pod_whose_command_names_none() -> None:
    source, _ = _source(CASES[0])
    derived = derive_pod_template(source, STOCK_PLUS, variant="stable", labels=SHIFTLIGHT, served_model_name="mistral")
    assert engine_invocation(_with_template(source, derived)).served_model_name == "mistral"
    named, _ = _source(CASES[2])  # names its own: kept
    derived = derive_pod_template(named, STOCK_PLUS, variant="stable", labels=SHIFTLIGHT, served_model_name="other")
    assert engine_invocation(_with_template(named, derived)).served_model_name == "qwen3-32b"


STOCK_PLUS = EngineConfig(max_num_seqs=16)


@pytest.mark.security
def test_a_shell_string_command_is_refused_naming_container_and_flag() -> None:
    docs = _docs("shell-string.yaml")
    deployment = docs[0]
    source = PodSource(deployment["spec"]["template"], container="mistral-7b", where="deployment default/mistral-7b")
    with pytest.raises(InvalidInput) as err:
        derive_pod_template(source, EngineConfig(max_num_seqs=8), variant="candidate", labels=SHIFTLIGHT)
    assert err.value.field == "--max-num-batched-tokens"
    assert err.value.source == "deployment default/mistral-7b container mistral-7b"
    with pytest.raises(InvalidInput):
        deployment_manifest(TargetRef("default", "chat", "m"), "candidate", EngineConfig(), 1, image="x", source=source)


def test_a_config_file_knob_left_at_vllms_default_without_a_spelling_is_refused() -> None:
    source, _ = _source(CASES[3])
    with pytest.raises(InvalidInput) as err:  # the file sets max-num-seqs: 128; no flag spells "vLLM's default"
        derive_pod_template(source, EngineConfig(max_num_batched_tokens=2048), variant="candidate", labels=SHIFTLIGHT)
    assert err.value.field == "--max-num-seqs"
    # a knob whose default has a spelling (kv-cache-dtype auto, tensor-parallel-size 1) is overridden explicitly
    derived = derive_pod_template(
        source, EngineConfig(max_num_seqs=8, max_num_batched_tokens=512), variant="candidate", labels=SHIFTLIGHT
    )
    command = derived["spec"]["containers"][0]["command"]
    assert command[command.index("--kv-cache-dtype") + 1] == "auto"
    assert command[command.index("--tensor-parallel-size") + 1] == "1"


def test_a_config_file_not_from_a_mounted_config_map_is_refused() -> None:
    source, _ = _source(CASES[3])
    unread = PodSource(source.template, source.container, {}, source.selectors, source.where)
    with pytest.raises(InvalidInput) as err:
        baseline_config(unread)
    assert err.value.field == "--config"


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (["vllm", "serve"], ["m", "--max_num_seqs=8"], EngineConfig(max_num_seqs=8)),
        (["/opt/venv/bin/vllm", "serve", "m", "-tp", "2"], None, EngineConfig(tensor_parallel_size=2)),
        (None, ["m", "--no-async-scheduling", "--enable-prefix-caching"],
         EngineConfig(async_scheduling=False, enable_prefix_caching=True)),
        (["python", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "m", "--max-num-seq", "4",
         "--max-num-seqs", "6"], EngineConfig(max_num_seqs=6)),
        (["python3.12", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model=m"],
         ["-sc", '{"method":"mtp","num_speculative_tokens":2}'],
         EngineConfig(speculative_method="mtp", num_speculative_tokens=2)),
        (["vllm", "serve", "m", "--gpu_memory_utilization", "0.5", "--mamba-ssm-cache-dtype=float16",
          "--enable-mamba-cache-stochastic-rounding", "--mamba-backend", "flashinfer"], [],
         EngineConfig(gpu_memory_utilization=0.5, mamba_ssm_cache_dtype="float16",
                      mamba_cache_stochastic_rounding=True, mamba_backend="flashinfer")),
    ],
)  # fmt: skip
def test_invocation_forms(command: list[str] | None, args: list[str] | None, expected: EngineConfig) -> None:
    inv = parse_invocation(command, args)
    assert inv.config == expected
    assert inv.model == "m"


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        (["/bin/bash", "-c", "exec vllm serve m --max-num-seqs 64"], None, "--max-num-seqs"),
        (["sh", "-c"], ["vllm serve m"], "command"),
        (["/app/start.sh"], ["--max-num-seqs", "8"], "command"),
        (["vllm", "serve", "m", "--speculative-config", '{"method":"eagle","num_speculative_tokens":2,"model":"d"}'],
         None, "--speculative-config.model"),
        (["vllm", "serve", "m", "--max-num-seqs", "0"], None, "max_num_seqs"),
        (["vllm", "serve", "m", "--config=/etc/v.yaml"], None, "--config"),
    ],
)  # fmt: skip
def test_invocations_refused(command: list[str], args: list[str] | None, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_invocation(command, args, where="container vllm")
    assert err.value.field == field
    assert err.value.source == "container vllm"


def test_hygienic_labels_rewrite_only_selected_values() -> None:
    labels = {"app": "chat", "tier": "gpu", "team": "ml"}
    selectors = [{"app": "chat"}, {"tier": "gpu", "team": "other"}]
    assert hygienic_labels(labels, selectors, "candidate") == {"app": "chat-candidate", "tier": "gpu-candidate",
                                                               "team": "ml"}  # fmt: skip
    assert hygienic_labels(labels, selectors, "stable") == labels
    long = {"app": "x" * 63}
    assert len(hygienic_labels(long, [long], "trial")["app"]) <= 63


@pytest.mark.security
def test_a_service_named_vllm_is_never_created() -> None:
    target = TargetRef("default", "chat", "m")
    with pytest.raises(InvalidInput) as err:
        service_manifest(target, "candidate", name="vllm")
    assert err.value.field == "service"
    assert service_manifest(target, "candidate", name="vllm-candidate")["metadata"]["name"] == "vllm-candidate"


ROUND_TRIP = [
    EngineConfig(),
    EngineConfig(speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_max=4, async_scheduling=False),
    EngineConfig(speculative_method="mtp", num_speculative_tokens=1, async_scheduling=True, max_num_seqs=256),
    EngineConfig(mamba_ssm_cache_dtype="float16", mamba_cache_stochastic_rounding=True, mamba_cache_philox_rounds=10),
    EngineConfig(mamba_backend="triton", max_num_batched_tokens=8192, kv_cache_dtype="fp8_e4m3"),
    EngineConfig(enable_prefix_caching=False, max_cudagraph_capture_size=512, gpu_memory_utilization=0.92),
    EngineConfig(enable_prefix_caching=True, tensor_parallel_size=4, omp_num_threads=16),
]


@pytest.mark.parametrize("config", ROUND_TRIP, ids=lambda c: c.label())
def test_every_rendered_flag_parses_back(config: EngineConfig) -> None:
    inv = parse_invocation(["vllm", "serve", "m"], config.vllm_args(), config.env())
    assert inv.config == config
    assert sum(len(u.positions) for u in inv.flags) == len(config.vllm_args())  # each rendered token is a tuned flag


def test_served_model_name_reaches_the_bare_model_deployment() -> None:
    target = TargetRef("default", "chat", "org/model")
    body = deployment_manifest(
        target, "stable", EngineConfig(max_num_seqs=8), 1, image="vllm", served_model_name="chat"
    )
    container = body["spec"]["template"]["spec"]["containers"][0]
    inv = parse_invocation(container["command"], container["args"])
    assert (inv.model, inv.served_model_name, inv.config) == ("org/model", "chat", EngineConfig(max_num_seqs=8))
