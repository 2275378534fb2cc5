"""Dry run holds on every path that starts a rollout, not only at a round's outcome: the schedule's switch to the
window's config (and its pre-warm ahead of the next window) said "would roll out" and nothing else, where it used to
deploy a candidate and move to RollingOut one cycle after the round's dry-run verdict. Its notification goes out
once, not every cycle of the window. Pure."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, ScalingRules, TuningRules
from controller.domain.actions import DeployCandidate, Notify, Promote, Rollback, Scale, SetWeights
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TimeWindow
from tests.support.builders import observed as observed_at
from tests.support.builders import scheduled, shape, variant

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.05)
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
CHAT = shape(10, 64, 1024, 384)
AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PRODUCTION = (DeployCandidate, SetWeights, Scale, Promote, Rollback)


def rules(*, dry_run: bool) -> Rules:
    return Rules(slo=SLO_, tuning=TuningRules(max_trials=4, min_gain=1.03, dry_run=dry_run), windows=(NIGHT, DAY))


def entry(window: str, config: EngineConfig = MTP1) -> ScheduledConfig:
    return scheduled(window, config, CHAT, reason="measured 2x stock", tuned_at=AT - timedelta(days=1))


def observed(now: datetime) -> Observation:
    stable = variant("stable", 3000)
    return observed_at(CHAT, now, stable)


def cycle(status: TargetStatus, now: datetime, *, dry_run: bool) -> decide.Decision:
    return decide.plan(
        status=status,
        observation=observed(now),
        observe_error=None,
        proposals=(),
        rules=rules(dry_run=dry_run),
        now=now,
    )


@pytest.mark.parametrize(
    ("now", "window", "code"),
    [
        pytest.param(AT, "day", Code.SCHEDULED_SWITCH, id="switch-in-the-window"),
        pytest.param(AT.replace(hour=23, minute=55), "night", Code.PREWARM, id="prewarm-ahead-of-the-next"),
    ],
)
def test_the_schedules_switch_honours_dry_run(now: datetime, window: str, code: Code) -> None:
    schedule = (entry(window),) if window == DAY.name else (entry(DAY.name, STOCK), entry(window))
    status = TargetStatus(active_config=STOCK, schedule=schedule, window=DAY.name)
    # without dry run the schedule starts a rollout on this status
    live = cycle(status, now, dry_run=False)
    assert live.codes == (code,) and live.status.phase is Phase.ROLLING_OUT
    assert any(isinstance(a, DeployCandidate) for a in live.actions)

    d = cycle(status, now, dry_run=True)
    assert d.codes == (Code.DRY_RUN,)
    assert d.status.phase is Phase.OBSERVING and d.status.rollout is None
    assert not any(isinstance(a, PRODUCTION) for a in d.actions)
    (notice,) = d.actions
    assert isinstance(notice, Notify) and notice.code == Code.DRY_RUN
    assert notice.reason.startswith(f"dry-run: would roll out {MTP1.label()} for window '{window}'")
    assert [r.code for r in d.status.last_reasons] == [Code.DRY_RUN, Code.DRY_RUN]

    # the next cycle decides the same and says it again in status, without a second notification
    again = cycle(d.status, now + timedelta(minutes=5), dry_run=True)
    assert again.codes == (Code.DRY_RUN,) and again.actions == ()
    assert again.status.phase is Phase.OBSERVING and again.status.rollout is None


def test_in_dry_run_a_replica_change_is_decided_but_not_recorded_as_made() -> None:
    """The act layer withholds the Scale in dry run; status must not say the replicas changed (a change starts the
    settle time in which production's SLO signals are not trusted)."""
    busy = entry(DAY.name, STOCK).model_copy(update={"capacity_rps": 2.0})
    status = TargetStatus(active_config=STOCK, schedule=(busy,), window=DAY.name, replicas=1)
    scaling = replace(rules(dry_run=True), scaling=ScalingRules(min_replicas=1, max_replicas=16))
    d = decide.plan(status=status, observation=observed(AT), observe_error=None, proposals=(), rules=scaling, now=AT)
    assert [(a.variant, a.replicas > 1) for a in d.actions if isinstance(a, Scale)] == [("stable", True)]
    assert d.status.replicas == 1 and d.status.replicas_changed_at is None
