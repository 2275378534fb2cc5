"""Every condition reason the operator writes is a code in CamelCase: ``Ready`` says the last code the last cycle
gave (``slo-breach`` -> ``SloBreach``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.adapters.kube.status import Refusal, conditions_for, ready_reason, refusal_conditions
from controller.domain.codes import Code, from_camel_case
from controller.domain.phases import Phase
from controller.domain.status import Reason, TargetStatus

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def said(*codes: Code | None, phase: Phase = Phase.OBSERVING) -> TargetStatus:
    reasons = tuple(Reason(code=c, message=f"reason {i}") for i, c in enumerate(codes))
    return TargetStatus(phase=phase, last_reasons=reasons)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (said(Code.SCALE, Code.SLO_BREACH), "SloBreach"),
        (said(Code.TRIALS, phase=Phase.TRIALLING), "Trials"),
        (said(Code.METRICS_UNAVAILABLE, phase=Phase.FROZEN), "MetricsUnavailable"),
        (said(Code.ROLLOUT_STEP, None), "RolloutStep"),  # the last reason that has a code
        (said(phase=Phase.ROLLING_OUT), "RollingOut"),  # nothing said yet (before the first cycle): the phase
        (said(None, phase=Phase.OBSERVING), "Observing"),  # reasons stored before they had codes
    ],
)
def test_the_ready_reason_is_the_last_code_in_camel_case(status: TargetStatus, reason: str) -> None:
    assert ready_reason(status) == reason
    (ready,) = [c for c in conditions_for(status, generation=1, now=NOW) if c.type == "Ready"]
    assert ready.reason == reason
    assert ready.status == ("False" if status.phase is Phase.FROZEN else "True")


@pytest.mark.parametrize("phase", list(Phase))
def test_every_condition_reason_is_a_code(phase: Phase) -> None:
    conditions = conditions_for(said(Code.STEP, phase=phase), generation=1, now=NOW)
    assert all(from_camel_case(c.reason) is not None for c in conditions), [c.reason for c in conditions]
    waiting = {c.type: c.reason for c in conditions}["AwaitingApproval"]
    assert from_camel_case(waiting) is (
        Code.APPROVAL_REQUIRED if phase is Phase.AWAITING_APPROVAL else Code.NO_APPROVAL_PENDING
    )


def test_a_refusals_conditions_carry_its_code() -> None:
    refusal = Refusal(Code.INVALID_POLICY.event_reason, "policy.preset: no such preset")
    conditions = refusal_conditions(refusal, generation=2, now=NOW)
    assert {(c.type, c.status, from_camel_case(c.reason)) for c in conditions} == {
        ("Ready", "False", Code.INVALID_POLICY),
        ("Accepted", "False", Code.INVALID_POLICY),
    }
