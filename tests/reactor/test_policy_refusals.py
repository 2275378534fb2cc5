"""A refused policy is judged once per text, not on every retry, nor again after a restart.

A tenant's ConfigMap policy of 100,000 legal combinations none of which satisfies the constraints costs seconds of
CPU to refuse (the whole space is walked to prove it). The TunedService is retried every minute while it stays
refused; the refusal is remembered under the ConfigMap's source and the SHA-256 of its text, so the retries (and a
change that leaves the text as it was: an annotation, a new resourceVersion) answer from memory with the same
``Accepted=False`` naming the field, and a changed text is judged afresh. Refusals are kept per namespace, so one
tenant's many refusals do not push out another's, and the refusal recorded in the TunedService's status answers
after a restart without judging the text again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from controller.crd.models import parse_tuned_service
from controller.errors import InvalidInput
from controller.policy.space import MAX_SPACE_COMBINATIONS, SearchSpace
from controller.reactor.policy_refusals import POLICY_REFUSALS, PolicyRefusals
from controller.reactor.policy_source import resolve_policy
from controller.reactor.settings import OperatorSettings
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import G, V, kubernetes_loop, tuned_service

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


def create_on_infeasible_policy(core: client.CoreV1Api, co: client.CustomObjectsApi) -> None:
    """``prod/workhorse`` on the all-infeasible policy, from ConfigMap ``prod/tuning``."""
    text = yaml.safe_dump(ALL_INFEASIBLE)
    core.create_namespaced_config_map(
        "prod", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"policy.yaml": text})
    )
    ts = tuned_service(route=None)
    ts["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)


@pytest.mark.kube
@pytest.mark.security
def test_an_all_infeasible_space_at_the_limit_is_judged_once_per_text(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    assert SearchSpace.model_validate(ALL_INFEASIBLE["space"]).product_size() == MAX_SPACE_COMBINATIONS  # legal
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    create_on_infeasible_policy(core, co)
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

    before = core.read_namespaced_config_map("tuning", "prod").metadata.resource_version
    core.patch_namespaced_config_map("tuning", "prod", {"metadata": {"annotations": {"owner": "team-a"}}})
    assert core.read_namespaced_config_map("tuning", "prod").metadata.resource_version != before
    loop.cycle("prod", "workhorse")  # a new resourceVersion, the same text: not judged again
    assert accepted(api) == first
    assert (POLICY_REFUSALS.evaluated - evaluated, POLICY_REFUSALS.remembered - remembered) == (1, 4)

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


@pytest.mark.security
def test_one_namespaces_refusals_do_not_push_out_anothers() -> None:
    refusals = PolicyRefusals()
    costly, cheap = Judge({"costly"}), Judge({f"cheap-{i}" for i in range(256)})
    with pytest.raises(InvalidInput):
        refusals.judged("costly", lambda: costly("costly"), namespace="quiet")
    for i in range(256):  # a noisy tenant's 256 cheap refusals, each a new text
        with pytest.raises(InvalidInput):
            refusals.judged(f"cheap-{i}", lambda i=i: cheap(f"cheap-{i}"), namespace="noisy")  # type: ignore[misc]
    assert refusals.held("noisy") == refusals.max_per_namespace < 256  # bounded, its own oldest went first
    with pytest.raises(InvalidInput):
        refusals.judged("costly", lambda: costly("costly"), namespace="quiet")
    assert costly.runs == 1  # the quiet tenant's refusal is still remembered: not judged again


@pytest.mark.security
def test_the_remembered_refusals_are_bounded_in_all() -> None:
    refusals, judge = PolicyRefusals(max_per_namespace=3, max_entries=4), Judge({"a", "b", "c", "d"})
    for namespace, key in (("quiet", "a"), ("noisy", "b"), ("noisy", "c"), ("noisy", "d")):
        with pytest.raises(InvalidInput):
            refusals.judged(key, lambda k=key: judge(k), namespace=namespace)  # type: ignore[misc]
    with pytest.raises(InvalidInput):
        refusals.judged("e", lambda: judge("a"), namespace="other")  # five in all: the fullest namespace gives way
    assert len(refusals) == 4 and (refusals.held("quiet"), refusals.held("noisy")) == (1, 2)


@pytest.mark.security
def test_a_remembered_refusal_keeps_no_traceback() -> None:
    refusals = PolicyRefusals()

    def judge() -> str:
        text = "x" * 1_000_000  # held by this frame while it raises
        raise InvalidInput(f"refused ({len(text)} bytes)", source="configmap prod/tuning:policy.yaml", field="space")

    for _ in range(2):
        with pytest.raises(InvalidInput) as raised:
            refusals.judged("k", judge, namespace="prod")
    assert raised.value.field == "space" and raised.value.source == "configmap prod/tuning:policy.yaml"
    assert str(raised.value) == "configmap prod/tuning:policy.yaml:space: refused (1000000 bytes)"
    (kept,) = refusals.kept("prod")
    assert kept.__traceback__ is None and kept.__context__ is None


@pytest.mark.kube
@pytest.mark.security
def test_a_refusal_recorded_in_status_answers_after_a_restart_without_judging_the_text(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    create_on_infeasible_policy(core, co)
    kubernetes_loop(operator_kubeconfig, policy_dir).cycle("prod", "workhorse")  # refused, recorded in status
    refused = accepted(api)
    assert refused["reason"] == "InvalidPolicy" and "sha256:" in refused["message"]

    operator = config.new_client_from_config(str(operator_kubeconfig))
    settings = OperatorSettings(backend="kubernetes", policy_dir=policy_dir)

    def resolve(refusals: PolicyRefusals) -> None:
        body = co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
        spec, _ = parse_tuned_service(body)
        resolve_policy(operator, settings, spec, body, refusals=refusals)

    restarted = PolicyRefusals()  # a new process: nothing in memory
    for _ in range(2):
        with pytest.raises(InvalidInput) as raised:
            resolve(restarted)
        assert str(raised.value) == refused["message"]  # the same refusal: the condition does not change
    assert (restarted.evaluated, restarted.restored, restarted.remembered) == (0, 1, 2)  # never parsed

    fixed = {"space": {**ALL_INFEASIBLE["space"], "max_num_batched_tokens": {"min": 16384, "max": 16384}}}
    core.patch_namespaced_config_map("tuning", "prod", {"data": {"policy.yaml": yaml.safe_dump(fixed)}})
    resolve(restarted)  # another text: the recorded refusal is not its refusal; judged, and accepted
    assert restarted.evaluated == 1


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
