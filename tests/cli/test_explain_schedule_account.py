"""``shiftctl explain`` shows the schedule's running account against the best static config, and the fall-back to
static after a losing week (code ``schedule-not-paying``)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from controller.cli.shiftctl import render as render
from controller.crd.models import status_to_wire
from controller.domain import EngineConfig, TargetStatus
from controller.domain.status import ScheduleAccount

from .conftest import tuned_service

SINCE = datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
STATIC = EngineConfig(max_num_seqs=512)


def printed(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=400, force_terminal=False, color_system=None).print(renderable, soft_wrap=True)
    return out.getvalue()


def explained(account: ScheduleAccount | None) -> str:
    body = tuned_service("chat")
    body["status"] = status_to_wire(TargetStatus(active_config=STATIC, schedule_account=account))
    return printed(render.explain_text(body))


def test_explain_shows_the_account_and_the_fallback() -> None:
    account = ScheduleAccount(
        since=SINCE,
        updated_at=SINCE,
        realised_gpu_s=120 * 3600.0,
        static_gpu_s=100 * 3600.0,
        static_config=STATIC,
        fallback_config=STATIC,
        fallback_until=SINCE + timedelta(days=7),
        fallback_reason="the schedule is not paying",
    )
    text = explained(account)
    assert "Schedule account:" in text
    assert "120.0 GPU-hours" in text and "100.0" in text
    assert "schedule-not-paying" in text
    assert "Schedule account:" not in explained(None)
