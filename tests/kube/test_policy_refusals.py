"""A refused policy is judged once per ConfigMap version, not on every retry.

A tenant's ConfigMap policy of 100,000 legal combinations none of which satisfies the constraints costs seconds of
CPU to refuse (the whole space is walked to prove it). The TunedService is retried every minute while it stays
refused; the refusal is remembered under the ConfigMap's resourceVersion and text, so the retries answer from
memory with the same ``Accepted=False`` naming the field, and a changed ConfigMap is judged afresh.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from controller.errors import InvalidInput
from controller.policy.space import MAX_SPACE_COMBINATIONS, SearchSpace
from controller.reactor.policy_refusals import POLICY_REFUSALS, PolicyRefusals
from controller.reactor.settings import OperatorSettings
from tests.support.kube_api import KubeAPIServer

from .conftest import G, V, kubernetes_loop, tuned_service

#: 1,000 x 100 combinations, every one with fewer batched tokens than sequences: nothing satisfies the constraints.
ALL_INFEASIBLE = {
    "space": {
        "max_num_seqs": {"min": 2048, "max": 3047},
        "max_num_batched_tokens": {"min": 16, "max": 1006, "step": 10},
    }
}


def accepted(api: client.ApiClient) -> dict[str, str]:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    return {k: conditions["Accepted"][k] for k in ("status", "reason", "message")}


@pytest.mark.kube
@pytest.mark.security
def test_an_all_infeasible_space_at_the_limit_is_judged_once_per_configmap_version(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    assert SearchSpace.model_validate(ALL_INFEASIBLE["space"]).product_size() == MAX_SPACE_COMBINATIONS  # legal
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    text = yaml.safe_dump(ALL_INFEASIBLE)
    core.create_namespaced_config_map(
        "prod", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"policy.yaml": text})
    )
    ts = tuned_service(route=None)
    ts["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    loop = kubernetes_loop(operator_kubeconfig, policy_dir)
    evaluated, remembered = POLICY_REFUSALS.evaluated, POLICY_REFUSALS.remembered

    loop.cycle("prod", "workhorse")
    first = accepted(api)
    assert first["status"] == "False" and first["reason"] == "InvalidPolicy"
    assert "space" in first["message"] and "no config satisfies the constraints" in first["message"]
    assert (POLICY_REFUSALS.evaluated - evaluated, POLICY_REFUSALS.remembered - remembered) == (1, 0)

    for retry in range(1, 4):  # the minutely retries: answered from memory, the same refusal
        loop.cycle("prod", "workhorse")
        assert accepted(api) == first
        assert (POLICY_REFUSALS.evaluated - evaluated, POLICY_REFUSALS.remembered - remembered) == (1, retry)

    fixed = {"space": {**ALL_INFEASIBLE["space"], "max_num_batched_tokens": {"min": 16384, "max": 16384}}}
    core.patch_namespaced_config_map("tuning", "prod", {"data": {"policy.yaml": yaml.safe_dump(fixed)}})
    loop.cycle("prod", "workhorse")  # a new version is judged afresh, and accepted
    assert POLICY_REFUSALS.evaluated - evaluated == 2
    assert accepted(api)["status"] == "True"


class Judge:
    """Stands in for parsing a policy: refuses the texts in ``refused``, counts how often it ran."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.runs = 0

    def __call__(self, text: str) -> str:
        self.runs += 1
        if text in self.refused:
            raise InvalidInput("no config satisfies the constraints", source=text, field="space")
        return text


CASES = [
    # (what, keys judged in order, refused keys, runs of the judge expected)
    ("a refusal is remembered", ["bad", "bad", "bad"], {"bad"}, 1),
    ("an acceptance is not", ["good", "good"], set(), 2),
    ("each version is its own", ["bad@1", "bad@2", "bad@1"], {"bad@1", "bad@2"}, 2),
]


@pytest.mark.parametrize(("keys", "refused", "runs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_only_refusals_are_remembered_per_key(keys: list[str], refused: set[str], runs: int) -> None:
    refusals, judge = PolicyRefusals(), Judge(refused)
    for key in keys:
        try:
            refusals.judged(key, lambda k=key: judge(k))  # type: ignore[misc]
        except InvalidInput as exc:
            assert key in refused and exc.field == "space"
        else:
            assert key not in refused
    assert judge.runs == runs


def test_the_remembered_refusals_are_bounded() -> None:
    refusals, judge = PolicyRefusals(max_entries=2), Judge({"a", "b", "c"})
    for key in ("a", "b", "c", "a"):
        with pytest.raises(InvalidInput):
            refusals.judged(key, lambda k=key: judge(k))  # type: ignore[misc]
    assert len(refusals) == 2
    assert judge.runs == 4  # "a" was dropped for "c", so judged again


#: 2 x 3 x 2 x 64 x 16 = 12,288 combinations, every one of them valid for some config: over a budget of 10,000.
WIDE = {
    "space": {
        "speculative_method": ["none", "mtp"],
        "num_speculative_tokens": {"min": 1, "max": 3},
        "async_scheduling": [True, False],
        "max_num_seqs": {"min": 8, "max": 512, "step": 8},
        "max_num_batched_tokens": {"min": 1024, "max": 16384, "step": 1024},
    }
}


@pytest.mark.kube
@pytest.mark.security
@pytest.mark.parametrize(("budget", "refused"), [(10_000, True), (12_288, False)])
def test_a_policy_over_the_operators_budget_per_tuned_service_is_refused_naming_the_field(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path, budget: int, refused: bool
) -> None:
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespaced_config_map(
        "prod",
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"policy.yaml": yaml.safe_dump(WIDE)}),
    )
    ts = tuned_service(route=None)
    ts["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    kubernetes_loop(operator_kubeconfig, policy_dir, max_space_combinations=budget).cycle("prod", "workhorse")
    condition = accepted(api)
    if refused:
        assert condition["status"] == "False" and condition["reason"] == "InvalidPolicy"
        assert ":space:" in condition["message"] and "12,288 combinations" in condition["message"]
        assert "10,000" in condition["message"] and "SHIFTLIGHT_MAX_SPACE_COMBINATIONS" in condition["message"]
    else:
        assert condition["status"] == "True"


BUDGETS = [
    # (env value, budget or the refusal)
    (None, MAX_SPACE_COMBINATIONS),
    ("5000", 5000),
    ("100000", MAX_SPACE_COMBINATIONS),
    ("100001", "must be a whole number from 1 to 100000"),
    ("0", "must be a whole number from 1 to 100000"),
    ("2.5", "must be a whole number from 1 to 100000"),
    ("lots", "must be a number"),
]


@pytest.mark.parametrize(("raw", "expected"), BUDGETS)
def test_the_budget_setting_is_bounded_by_the_hard_limit(raw: str | None, expected: int | str) -> None:
    env = {} if raw is None else {"SHIFTLIGHT_MAX_SPACE_COMBINATIONS": raw}
    if isinstance(expected, int):
        assert OperatorSettings.from_env(env).max_space_combinations == expected
    else:
        with pytest.raises(InvalidInput, match=expected) as info:
            OperatorSettings.from_env(env)
        assert info.value.field == "SHIFTLIGHT_MAX_SPACE_COMBINATIONS"
