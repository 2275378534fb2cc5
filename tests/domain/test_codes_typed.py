"""Reason codes are typed end to end: actions and effects carry a ``Code`` (or none), and every place a code is
written (status, Events, metric labels, Slack, Grafana tags) still writes the same string."""

from __future__ import annotations

import json
import re

import pytest

from controller.act.effects import Notified, RolledBack, Withheld, with_code
from controller.domain.actions import Notify, Rollback
from controller.domain.codes import (
    INFO,
    Code,
    Layout,
    Mark,
    Severity,
    camel_case,
    code_or_none,
    from_camel_case,
    layout_of,
    mark_of,
)
from controller.domain.status import Reason

KINDS = {"operator", "acting", "observing", "replicas", "tuning", "round", "outcome", "schedule", "rollout", "analysis"}
KINDS |= {"guardrails", "trial-validity"}
#: What Kubernetes takes as a condition's reason (metav1.Condition).
CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


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
        # the operator's refusals and errors keep the condition, Event and metric reasons they always had
        (Code.INVALID_SPEC, "InvalidSpec"),
        (Code.INVALID_POLICY, "InvalidPolicy"),
        (Code.SIMULATOR_UNSUPPORTED, "SimulatorUnsupported"),
        (Code.APPROVAL_REFUSED, "ApprovalRefused"),
        (Code.MIRROR_FAILED, "MirrorFailed"),
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


@pytest.mark.parametrize("code", list(Code))
def test_every_code_has_a_kind_a_severity_a_layout_and_a_mark(code: Code) -> None:
    info = INFO[code]
    assert info.kind in KINDS
    assert isinstance(info.severity, Severity)
    # a layout of its own, or (several notifications carry it) one for each severity and evidence
    layouts = {layout_of(info, severity, evidence) for severity in Severity for evidence in (False, True)}
    assert layouts <= set(Layout)
    if info.layout is not None:
        assert layouts == {info.layout}
    for layout in layouts:
        mark = mark_of(info, layout)
        assert mark is None or isinstance(mark, Mark)
        assert (mark is None) == (layout is Layout.DIGEST)  # only a digest is no decision


def test_the_table_has_exactly_the_codes() -> None:
    assert set(INFO) == set(Code)


@pytest.mark.parametrize("code", list(Code))
def test_the_camel_case_of_every_code_reads_back_as_that_code(code: Code) -> None:
    reason = camel_case(code)
    assert CONDITION_REASON.match(reason), reason
    assert reason == code.event_reason
    assert from_camel_case(reason) is code
    assert code_or_none(code.value) is code


def test_no_two_codes_share_a_camel_case() -> None:
    reasons = [camel_case(code) for code in Code]
    assert len(set(reasons)) == len(reasons)


@pytest.mark.parametrize("text", ["", "SloBreach", "no-such-code", "slo_breach"])
def test_a_spelling_no_code_has_is_no_code(text: str) -> None:
    assert code_or_none(text) is None
    assert from_camel_case(text) is None or text == "SloBreach"


@pytest.mark.parametrize(
    ("code", "severity", "evidence", "layout", "mark"),
    [
        (Code.FROZEN, Severity.WARNING, False, Layout.GENERIC, Mark.FREEZE),
        (Code.DIGEST, Severity.INFO, True, Layout.DIGEST, None),
        (Code.PROMOTED, Severity.INFO, False, Layout.STEP, Mark.PROMOTION),
        (Code.STARTED, Severity.INFO, True, Layout.DECISION, Mark.CONFIG_SWITCH),  # the chosen config
        (Code.STARTED, Severity.INFO, False, Layout.STEP, Mark.ROLLOUT_STEP),  # the rollout's start
        (Code.APPROVAL_REQUIRED, Severity.WARNING, True, Layout.APPROVAL, Mark.APPROVAL),
        (Code.SLO_BREACH, Severity.CRITICAL, False, Layout.ROLLBACK, Mark.ROLLBACK),
        (Code.WITHIN_SLO, Severity.INFO, False, Layout.STEP, Mark.ROLLOUT_STEP),
        (Code.DRY_RUN_WITHHELD, Severity.CRITICAL, False, Layout.GENERIC, Mark.NOTE),  # nothing was done
    ],
)
def test_a_notifications_layout_and_mark_come_from_its_code(
    code: Code, severity: Severity, evidence: bool, layout: Layout, mark: Mark | None
) -> None:
    info = INFO[code]
    assert layout_of(info, severity, evidence) is layout
    assert mark_of(info, layout) == mark
