"""The CRDs' CEL rules (``x-kubernetes-validations``) refuse exactly what the models refuse.

There is no apiserver here: the rules are evaluated with cel-python as the apiserver would, with a field set to
null treated as absent (Kubernetes CEL's ``has()``) and the Kubernetes lists library's ``isSorted()``.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import celpy
import pytest
from celpy import celtypes

from controller.crd import models, schema
from controller.domain.config import EngineConfig
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.errors import InvalidInput

_ENV = celpy.Environment()


def _is_sorted(values: celtypes.ListType) -> celtypes.BoolType:
    """Kubernetes' ``<list>.isSorted()`` (lists library)."""
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(values)))


def _present(value: Any) -> Any:
    """``value`` with null fields dropped: Kubernetes CEL treats them as absent."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_present(v) for v in value]
    return value


def _rules(node: Any) -> Iterator[dict[str, str]]:
    if isinstance(node, dict):
        yield from node.get("x-kubernetes-validations", [])
        for value in node.values():
            yield from _rules(value)
    elif isinstance(node, list):
        for value in node:
            yield from _rules(value)


def cel_failures(node: dict[str, Any], value: Any) -> list[str]:
    """Messages of the rules under ``node`` (a structural schema) that ``value`` breaks."""
    out: list[str] = []
    for rule in node.get("x-kubernetes-validations", []):
        program = _ENV.program(_ENV.compile(rule["rule"]), functions={"isSorted": _is_sorted})
        if not bool(program.evaluate({"self": celpy.json_to_cel(value)})):
            out.append(rule["message"])
    if isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            if name in value:
                out += cel_failures(sub, value[name])
    elif isinstance(value, list) and "items" in node:
        for item in value:
            out += cel_failures(node["items"], item)
    return out


CRDS = {crd["spec"]["names"]["kind"]: crd for crd in schema.all_crds()}


def spec_schema(kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


SHAPE = TrafficShape(
    arrival_rate_rps=4,
    concurrency=16,
    prompt_tokens=LengthDistribution(mean=512),
    output_tokens=LengthDistribution(mean=128),
)
CANDIDATE = EngineConfig(speculative_method="ngram", num_speculative_tokens=3)


def tuned_service() -> dict[str, Any]:
    return {
        "kind": "TunedService",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {"workload": {"deployments": ["m"], "service": "m"}, "model": {"name": "m"}, "gpuType": "L4"},
    }


def trial() -> dict[str, Any]:
    spec = models.TrialSpec(target="m", config=CANDIDATE, shape=SHAPE)
    return {"kind": "Trial", "metadata": {"name": "t", "namespace": "ns"}, "spec": spec.to_wire()}


def config_rollout() -> dict[str, Any]:
    spec = models.ConfigRolloutSpec(
        target="m", rollout_id="r", from_config=EngineConfig(), to_config=CANDIDATE, steps=(10, 100)
    )
    return {"kind": "ConfigRollout", "metadata": {"name": "r", "namespace": "ns"}, "spec": spec.to_wire()}


PARSERS: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], object]]] = {
    "TunedService": (tuned_service, models.parse_tuned_service),
    "Trial": (trial, models.parse_trial),
    "ConfigRollout": (config_rollout, models.parse_config_rollout),
}

NGRAM_ASYNC = {"speculative_method": "ngram", "num_speculative_tokens": 2, "async_scheduling": True}
SR_FP16 = {"mamba_ssm_cache_dtype": "float16", "mamba_cache_stochastic_rounding": True}

# (kind, spec field, valid value, invalid value, message of the rule the invalid value breaks)
CASES: list[tuple[str, str, Any, Any, str]] = [
    (
        "TunedService",
        "replicas",
        {"minReplicas": 8, "maxReplicas": 8},
        {"minReplicas": 9, "maxReplicas": 8},
        "minReplicas must be <= maxReplicas",
    ),
    (
        "TunedService",
        "replicas",
        {"minReplicas": 9, "maxReplicas": 20},
        {"minReplicas": 9},
        "minReplicas must be <= maxReplicas",
    ),
    (
        "TunedService",
        "replicas",
        {"maxReplicas": 1},
        {"maxReplicas": 0, "minReplicas": 1},
        "minReplicas must be <= maxReplicas",
    ),
    (
        "TunedService",
        "policy",
        {"preset": "default"},
        {"preset": "default", "configMapRef": {"name": "p", "key": "k"}},
        "not both",
    ),
    (
        "TunedService",
        "policy",
        {"preset": None, "configMapRef": {"name": "p", "key": "k"}},
        {"preset": "a", "configMapRef": {"name": "p", "key": "k"}},
        "not both",
    ),
    (
        "TunedService",
        "canaryPool",
        {"tolerations": [{"operator": "Exists"}]},
        {"tolerations": [{"operator": "Exists", "value": "x"}]},
        "must not set a value",
    ),
    (
        "TunedService",
        "canaryPool",
        {"tolerations": [{"key": "k", "value": "x"}]},
        {"tolerations": [{"key": "k"}, {"operator": "Exists", "value": "y"}]},
        "must not set a value",
    ),
    (
        "TunedService",
        "workload",
        {"deployments": ["a", "b"], "service": "m"},
        {"deployments": ["a", "b", "a"], "service": "m"},
        "deployment names must be unique",
    ),
    (
        "TunedService",
        "schedule",
        [{"name": "day", "start_hour": 8, "end_hour": 20}, {"name": "night", "start_hour": 20, "end_hour": 8}],
        [{"name": "day", "start_hour": 8, "end_hour": 20}, {"name": "day", "start_hour": 20, "end_hour": 8}],
        "schedule window names must be unique",
    ),
    (
        "Trial",
        "config",
        {"speculative_method": "mtp", "num_speculative_tokens": 2},
        {"num_speculative_tokens": 2},
        "config: num_speculative_tokens must be 0",
    ),
    ("Trial", "config", {}, {"speculative_method": "mtp"}, "config: num_speculative_tokens must be >= 1"),
    (
        "Trial",
        "config",
        {"speculative_method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4},
        {"speculative_method": "mtp", "num_speculative_tokens": 2, "prompt_lookup_max": 4},
        "config: prompt_lookup_max only applies",
    ),
    (
        "Trial",
        "config",
        SR_FP16,
        {"mamba_cache_stochastic_rounding": True},
        "config: mamba_cache_stochastic_rounding requires",
    ),
    (
        "Trial",
        "config",
        {**SR_FP16, "mamba_cache_philox_rounds": 3},
        {"mamba_cache_philox_rounds": 3},
        "config: mamba_cache_philox_rounds requires",
    ),
    (
        "Trial",
        "config",
        {**NGRAM_ASYNC, "speculative_method": "ngram_gpu"},
        NGRAM_ASYNC,
        "config: async_scheduling cannot",
    ),
    (
        "Trial",
        "config",
        {**NGRAM_ASYNC, "async_scheduling": False},
        {**NGRAM_ASYNC, "speculative_method": "suffix"},
        "config: async_scheduling cannot",
    ),
    (
        "Trial",
        "shape",
        {**SHAPE.model_dump(), "prompt_tokens": {"mean": 512, "maximum": 512}},
        {**SHAPE.model_dump(), "prompt_tokens": {"mean": 512, "maximum": 100}},
        "shape.prompt_tokens: maximum must be >= mean",
    ),
    (
        "Trial",
        "shape",
        {**SHAPE.model_dump(), "output_tokens": {"mean": 128.5, "maximum": 129}},
        {**SHAPE.model_dump(), "output_tokens": {"mean": 128.5, "maximum": 128}},
        "shape.output_tokens: maximum must be >= mean",
    ),
    ("ConfigRollout", "steps", [10, 50, 100], [10, 50, 101], "every step weight must be in 1..100"),
    ("ConfigRollout", "steps", [1, 100], [0, 100], "every step weight must be in 1..100"),
    ("ConfigRollout", "steps", [100], [50, 10, 100], "step weights must rise strictly"),
    ("ConfigRollout", "steps", [5, 25, 100], [5, 25, 25, 100], "step weights must rise strictly"),
    ("ConfigRollout", "steps", [10, 100], [10, 50], "the last step weight must be 100"),
]

# a ConfigRollout's configs carry the same rules as a Trial's
CASES += [
    ("ConfigRollout", side, valid, invalid, message.replace("config:", f"{side}:"))
    for side in ("fromConfig", "toConfig")
    for kind, field, valid, invalid, message in list(CASES)
    if (kind, field) == ("Trial", "config")
]


def _body(kind: str, field: str, value: Any) -> dict[str, Any]:
    body = PARSERS[kind][0]()
    body["spec"][field] = copy.deepcopy(value)
    return body


@pytest.mark.parametrize(("kind", "field", "valid", "invalid", "message"), CASES)
def test_a_valid_object_passes_the_model_and_every_rule(
    kind: str, field: str, valid: Any, invalid: Any, message: str
) -> None:
    body = _body(kind, field, valid)
    PARSERS[kind][1](body)
    assert cel_failures(spec_schema(kind), _present(body["spec"])) == []


@pytest.mark.security
@pytest.mark.parametrize(("kind", "field", "valid", "invalid", "message"), CASES)
def test_an_invalid_object_is_refused_by_the_model_and_by_the_rule(
    kind: str, field: str, valid: Any, invalid: Any, message: str
) -> None:
    body = _body(kind, field, invalid)
    with pytest.raises(InvalidInput) as err:
        PARSERS[kind][1](body)
    assert err.value.field.startswith(f"spec.{field}")
    failures = cel_failures(spec_schema(kind), _present(body["spec"]))
    assert failures, "the apiserver would accept what the operator refuses"
    assert any(message in f for f in failures), failures


def test_every_rule_is_covered_by_a_case_and_sits_in_its_crd() -> None:
    in_crds = {r["message"] for crd in CRDS.values() for r in _rules(crd)}
    declared = {r["message"] for rules in models.CEL_RULES.values() for r in rules}
    assert in_crds == declared
    covered = {m for m in declared if any(case[4] in m for case in CASES)}
    assert covered == declared


def test_rules_sit_at_their_models_schema() -> None:
    ts = spec_schema("TunedService")
    assert ts["properties"]["replicas"]["x-kubernetes-validations"] == models.CEL_RULES[models.ReplicaBounds]
    assert ts["properties"]["policy"]["x-kubernetes-validations"] == models.CEL_RULES[models.PolicyRef]
    toleration = ts["properties"]["canaryPool"]["properties"]["tolerations"]["items"]
    assert toleration["x-kubernetes-validations"] == models.CEL_RULES[models.Toleration]
    assert ts["x-kubernetes-validations"] == models.CEL_RULES[models.TunedServiceSpec]
    assert spec_schema("Trial")["x-kubernetes-validations"] == models.CEL_RULES[models.TrialSpec]
    assert spec_schema("ConfigRollout")["x-kubernetes-validations"] == models.CEL_RULES[models.ConfigRolloutSpec]
    # the rules scan bounded lists only (the apiserver estimates their cost from maxItems)
    assert ts["properties"]["workload"]["properties"]["deployments"]["maxItems"] == 32
    assert ts["properties"]["schedule"]["maxItems"] == 24
    assert spec_schema("ConfigRollout")["properties"]["steps"]["maxItems"] == 100
