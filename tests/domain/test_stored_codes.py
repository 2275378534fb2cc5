"""Stored statuses keep loading as codes become typed: an empty code (stored before codes were optional) is no
code; a reason's code this version does not know (written by another version of the operator) reads as none, its
spelling kept in front of the message; a round's unknown stop code reads as ``search-stopped``, its sentence kept.
Nothing stored is lost."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controller.domain.codes import Code
from controller.domain.status import Reason, TargetStatus, TuningRound
from tests.support.builders import shape

NOW = datetime(2026, 5, 4, 12, tzinfo=UTC)


def _round(**extra: Any) -> dict[str, Any]:
    base = {"id": "r-1", "window": "day", "shape": shape(1.0, 2.0).model_dump(mode="json"), "started_at": NOW}
    return base | extra


@pytest.mark.parametrize(
    ("stored", "code", "message"),
    [
        ({"code": "slo-breach", "message": "p95 TTFT over"}, Code.SLO_BREACH, "p95 TTFT over"),
        ({"code": "", "message": "scaled to 3"}, None, "scaled to 3"),
        ({"message": "a sentence stored before reasons had codes"}, None, "a sentence stored before reasons had codes"),
        ({"code": None, "message": "m"}, None, "m"),
        (
            {"code": "warp-drive", "message": "a newer operator's reason"},
            None,
            "[warp-drive] a newer operator's reason",
        ),
        ({"code": "warp-drive", "message": ""}, None, "[warp-drive]"),
    ],
)
def test_a_stored_reason_loads(stored: dict[str, Any], code: Code | None, message: str) -> None:
    reason = Reason.model_validate(stored)
    assert reason.code is code
    assert reason.message == message


def test_a_status_with_an_empty_and_an_unknown_code_loads() -> None:
    stored = {
        "phase": "Trialling",
        "last_reasons": [
            {"code": "", "message": "old"},
            {"code": "warp-drive", "message": "newer"},
            {"code": "trials", "message": "known"},
            "a plain sentence",
        ],
        "tuning": _round(reason="drift", stop_code="warp-stop", stop_reason="the search stopped"),
    }
    status = TargetStatus.model_validate(stored)
    assert [r.code for r in status.last_reasons] == [None, None, Code.TRIALS, None]
    assert [r.message for r in status.last_reasons] == ["old", "[warp-drive] newer", "known", "a plain sentence"]
    assert status.tuning is not None
    assert status.tuning.stop_code is Code.SEARCH_STOPPED and status.tuning.stop_reason == "the search stopped"
    again = TargetStatus.model_validate_json(status.model_dump_json())  # written back: no code, nothing lost
    assert again == status


@pytest.mark.parametrize(
    ("stop_code", "code", "stop_reason"),
    [
        ("search-budget-spent", Code.SEARCH_BUDGET_SPENT, "spent"),
        ("", None, "spent"),
        (None, None, "spent"),
        ("warp-stop", Code.SEARCH_STOPPED, "spent"),  # it did stop: the search is not asked again
    ],
)
def test_a_stored_rounds_stop_code_loads(stop_code: str | None, code: Code | None, stop_reason: str) -> None:
    round_ = TuningRound.model_validate(_round(reason="drift", stop_code=stop_code, stop_reason="spent"))
    assert round_.stop_code is code
    assert round_.stop_reason == stop_reason


def test_a_reason_is_written_with_its_code_or_none() -> None:
    assert Reason(code=Code.SCALE, message="m").model_dump(mode="json") == {"code": "scale", "message": "m"}
    assert Reason(message="m").model_dump(mode="json") == {"code": None, "message": "m"}
