"""Reason codes are typed end to end: actions and effects carry a ``Code`` (or none), and every place a code is
written (status, Events, metric labels, Slack, Grafana tags) still writes the same string."""

from __future__ import annotations

import json

import pytest

from controller.act.effects import Notified, RolledBack, Withheld, with_code
from controller.domain.actions import Notify, Rollback, Severity
from controller.domain.codes import Code
from controller.domain.status import Reason


@pytest.mark.parametrize("code", list(Code))
def test_a_code_is_written_as_its_string(code: Code) -> None:
    assert str(code) == code.value
    assert f"{code}" == code.value
    assert code == code.value  # compares equal to the string it always was
    dumped = json.loads(Reason(code=code, message="m").model_dump_json())
    assert dumped["code"] == code.value


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (Code.SLO_BREACH, "SloBreach"),
        (Code.ROLLOUT_STEP, "RolloutStep"),
        (Code.DRY_RUN_WITHHELD, "DryRunWithheld"),
        (Code.SCALE, "Scale"),
    ],
)
def test_the_event_reason_is_the_code_in_camel_case(code: Code, reason: str) -> None:
    assert code.event_reason == reason


def test_actions_and_effects_have_no_code_until_given_one() -> None:
    assert Rollback("r").code is None
    assert Notify(Severity.INFO, "t", "r").code is None
    assert RolledBack().code is None


def test_an_effect_takes_its_actions_code_and_keeps_its_own() -> None:
    assert with_code(RolledBack(), Code.SLO_BREACH) == RolledBack(Code.SLO_BREACH)
    assert with_code(RolledBack(Code.ABORTED), Code.SLO_BREACH).code is Code.ABORTED
    assert with_code(Notified("t"), None).code is None
    withheld = Withheld("Promote", "would promote", Code.DRY_RUN_WITHHELD)
    assert with_code(withheld, Code.WITHIN_SLO) is withheld
