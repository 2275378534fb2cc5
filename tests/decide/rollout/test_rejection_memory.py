"""A rejection is a decision with memory: ``shiftctl reject`` is recorded in status (who, when, the config and the
window, the window's traffic then, the comment, the rollout), and the config is not proposed for that window again
until its traffic drifts from that shape or the policy's ``rollout.rejection_memory_seconds`` passes. Other configs,
and other windows, are not held back. Pure, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, TuningRules
from controller.domain.actions import DeployCandidate, Notify, RequestApproval, Rollback
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase
from controller.domain.rollout import Approval, RolloutState
from controller.domain.slo import SLO
from controller.domain.status import Rejection, ScheduledConfig, TargetStatus, TuningRound
from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.domain.trial import TrialResult
from controller.policy import Policy
from tests.support import builders
from tests.support.builders import observed as observed_at
from tests.support.builders import scheduled, shape, variant

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.05)
RULES = Rules(slo=SLO_, tuning=TuningRules(max_trials=2, min_gain=1.03, approval="manual"), windows=(NIGHT, DAY))
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
SEQS128 = EngineConfig(max_num_seqs=128)
CHAT = shape(10, 64, 1024, 384)
DOCUMENTS = CHAT.model_copy(update={"prompt_tokens": LengthDistribution(mean=8000)})
AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def entry(config: EngineConfig = MTP1, shape: TrafficShape = CHAT) -> ScheduledConfig:
    return scheduled("day", config, shape, reason="measured 2x stock", tuned_at=AT - timedelta(days=1))


def rejection(
    config: EngineConfig = MTP1, *, window: str = "day", ago: timedelta = timedelta(hours=1), shape: TrafficShape = CHAT
) -> Rejection:
    return Rejection(
        by="alice",
        at=AT - ago,
        config_key=config.key(),
        config_label=config.label(),
        window=window,
        shape=shape,
        comment="not before the launch",
        rollout_id="day-1",
    )


def observed(now: datetime, shape: TrafficShape = CHAT) -> Observation:
    stable = variant("stable", 3000)
    return observed_at(shape, now, stable)


def cycle(status: TargetStatus, *, rules: Rules = RULES, now: datetime = AT) -> decide.Decision:
    return decide.plan(status=status, observation=observed(now), observe_error=None, proposals=(), rules=rules, now=now)


@pytest.mark.parametrize(
    ("entry_", "rejections", "asks_again"),
    [
        pytest.param(entry(), (rejection(),), False, id="same-config-same-window-suppressed"),
        pytest.param(entry(), (rejection(SEQS128),), True, id="another-config-rejected-this-one-allowed"),
        pytest.param(entry(), (rejection(window="night"),), True, id="rejected-for-another-window-allowed"),
        pytest.param(entry(shape=CHAT), (rejection(shape=DOCUMENTS),), True, id="traffic-drifted-re-allows"),
        pytest.param(entry(), (rejection(ago=timedelta(days=7, minutes=1)),), True, id="memory-expired-re-allows"),
        pytest.param(entry(), (rejection(ago=timedelta(days=6, hours=23)),), False, id="memory-not-yet-expired"),
    ],
)
def test_the_schedule_does_not_ask_again_for_a_rejected_config(
    entry_: ScheduledConfig, rejections: tuple[Rejection, ...], asks_again: bool
) -> None:
    status = TargetStatus(active_config=STOCK, schedule=(entry_,), window="day", rejections=rejections)
    d = cycle(status)
    if asks_again:
        assert d.codes == (Code.SCHEDULED_SWITCH,) and d.status.phase is Phase.AWAITING_APPROVAL
        assert any(isinstance(a, RequestApproval) for a in d.actions)
    else:
        assert d.codes == (Code.REJECTION_KEPT,) and d.status.phase is Phase.OBSERVING
        assert d.actions == () and d.status.rollout is None
        kept = [r.message for r in d.status.last_reasons if r.code == Code.REJECTION_KEPT]
        assert any("rejected for window 'day' by alice" in m for m in kept), kept


@pytest.mark.parametrize(
    ("memory_s", "asks_again"),
    [pytest.param(3600.0, True, id="one-hour-memory-has-passed"), pytest.param(None, False, id="default-seven-days")],
)
def test_the_policys_rejection_memory_sets_how_long_a_rejection_holds(memory_s: float | None, asks_again: bool) -> None:
    rollout = {} if memory_s is None else {"rejection_memory_seconds": memory_s}
    policy = Policy.model_validate({"approval": "manual", "rollout": rollout})
    rules = Rules.from_policy(policy, (NIGHT, DAY))
    assert rules.rollout.rejection_memory_s == (memory_s if memory_s is not None else 7 * 86400)
    status = TargetStatus(
        active_config=STOCK, schedule=(entry(),), window="day", rejections=(rejection(ago=timedelta(hours=2)),)
    )
    d = cycle(status, rules=rules)
    assert (Code.REJECTION_KEPT not in d.codes) is asks_again
    assert any(isinstance(a, DeployCandidate) for a in d.actions) is asks_again


def test_a_rejection_is_recorded_with_who_when_the_config_the_window_and_its_traffic() -> None:
    rollout = RolloutState(
        id="day-1",
        from_config=STOCK,
        to_config=MTP1,
        steps=(5, 25, 50, 100),
        started_at=AT - timedelta(minutes=10),
        window="day",
        approvals=(Approval(by="alice", at=AT, step=0, decision="rejected", comment="not before the launch"),),
    )
    status = TargetStatus(
        phase=Phase.AWAITING_APPROVAL, active_config=STOCK, schedule=(entry(),), window="day", rollout=rollout
    )
    d = cycle(status)
    assert d.codes == (Code.REJECTED,) and d.status.phase is Phase.OBSERVING and d.status.rollout is None
    assert d.status.rejections == (rejection(ago=timedelta(0)),)
    assert any(
        line.endswith("rejected mtp1 for window 'day' by alice (rollout day-1): not before the launch")
        for line in d.status.history
    ), d.status.history
    # the candidate warmed up for the rejected rollout is retired, and people are told
    assert [type(a) for a in d.actions] == [Rollback, Notify]
    # the window's schedule goes back to the config production runs; one cycle later nothing is proposed again
    assert d.status.schedule_for("day").config == STOCK  # type: ignore[union-attr]
    later = cycle(d.status, now=AT + timedelta(minutes=1))
    assert later.codes == (Code.OBSERVING,) and later.actions == () and later.status.phase is Phase.OBSERVING


def measured(config: EngineConfig, goodput: float) -> TrialResult:
    return builders.trial(
        config, CHAT, slo=SLO_, goodput=goodput, ttft=(0.2, 0.5, 0.8), completed=200, goodput_rps=CHAT.arrival_rate_rps
    )


@pytest.mark.parametrize(
    ("rejected", "shape", "chosen"),
    [
        pytest.param(MTP1, CHAT, SEQS128, id="the-rejected-best-gives-way-to-the-next"),
        pytest.param(MTP1, DOCUMENTS, MTP1, id="rejected-on-other-traffic-still-chosen"),
        pytest.param(None, CHAT, MTP1, id="nothing-rejected"),
    ],
)
def test_a_round_does_not_choose_a_config_rejected_for_its_window(
    rejected: EngineConfig | None, shape: TrafficShape, chosen: EngineConfig
) -> None:
    trials = (measured(STOCK, 1000), measured(MTP1, 2000), measured(SEQS128, 1500))
    round_ = TuningRound(
        id="day-r2",
        window="day",
        shape=CHAT,
        started_at=AT - timedelta(minutes=30),
        reason="drift",
        trial_keys=tuple(t.config.key() for t in trials),
        trial_proposers=("baseline", "optimizer", "optimizer"),
        trial_reasons=("baseline", "x", "y"),
    )
    rejections = () if rejected is None else (rejection(rejected, shape=shape),)
    status = TargetStatus(
        phase=Phase.TRIALLING, window="day", trials=trials, tuning=round_, rejections=rejections, replicas=1
    )
    d = cycle(status)
    assert d.status.schedule_for("day") is not None
    assert d.status.schedule_for("day").config == chosen  # type: ignore[union-attr]
    assert d.status.rollout is not None and d.status.rollout.to_config == chosen
