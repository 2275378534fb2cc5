"""Which recorded adherence makes a trial invalid, and the codes of its misses, as data (table-driven, no I/O)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.domain.codes import Code
from controller.domain.slo import SLO
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.trials.loadgen.replay import Adherence
from controller.trials.verdict.validity import (
    IN_FLIGHT_LOW,
    LOOP_STALLED,
    RATE_MISSED,
    SEND_LAG,
    Miss,
    ValidityRules,
    codes,
    misses,
    reason,
)
from tests.support.builders import shape

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


@pytest.mark.parametrize(("kept", "expected"), [(k, c) for _, k, c in CASES], ids=[n for n, _, _ in CASES])
def test_misses(kept: Adherence, expected: tuple[Code, ...]) -> None:
    found = misses(kept)
    assert tuple(m.code for m in found) == expected
    assert codes(found) == expected
    for miss in found:  # people read each as ``<code>: <detail>``
        assert str(miss) == f"{miss.code}: {miss.detail}" and str(miss) in reason(found)


def test_nothing_recorded_is_not_judged() -> None:
    assert misses(None) == ()


def test_a_reason_says_by_how_much() -> None:
    (only,) = misses(replace(CLOSED, mean_in_flight=4.0))
    assert only.code is Code.IN_FLIGHT_LOW and "4.00 of 8" in only.detail and "50%" in only.detail


def test_the_rules_are_one_place_to_change() -> None:
    stalled = replace(CLOSED, max_loop_stall_s=0.5)
    assert misses(stalled) and not misses(stalled, ValidityRules(max_loop_stall_s=1.0))


def test_a_miss_is_data_with_a_miss_code() -> None:
    miss = Miss(Code.SEND_LAG, "late")
    with pytest.raises(AttributeError):
        miss.code = Code.LOOP_STALLED  # type: ignore[misc]  # frozen
    with pytest.raises(ValueError, match="no code of a missed plan"):
        Miss(Code.SLO_BREACH, "not a miss")


def test_each_code_is_listed_once_in_order() -> None:
    found = (Miss(LOOP_STALLED, "a"), Miss(IN_FLIGHT_LOW, "b"), Miss(LOOP_STALLED, "c"))
    assert codes(found) == (LOOP_STALLED, IN_FLIGHT_LOW)


def _invalid(**extra: object) -> TrialResult:
    found = misses(replace(CLOSED, mean_in_flight=3.0, max_loop_stall_s=1.7, loop_stall_s=9.0))
    return TrialResult.model_validate(
        {
            "config": {},
            "shape": shape(1.0, 2.0).model_dump(),
            "slo": SLO().model_dump(),
            "status": TrialStatus.INVALID,
            "reason": reason(found),
            "invalid_codes": codes(found),
        }
        | extra
    )


def test_an_invalid_trial_carries_its_miss_codes_as_data() -> None:
    result = _invalid()
    assert result.invalid_codes == (IN_FLIGHT_LOW, LOOP_STALLED)
    assert all(isinstance(c, Code) for c in result.invalid_codes)
    stored = TrialResult.model_validate_json(result.model_dump_json())  # as the CR status keeps it
    assert stored.invalid_codes == (IN_FLIGHT_LOW, LOOP_STALLED)


def test_a_stored_miss_code_this_version_does_not_know_is_left_out() -> None:
    result = _invalid(invalid_codes=["loop-stalled", "queue-overflowed"])
    assert result.invalid_codes == (LOOP_STALLED,)
    assert "in-flight-low" in result.reason  # the sentence is kept whole
