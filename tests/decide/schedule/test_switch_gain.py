"""The scheduled switch's gain: against the active config's own trial on the window's traffic, stock's reference
when the active config is stock, and none at all when the active config was never measured there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import Rules, ScalingRules, TuningRules
from controller.decide.context import PlanContext
from controller.decide.schedule.worth import switch_gain
from controller.domain.actions import RunTrial
from controller.domain.config import STOCK, EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from tests.support import builders
from tests.support.builders import observed, plan_context, scheduled, shape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=7)
MORNING = TimeWindow(name="morning", start_hour=7, end_hour=10)
DAY = TimeWindow(name="day", start_hour=10, end_hour=24)
SLO_ = SLO(ttft_seconds=2, tpot_seconds=0.05)
RULES = Rules(slo=SLO_, tuning=TuningRules(max_trials=6, min_gain=1.03), windows=(NIGHT, MORNING, DAY))
NIGHT_CONFIG = EngineConfig(speculative_method="ngram", num_speculative_tokens=4, max_num_seqs=64)
DAY_CONFIG = EngineConfig(max_num_seqs=512)
CHAT = shape(10.0, 280, 1600, 540)
DOCUMENTS = CHAT.model_copy(update={"prompt_tokens": LengthDistribution(mean=24000), "repetitiveness": 0.85})
QUIET_CHAT = CHAT.model_copy(update={"arrival_rate_rps": 2.0, "concurrency": 56})
MORNING_AT = datetime(2026, 12, 3, 7, 20, tzinfo=UTC)


def trial(config: EngineConfig, goodput: float, shape: TrafficShape, ok: bool = True) -> TrialResult:
    return builders.trial(
        config,
        shape,
        slo=SLO_,
        status=TrialStatus.MEASURED if ok else TrialStatus.INFEASIBLE,
        goodput=goodput if ok else 0.0,
        ttft=(0.4, 0.9, 1.2),
        reason="" if ok else "out of memory",
    )


def morning_entry(config: EngineConfig = STOCK, goodput: float = 3000.0) -> ScheduledConfig:
    return scheduled(
        "morning",
        config,
        CHAT,
        goodput=goodput,
        stock_goodput=3000.0,
        reason="measured",
        tuned_at=MORNING_AT - timedelta(days=1),
    )


def context(active: EngineConfig, trials: tuple[TrialResult, ...]) -> PlanContext:
    status = TargetStatus(window="night", active_config=active, trials=trials, schedule=(morning_entry(),))
    return plan_context(status, RULES, MORNING_AT, MORNING)


@pytest.mark.parametrize(
    ("active", "trials", "entry", "gain"),
    [
        pytest.param(NIGHT_CONFIG, (trial(NIGHT_CONFIG, 2000.0, CHAT),), morning_entry(), 1.5, id="measured-here"),
        pytest.param(STOCK, (), morning_entry(DAY_CONFIG, 3600.0), 1.2, id="stock-reference"),
        pytest.param(NIGHT_CONFIG, (), morning_entry(), None, id="never-measured-here"),
        pytest.param(NIGHT_CONFIG, (trial(NIGHT_CONFIG, 9000.0, DOCUMENTS),), morning_entry(), None, id="other-mix"),
        # measured beside stock on the same mix at another load: 1.2x stock there, the morning's config 1.5x
        pytest.param(
            NIGHT_CONFIG,
            (trial(NIGHT_CONFIG, 1200.0, QUIET_CHAT), trial(STOCK, 1000.0, QUIET_CHAT)),
            morning_entry(DAY_CONFIG, 4500.0),
            1.25,
            id="same-mix-other-load",
        ),
        # on documents beside stock: another mix says nothing of chat
        pytest.param(
            NIGHT_CONFIG,
            (trial(NIGHT_CONFIG, 3000.0, DOCUMENTS), trial(STOCK, 1000.0, DOCUMENTS)),
            morning_entry(DAY_CONFIG, 4500.0),
            None,
            id="other-mix-beside-stock",
        ),
        # measured on the same mix at another load with no stock beside it: taken to do as stock does
        pytest.param(
            NIGHT_CONFIG,
            (trial(NIGHT_CONFIG, 1200.0, QUIET_CHAT),),
            morning_entry(DAY_CONFIG, 3600.0),
            1.2,
            id="no-stock",
        ),
        pytest.param(
            NIGHT_CONFIG, (trial(NIGHT_CONFIG, 0.0, CHAT, ok=False),), morning_entry(), None, id="failed-trial-only"
        ),
    ],
)
def test_switch_gain(
    active: EngineConfig, trials: tuple[TrialResult, ...], entry: ScheduledConfig, gain: float | None
) -> None:
    got = switch_gain(context(active, trials), entry)
    assert got == (pytest.approx(gain) if gain is not None else None)


def test_a_morning_scheduled_on_stock_is_switched_to_from_a_night_config_never_measured_on_chat() -> None:
    """The night's document config runs into the morning's chat. The morning was searched with stock as its best;
    the night's config was never measured on chat. Taking stock's goodput as the active config's made the gain
    1.00x, below min_gain, and the morning stayed on the night's config (which then breached and was scaled up by
    half again, five times, while a new search ran). The night's config is now measured on the morning's chat
    first, and where it fails there the switch goes ahead, claiming no gain; measured on the same chat at another
    load, the night's config is taken to do as stock does, and the morning keeps it."""
    rules = Rules(
        slo=SLO_,
        tuning=TuningRules(max_trials=6, min_gain=1.03),
        windows=(NIGHT, MORNING, DAY),
        scaling=ScalingRules(min_replicas=1, max_replicas=64, headroom=0.25),
    )
    status = TargetStatus(window="morning", active_config=NIGHT_CONFIG, replicas=3, schedule=(morning_entry(),))
    obs = observed(CHAT, MORNING_AT)

    def plan(status: TargetStatus) -> decide.Decision:
        return decide.plan(
            status=status, observation=obs, observe_error=None, proposals=(), rules=rules, now=MORNING_AT
        )

    d = plan(status)
    assert d.codes == ("switch-check",) and d.status.rollout is None
    assert [(a.config, a.shape) for a in d.actions if isinstance(a, RunTrial)] == [(NIGHT_CONFIG, CHAT)]
    # measured on the morning's chat, where it fails: the switch goes ahead, with no gain claimed
    checked = status.model_copy(update={"trials": (trial(NIGHT_CONFIG, 0.0, CHAT, ok=False),)})
    d = plan(checked)
    assert "scheduled-switch" in d.codes, d.codes
    assert d.status.rollout is not None and d.status.rollout.to_config == STOCK
    assert d.status.rollout.expected_gain is None
    # measured on documents only: still nothing about chat, so it is measured on chat first
    on_documents = status.model_copy(update={"trials": (trial(NIGHT_CONFIG, 9000.0, DOCUMENTS),)})
    assert plan(on_documents).codes == ("switch-check",)
    # measured on chat at a quieter load: like stock here, nothing to gain
    on_chat = status.model_copy(update={"trials": (trial(NIGHT_CONFIG, 1200.0, QUIET_CHAT),)})
    d = plan(on_chat)
    assert "scheduled-switch" not in d.codes and d.status.rollout is None
    # a blocked morning config is not switched to
    blocked = status.model_copy(update={"blocked_configs": (STOCK.key(),)})
    assert "scheduled-switch" not in plan(blocked).codes
