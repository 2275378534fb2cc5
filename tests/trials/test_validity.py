"""Which recorded adherence makes a trial invalid, and the reason codes it names (table-driven, no I/O)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.domain.trial import Percentiles
from controller.trials.loadgen.replay import Adherence
from controller.trials.verdict.validity import (
    IN_FLIGHT_LOW,
    LOOP_STALLED,
    RATE_MISSED,
    SEND_LAG,
    ValidityRules,
    misses,
    reason,
    reason_codes,
)

CLOSED = Adherence(
    mode="closed",
    planned_concurrency=8,
    mean_in_flight=7.99,
    min_in_flight=7.0,
    planned_rate_rps=0.0,
    achieved_rate_rps=0.0,
    send_lag_s=Percentiles(p50=0.001, p95=0.002, p99=0.004),
    max_send_lag_s=0.01,
    loop_stall_s=0.05,
    max_loop_stall_s=0.03,
    client_cpu_s=1.0,
    loop_cpu_s=0.8,
    connections_opened=8,
    steady_s=10.0,
)
OPEN = replace(
    CLOSED, mode="open", planned_concurrency=0, mean_in_flight=3.0, planned_rate_rps=4.0, achieved_rate_rps=4.1
)

CASES = [
    ("closed loop kept", CLOSED, ()),
    ("open loop kept", OPEN, ()),
    ("closed: 90% in flight is enough", replace(CLOSED, mean_in_flight=7.2), ()),
    ("closed: 89% in flight", replace(CLOSED, mean_in_flight=7.1), (IN_FLIGHT_LOW,)),
    ("closed: a 0.25 s stall is allowed", replace(CLOSED, max_loop_stall_s=0.25), ()),
    ("closed: a 1 s stall", replace(CLOSED, max_loop_stall_s=1.0, loop_stall_s=1.2), (LOOP_STALLED,)),
    (
        "closed: starved",
        replace(CLOSED, mean_in_flight=3.0, max_loop_stall_s=1.7, loop_stall_s=9.0),
        (IN_FLIGHT_LOW, LOOP_STALLED),
    ),
    ("open: in-flight is not judged", replace(OPEN, mean_in_flight=0.5), ()),
    ("open: 10% slow is enough", replace(OPEN, achieved_rate_rps=3.6), ()),
    ("open: 15% slow", replace(OPEN, achieved_rate_rps=3.4), (RATE_MISSED,)),
    ("open: 15% fast (a burst after a stall)", replace(OPEN, achieved_rate_rps=4.6), (RATE_MISSED,)),
    ("open: late sends", replace(OPEN, send_lag_s=Percentiles(p50=0.1, p95=0.2, p99=0.4)), (SEND_LAG,)),
    ("closed: a short steady phase is not judged", replace(CLOSED, mean_in_flight=3.5, steady_s=0.1), ()),
    ("open: nor is a short one's rate", replace(OPEN, achieved_rate_rps=2.0, steady_s=0.5), ()),
    (
        "closed: a short run's stall is",
        replace(CLOSED, mean_in_flight=3.5, steady_s=0.5, max_loop_stall_s=0.4),
        (LOOP_STALLED,),
    ),
    ("closed: unknown steady length is judged", replace(CLOSED, mean_in_flight=3.5, steady_s=None), (IN_FLIGHT_LOW,)),
    ("closed: send lag is not judged", replace(CLOSED, send_lag_s=Percentiles(p50=1, p95=1, p99=1)), ()),
]


@pytest.mark.parametrize(("kept", "codes"), [(k, c) for _, k, c in CASES], ids=[n for n, _, _ in CASES])
def test_misses(kept: Adherence, codes: tuple[str, ...]) -> None:
    found = misses(kept)
    assert len(found) == len(codes)
    assert reason_codes(reason(found)) == codes


def test_nothing_recorded_is_not_judged() -> None:
    assert misses(None) == ()


def test_a_reason_says_by_how_much() -> None:
    (only,) = misses(replace(CLOSED, mean_in_flight=4.0))
    assert only.startswith(IN_FLIGHT_LOW) and "4.00 of 8" in only and "50%" in only


def test_the_rules_are_one_place_to_change() -> None:
    stalled = replace(CLOSED, max_loop_stall_s=0.5)
    assert misses(stalled) and not misses(stalled, ValidityRules(max_loop_stall_s=1.0))
