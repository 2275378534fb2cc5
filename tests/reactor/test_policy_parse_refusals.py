"""A tenant's policy ConfigMap that no parser should follow (over the byte cap, more nodes than the node cap,
nesting hundreds of levels deep, aliases that expand to millions of values or hold themselves) is refused like any
other bad policy: ``Accepted=False`` with reason ``InvalidPolicy`` and a warning Event, both naming the ConfigMap
and key, the stored status kept; never an "unexpected error" that leaves the TunedService without a condition."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from controller.reactor.loop import ControlLoop
from tests.support.kube_operator import G, V, kubernetes_loop, tuned_service

pytestmark = [pytest.mark.kube, pytest.mark.security]

STORED_STATUS: dict[str, Any] = {"phase": "Observing", "history": ["promoted mtp k=1 after 3 steps"]}
BOMB = "\n".join(
    [
        "name: laughs",
        "a: &a [x, x, x, x, x, x, x, x, x, x]",
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]",
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]",
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]",
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]",
        "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]",
    ]
)


@pytest.fixture
def loop(operator_kubeconfig: Any, policy_dir: Any) -> ControlLoop:
    return kubernetes_loop(operator_kubeconfig, policy_dir)


def create(api: client.ApiClient, policy_text: str) -> None:
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespaced_config_map(
        "prod", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"policy.yaml": policy_text})
    )
    ts = tuned_service(route=None)
    ts["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    co.patch_namespaced_custom_object_status(G, V, "prod", "tunedservices", "workhorse", {"status": STORED_STATUS})


@pytest.mark.parametrize(
    ("policy_text", "why"),
    [
        pytest.param("space:\n  max_num_seqs: " + "[" * 500 + "]" * 500, "nested more than", id="500-deep-flow"),
        pytest.param("space: " + "{a: " * 500 + "1" + "}" * 500, "nested more than", id="500-deep-mappings"),
        pytest.param(
            "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v: 1",
            "nested more than",
            id="100-deep-block",
        ),
        pytest.param("[" + ",".join(["[]"] * 333_000) + "]", "bytes, more than the 65,536", id="over-the-byte-cap"),
        pytest.param("[" + ",".join(["[]"] * 20_001) + "]", "more than 20,000 nodes", id="over-the-node-cap"),
        pytest.param(BOMB, "expands to more than", id="alias-bomb"),
        pytest.param("space: &s {max_num_seqs: [*s]}", "alias that refers", id="alias-holds-itself"),
    ],
)
def test_a_policy_no_parser_should_follow_is_refused_naming_the_file(
    api: client.ApiClient, loop: ControlLoop, policy_text: str, why: str
) -> None:
    create(api, policy_text)
    for _ in range(2):  # every cycle refuses the same way; none is an unexpected error
        report = loop.cycle("prod", "workhorse")
        assert not report.acted and report.reason.startswith("InvalidPolicy: "), report.reason
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    accepted = {c["type"]: c for c in body["status"]["conditions"]}["Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "InvalidPolicy")
    assert "configmap prod/tuning:policy.yaml" in accepted["message"] and why in accepted["message"]
    events = [e for e in client.CoreV1Api(api).list_namespaced_event("prod").items if e.type == "Warning"]
    assert events and {e.reason for e in events} == {"InvalidPolicy"}
    assert all("configmap prod/tuning:policy.yaml" in e.message and why in e.message for e in events)
    for key, value in STORED_STATUS.items():  # nothing already stored is lost
        assert body["status"][key] == value
