"""The daily digest: once a day, at the configured hour, a summary of the schedule, its economics and its running
account against the best static config (Slack and Events). Pure."""

from __future__ import annotations

from datetime import datetime

from controller.decide.context import Intent
from controller.decide.rules import Rules
from controller.decide.schedule.account import describe as describe_account
from controller.decide.tuning.economics import schedule_economics
from controller.domain.actions import Notify, Severity
from controller.domain.codes import Code
from controller.domain.status import TargetStatus


def digest(status: TargetStatus, rules: Rules, now: datetime) -> Intent | None:
    """The digest when one is due (code ``digest``), else None."""
    settings = rules.digest
    if (
        settings is None
        or now.hour < settings.hour
        or (status.last_digest_on is not None and status.last_digest_on >= now.date())
    ):
        return None
    lines = [
        (e.window, e.describe())
        for e in schedule_economics(
            status.schedule, windows=rules.windows, gpu_usd_per_hour=settings.gpu_usd_per_hour, api=settings.api
        )
    ]
    configs = [
        (f"config {s.window}", f"{s.config.label()} ({s.gain:.2f}x stock, {s.replicas} replicas)")
        for s in status.schedule
    ]
    summary = (
        f"active {status.active_config.label()}, phase {status.phase.value}; {len(status.schedule)} windows scheduled; "
        f"{len(status.history)} rollouts/rollbacks on record"
    )
    if status.schedule_account is not None:
        lines.append(("schedule account", describe_account(status.schedule_account)))
    note = Notify(Severity.INFO, "Daily digest", summary, tuple(configs + lines))
    return Intent(Code.DIGEST, status.model_copy(update={"last_digest_on": now.date()}), (note,))


__all__ = ["digest"]
