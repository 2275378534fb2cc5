"""The operator end to end on the fake API with the simulator behind it.

apply a TunedService -> trials run -> a rollout waits for approval -> `shiftctl approve` (the CLI entry point)
-> weights step -> the operator is killed mid-rollout and a new one resumes without repeating a step or losing
the approval -> promotion. And: with two replicas only the Lease holder acts.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from controller.cli.shiftctl.commands import app as shiftctl
from controller.crd.models import parse_tuned_service
from controller.domain.phases import Phase
from controller.domain.status import TargetStatus
from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import G, V, http_route, operator, tuned_service, wait_for

pytestmark = pytest.mark.kube

ROUTE = "gateway.networking.k8s.io/v1/httproutes"


def status_of(co: client.CustomObjectsApi, name: str = "workhorse") -> TargetStatus:
    _, status = parse_tuned_service(co.get_namespaced_custom_object(G, V, "prod", "tunedservices", name))
    return status


def candidate_weights(kube: KubeAPIServer) -> list[int]:
    """The candidate weight of every stored version of the HTTPRoute, oldest first."""
    out = []
    for version in kube.api.versions(ROUTE, "prod", "workhorse"):
        refs = {r["name"]: r.get("weight", 0) for r in version["spec"]["rules"][0]["backendRefs"]}
        out.append(int(refs.get("workhorse-candidate", 0)))
    return out


def events(api: client.ApiClient, reason: str, about: str = "") -> list[Any]:
    """The TunedService's Events with this reason (a reason code in CamelCase) whose message holds ``about``."""
    listed = client.CoreV1Api(api).list_namespaced_event("prod", field_selector="involvedObject.name=workhorse")
    return [e for e in listed.items if e.reason == reason and about in e.message]


def events_about(api: client.ApiClient, about: str) -> list[Any]:
    listed = client.CoreV1Api(api).list_namespaced_event("prod", field_selector="involvedObject.name=workhorse")
    return [e for e in listed.items if about in e.message]


def metric(runtime_metrics: Any, name: str, **labels: str) -> float:
    value = runtime_metrics.registry.get_sample_value(name, labels or None)
    return float(value or 0.0)


def test_apply_trial_approve_step_restart_promote(
    kube: KubeAPIServer,
    api: client.ApiClient,
    operator_api: client.ApiClient,
    alice_kubeconfig: Path,
    settings_for: Callable[[str], OperatorSettings],
) -> None:
    started = time.monotonic()
    timeline: list[tuple[str, float]] = []
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", "prod", "httproutes", http_route())
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service())
    settings_a = settings_for("replica-a")
    backend = SimulatorBackend(settings_a, operator_api)  # the simulated production fleet outlives operator restarts

    with operator(settings_a, operator_api, backend=backend, release=False) as replica_a:
        # trials run, then the rollout waits for a human
        waiting = wait_for("AwaitingApproval", lambda: (s := status_of(co)).phase is Phase.AWAITING_APPROVAL and s)
        timeline.append(("awaiting approval", time.monotonic() - started))
        assert waiting.trials, "trials ran before the rollout was proposed"
        assert waiting.rollout is not None and waiting.rollout.weight == 0
        to_config = waiting.rollout.to_config
        trial_crs = co.list_namespaced_custom_object(G, V, "prod", "trials")["items"]
        # one Trial CR per config and shape bucket (a repeated measurement of the same config shares it)
        assert len(trial_crs) == len({(t.config.key(), t.shape.bucket()) for t in waiting.trials})
        # the ConfigRollout mirror gets its status in a write of its own, right after the TunedService's
        rollout_cr = wait_for(
            "the ConfigRollout mirror's status",
            lambda: [
                r for r in co.list_namespaced_custom_object(G, V, "prod", "configrollouts")["items"] if r.get("status")
            ],
        )
        assert [r["status"]["phase"] for r in rollout_cr] == ["AwaitingApproval"]
        assert events(api, "TuneNoConfig", "baseline")
        # the rollout's start (deploy, approval request, notification) carries the code approval-required
        assert events(api, "ApprovalRequired", "approval needed before shifting traffic")

        # a human approves through the CLI entry point (identity from the API server: alice)
        result = CliRunner().invoke(shiftctl, ["approve", "workhorse", "--kubeconfig", str(alice_kubeconfig)])
        assert result.exit_code == 0, result.output
        assert "approved by alice" in result.stdout

        # the first weight step lands; kill the operator right there (no lease release: a crash)
        mid = wait_for(
            "the first weight step",
            lambda: (s := status_of(co)).rollout is not None and s.rollout.weight > 0 and s.rollout.weight < 100 and s,
        )
        timeline.append(("first step, killing", time.monotonic() - started))
    killed_at = mid.rollout
    assert killed_at is not None
    assert [a.by for a in killed_at.approvals] == ["alice"]

    # a new replica takes over after the dead one's lease expires and finishes the rollout
    with operator(settings_for("replica-b"), operator_api, backend=backend) as replica_b:
        done = wait_for(
            "promotion",
            lambda: (s := status_of(co)).phase is Phase.OBSERVING and s.active_config == to_config and s,
            timeout=90,
        )
        wait_for("the rollout CR to finish", lambda: _rollout_phase(co) == "Succeeded", timeout=10)
        promoted = metric(replica_b.metrics, "shiftlight_rollouts_total", outcome="promoted")
        health = urllib.request.urlopen(f"http://127.0.0.1:{replica_b.servers[0].port}/healthz").read().decode()
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{replica_b.servers[0].port}/metrics").read().decode()
        timeline.append(("promoted", time.monotonic() - started))

    # counted after both replicas stopped (a cycle may be in flight when the test moves on)
    cycles_a, cycles_b = len(replica_a.loop.durations), len(replica_b.loop.durations)
    conflicts = replica_a.loop.store.conflicts + replica_b.loop.store.conflicts
    writes = replica_a.loop.store.writes + replica_b.loop.store.writes
    skipped = replica_a.loop.store.skipped + replica_b.loop.store.skipped
    durations = [replica_a.loop.durations, replica_b.loop.durations]

    # the approval survived the restart and no step was repeated
    (rollout_cr,) = co.list_namespaced_custom_object(G, V, "prod", "configrollouts")["items"]
    assert [a["by"] for a in rollout_cr["status"]["approvals"]] == ["alice"]
    assert done.rollout is None or [a.by for a in done.rollout.approvals] == ["alice"]
    assert_each_step_once(kube, api)
    assert promoted == 1
    assert "leader=True" in health
    assert_promotion_counted(scrape)
    assert cycles_a > 0 and cycles_b > 0
    # at most one guarded status write per cycle (plus one re-try per conflict with a user write); a cycle that
    # changed nothing writes none
    assert guarded_status_writes(kube) == writes + conflicts
    assert writes + skipped == cycles_a + cycles_b
    print(
        f"\nscenario wall time {time.monotonic() - started:.1f}s; cycles a={cycles_a} b={cycles_b}; "
        f"reconcile p50 {max(d.quantile(0.5) for d in durations) * 1000:.0f} ms, "
        f"max {max(d.max for d in durations) * 1000:.0f} ms; status writes {writes}, idle cycles {skipped}; "
        + ", ".join(f"{what} at {t:.1f}s" for what, t in timeline)
    )


def assert_each_step_once(kube: KubeAPIServer, api: client.ApiClient) -> None:
    weights = candidate_weights(kube)
    assert weights[0] == 0  # as created
    steps = [w for w in weights[1:]]
    assert steps[:-1] == [25, 50, 100], f"each step once, in order: {weights}"
    assert steps[-1] == 0  # promoted: all traffic on the new stable
    # one Event per step: its SetWeights and its notification share the reason (the step's code) and message
    assert len(events_about(api, "% of traffic to")) == 3
    assert not events_about(api, "rolled back")


def assert_promotion_counted(scrape: str) -> None:
    assert "shiftlight_reconcile_duration_seconds_count" in scrape
    promotes = [line for line in scrape.splitlines() if line.startswith('shiftlight_decisions_total{action="Promote",')]
    assert len(promotes) == 1 and promotes[0].endswith(" 1.0"), promotes  # labelled with its reason code
    promoted_effects = [
        line
        for line in scrape.splitlines()
        if line.startswith('shiftlight_effects_total{code="within-slo",effect="Promoted"}')
    ]
    assert promoted_effects == ['shiftlight_effects_total{code="within-slo",effect="Promoted"} 1.0']  # what acting did


def guarded_status_writes(kube: KubeAPIServer) -> int:
    """The operator's status writes of TunedServices, each guarded by the resourceVersion it read."""
    operator_writes = [
        r
        for r in list(kube.api)
        if r.subresource == "status"
        and r.resource is not None
        and r.resource.plural == "tunedservices"
        and isinstance(r.data, list)
        and r.data[-1]["path"] == "/status"
    ]
    assert all(w.data[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": w.data[0]["value"]}
               for w in operator_writes)  # fmt: skip
    return len(operator_writes)


def _rollout_phase(co: client.CustomObjectsApi) -> str:
    items = co.list_namespaced_custom_object(G, V, "prod", "configrollouts")["items"]
    return str(items[-1]["status"]["phase"]) if items else ""


def test_two_replicas_only_the_leader_acts(
    kube: KubeAPIServer,
    api: client.ApiClient,
    operator_api: client.ApiClient,
    settings_for: Callable[[str], OperatorSettings],
) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(route=None))
    settings_a, settings_b = settings_for("replica-a"), settings_for("replica-b")
    backend = SimulatorBackend(settings_a, operator_api)
    with (
        operator(settings_a, operator_api, backend=backend) as a,
        operator(settings_b, operator_api, backend=backend) as b,
    ):
        wait_for("some cycles", lambda: len(a.loop.durations) + len(b.loop.durations) >= 3)
        lease = client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "shiftlight")
        leader, follower = (a, b) if lease.spec.holder_identity == "replica-a" else (b, a)
        assert leader.elector.is_leader() and not follower.elector.is_leader()
        assert len(follower.loop.durations) == 0, "the follower never ran a cycle"
        assert metric(leader.metrics, "shiftlight_leader") == 1 and metric(follower.metrics, "shiftlight_leader") == 0
        before = len(leader.loop.durations)
        leader.stop()  # a clean shutdown releases the lease; the follower takes over
        wait_for("the follower to act", lambda: len(follower.loop.durations) > 0, timeout=20)
        assert len(leader.loop.durations) - before <= 1  # at most the cycle that was in flight
        assert (
            client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "shiftlight").spec.holder_identity
            == follower.elector.identity
        )
