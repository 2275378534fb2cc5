"""In-memory adapters: they satisfy the ports, keep state and record every call."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.adapters.notify.recording import NopNotifier, RecordingNotifier
from controller.clock import FakeClock
from controller.domain import STOCK, EngineConfig, Notify, Severity, TargetRef
from controller.errors import InvalidInput, NotFound
from controller.ports import Cluster, Notifier, TrafficRouter
from controller.testing.memory import InMemoryCluster, InMemoryRouter

T = TargetRef("llm", "workhorse", "nemotron")
OTHER = TargetRef("llm", "other", "llama")
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)


def test_adapters_satisfy_ports() -> None:
    assert isinstance(InMemoryRouter(), TrafficRouter)
    assert isinstance(InMemoryCluster(), Cluster)
    assert isinstance(RecordingNotifier(), Notifier)
    assert isinstance(NopNotifier(), Notifier)


def test_router_keeps_weight_per_target_and_history() -> None:
    router = InMemoryRouter()
    assert router.get_weight(T) == 0
    router.set_weight(T, 25)
    router.set_weight(T, 50)
    assert router.get_weight(T) == 50
    assert router.get_weight(OTHER) == 0
    assert router.history == [(T, 25), (T, 50)]


@pytest.mark.parametrize("bad", [-1, 101, 12.5, True, "50"])
def test_router_rejects_out_of_range_weights(bad: object) -> None:
    router = InMemoryRouter()
    router.set_weight(T, 10)
    with pytest.raises(InvalidInput, match="candidate_weight"):
        router.set_weight(T, bad)  # type: ignore[arg-type]
    assert router.get_weight(T) == 10
    assert router.history == [(T, 10)]


@pytest.mark.parametrize("edge", [0, 100])
def test_router_accepts_edges(edge: int) -> None:
    router = InMemoryRouter()
    router.set_weight(T, edge)
    assert router.get_weight(T) == edge


def test_cluster_records_calls_and_state() -> None:
    clock = FakeClock(datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
    cluster = InMemoryCluster(clock=clock)
    cluster.deploy(T, "stable", STOCK, 2)
    cluster.deploy(T, "candidate", MTP1, 1)
    cluster.scale(T, "candidate", 2)
    clock.advance(30)
    cluster.record_event(T, "RolloutStep", "candidate at 25%")
    cluster.retire(T, "candidate")

    assert cluster.ops() == [
        "deploy stable x2",
        "deploy candidate x1",
        "scale candidate x2",
        "event RolloutStep: candidate at 25%",
        "retire candidate",
    ]
    stable = cluster.variant(T, "stable")
    assert stable is not None and stable.config == STOCK and stable.replicas == 2
    assert cluster.variant(T, "candidate") is None
    assert cluster.variant(OTHER, "stable") is None
    (event,) = cluster.events
    assert event.reason == "RolloutStep" and not event.warning
    assert event.at == datetime(2026, 11, 30, 9, 0, 30, tzinfo=UTC)


def test_cluster_promote_swaps_variants_and_routes_everything_to_stable() -> None:
    router = InMemoryRouter()
    cluster = InMemoryCluster(router=router)
    cluster.deploy(T, "stable", STOCK, 2)
    cluster.deploy(T, "candidate", MTP1, 2)
    router.set_weight(T, 50)
    cluster.promote(T)
    stable = cluster.variant(T, "stable")
    assert stable is not None and stable.config == MTP1 and stable.replicas == 2
    assert cluster.variant(T, "candidate") is None
    assert router.get_weight(T) == 0
    assert cluster.ops()[-1] == "promote candidate"
    with pytest.raises(NotFound):
        cluster.promote(T)


def test_cluster_ready_replicas() -> None:
    cluster = InMemoryCluster()
    assert cluster.ready_replicas(T, "candidate") == 0
    cluster.deploy(T, "candidate", MTP1, 3)
    assert cluster.ready_replicas(T, "candidate") == 3
    cluster.starting.add("candidate")
    assert cluster.ready_replicas(T, "candidate") == 0


def test_cluster_errors() -> None:
    cluster = InMemoryCluster()
    with pytest.raises(NotFound):
        cluster.scale(T, "candidate", 1)
    with pytest.raises(InvalidInput, match="variant"):
        cluster.deploy(T, "canary", STOCK, 1)
    with pytest.raises(InvalidInput, match="replicas"):
        cluster.deploy(T, "stable", STOCK, -1)
    assert cluster.variants == {}
    cluster.retire(T, "candidate")  # already gone: not an error
    assert cluster.ops()[-1] == "retire candidate"


def test_cluster_event_without_clock_has_no_timestamp() -> None:
    cluster = InMemoryCluster()
    cluster.record_event(T, "Frozen", "metrics missing", warning=True)
    assert cluster.events[0].at is None and cluster.events[0].warning


def test_recording_notifier_stores_pairs_in_order() -> None:
    notifier = RecordingNotifier()
    a = Notify(Severity.INFO, "Rollout started", "candidate mtp1 beats stock by 1.9x")
    b = Notify(Severity.CRITICAL, "Rolled back", "candidate TTFT p95 above SLO")
    notifier.post(T, a)
    notifier.post(OTHER, b)
    assert notifier.posted == [(T, a), (OTHER, b)]
    assert notifier.titles() == ["Rollout started", "Rolled back"]


def test_nop_notifier_drops_everything() -> None:
    NopNotifier().post(T, Notify(Severity.INFO, "x", "y"))
