"""Production capacity at the SLO wins over a probe that disagrees: when the stable variant served more
requests/s per replica within the SLO than its probe measured, the capacity is raised to what production carried
(code ``capacity-raised``) and the replicas are sized on it; and the fleet is never sized below what the requests
in flight need at the streams the probe held. Table-driven, on the planner."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from controller.domain import LengthDistribution, Observation, TargetStatus, TrafficShape
from controller.domain.actions import Scale
from controller.domain.codes import Code
from controller.domain.rollout import RolloutState
from tests.support.builders import variant
from tests.support.planner import MTP1, NOON, SCALING, SHAPE, observation, plan, probed_day


def serving(
    *,
    requests: int = 500,
    ttft: float = 0.8,
    tpot: float = 0.03,
    errors: int = 0,
    shape: TrafficShape = SHAPE,
    candidate: bool = False,
) -> Observation:
    """20 req/s (the shape's) served by the stable variant with these latencies at p95 (the SLO's percentile)."""
    stats = {"stable": variant("stable", requests, ttft=ttft, tpot=tpot, good_requests=None, errors=errors)}
    if candidate:
        stats["candidate"] = variant("candidate", 50, ttft=ttft, tpot=tpot, good_requests=None)
    return observation(shape).model_copy(update={"variants": stats})


@pytest.mark.parametrize(
    ("replicas", "probed", "obs", "raised"),
    [
        # 20 req/s on 2 replicas within the SLO: 10 req/s each, above the probed 6
        (2, 6.0, serving(), 10.0),
        (2, 12.0, serving(), None),  # production stayed below the probe: nothing to learn
        (2, 6.0, serving(ttft=2.5), None),  # TTFT p95 over the 2 s SLO: no evidence of capacity
        (2, 6.0, serving(tpot=0.2), None),  # TPOT over its bound
        (2, 6.0, serving(errors=50), None),  # 10 % errors
        (2, 6.0, serving(requests=20), None),  # too few requests to read a percentile
        (2, 6.0, serving(candidate=True), None),  # a candidate beside it carries part of the load
        # lighter requests than the probed mix: a rate held on them says nothing of the probed mix
        (2, 6.0, serving(shape=SHAPE.model_copy(update={"output_tokens": LengthDistribution(mean=128)})), None),
    ],
)
def test_production_raises_a_probed_capacity_it_exceeded_within_the_slo(
    replicas: int, probed: float, obs: Observation, raised: float | None
) -> None:
    status = TargetStatus(window="day", active_config=MTP1, replicas=replicas, schedule=(probed_day(probed),))
    d = plan(status, observation=obs, rules=SCALING)
    entry = d.status.schedule_for("day")
    assert entry is not None
    reasons = [r.code for r in d.status.last_reasons]
    if raised is None:
        assert entry.capacity_rps == probed
        assert Code.CAPACITY_RAISED not in reasons
    else:
        assert entry.capacity_rps == pytest.approx(raised)
        assert Code.CAPACITY_RAISED in reasons


def test_the_raised_capacity_sizes_the_fleet() -> None:
    """3 replicas serve 20 req/s within the SLO (6.67 each) where the probe said 6: the capacity becomes 6.67 and
    the fleet 20 x 1.25 / 6.67 = 3.75 -> 4, where the probe alone sizes it 20 x 1.25 / 6 = 4.2 -> 5."""
    status = TargetStatus(window="day", active_config=MTP1, replicas=3, schedule=(probed_day(6.0),))
    d = plan(status, observation=serving(), rules=SCALING)
    assert [a.replicas for a in d.actions if isinstance(a, Scale)] == [4]
    no_evidence = plan(status, observation=serving(requests=20), rules=SCALING)
    assert [a.replicas for a in no_evidence.actions if isinstance(a, Scale)] == [5]


def test_replicas_still_settling_are_no_evidence() -> None:
    obs = serving()
    rules = replace(SCALING, replica_settle_s=600.0)
    status = TargetStatus(
        window="day",
        active_config=MTP1,
        replicas=2,
        schedule=(probed_day(6.0),),
        replicas_changed_at=obs.start - timedelta(minutes=5),
    )
    d = plan(status, observation=obs, rules=rules)
    entry = d.status.schedule_for("day")
    assert entry is not None and entry.capacity_rps == 6.0


def test_no_raise_while_a_rollout_runs() -> None:
    rollout = RolloutState(
        id="r",
        from_config=MTP1,
        to_config=MTP1.model_copy(update={"max_num_seqs": 64}),
        steps=(10, 100),
        started_at=NOON - timedelta(minutes=10),
    )
    status = TargetStatus(window="day", active_config=MTP1, replicas=2, schedule=(probed_day(6.0),), rollout=rollout)
    d = plan(status, observation=serving(), rules=SCALING)
    entry = d.status.schedule_for("day")
    assert entry is not None and entry.capacity_rps == 6.0


@pytest.mark.parametrize(
    ("in_flight", "replicas"),
    [
        (40.0, 1),  # the arrivals' 5 req/s and their streams both fit on one replica
        # the night's long generations still in flight: 300 streams at 100 a replica with headroom need 4
        (300.0, 4),
    ],
)
def test_the_fleet_is_never_sized_below_the_requests_in_flight(in_flight: float, replicas: int) -> None:
    probed = probed_day(10.0).model_copy(update={"capacity_concurrency": 100.0})
    status = TargetStatus(window="day", active_config=MTP1, replicas=4, schedule=(probed,))
    light = SHAPE.model_copy(update={"arrival_rate_rps": 5.0, "concurrency": in_flight})
    d = plan(status, observation=observation(light), rules=SCALING)
    scaled_to = [a.replicas for a in d.actions if isinstance(a, Scale)]
    assert scaled_to == ([] if replicas == 4 else [replicas])
