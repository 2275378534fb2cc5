"""What the advisor is asked for: nothing outside a trialling round or once the round's trial budget is spent;
else the round's shape, the SLO and the active config, and at most the budget left, capped per cycle."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.decide import Rules, TuningRules, advisor_context
from controller.domain import SLO, STOCK
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.status import TargetStatus, TuningRound
from tests.support.builders import shape

TARGET = TargetRef(namespace="prod", name="chat", model="dense-8b")
SHAPE = shape(4.0, 16.0, 512, 128)
RULES = Rules(slo=SLO(ttft_seconds=1.5), tuning=TuningRules(max_trials=5, trials_per_cycle=2))


def trialling(ran: int) -> TargetStatus:
    round_ = TuningRound(
        id="r1", window="all-day", shape=SHAPE, started_at=datetime(2026, 1, 1, tzinfo=UTC), reason="test",
        trial_keys=(STOCK.key(),) * ran,
    )  # fmt: skip
    return TargetStatus(phase=Phase.TRIALLING, active_config=STOCK, tuning=round_)


@pytest.mark.parametrize(("ran", "wanted"), [(0, 2), (3, 2), (4, 1)])
def test_the_advisor_is_asked_for_the_budget_left_at_most_per_cycle(ran: int, wanted: int) -> None:
    ctx = advisor_context(TARGET, trialling(ran), rules=RULES)
    assert ctx is not None
    assert ctx.max_proposals == wanted
    assert (ctx.target, ctx.shape, ctx.slo, ctx.active) == (TARGET, SHAPE, RULES.slo, STOCK)


def test_nothing_is_asked_once_the_rounds_budget_is_spent() -> None:
    assert advisor_context(TARGET, trialling(5), rules=RULES) is None
    assert advisor_context(TARGET, trialling(6), rules=RULES) is None


def test_nothing_is_asked_outside_a_trialling_round() -> None:
    assert advisor_context(TARGET, TargetStatus(phase=Phase.OBSERVING, active_config=STOCK), rules=RULES) is None
    untuned = TargetStatus(phase=Phase.TRIALLING, active_config=STOCK)
    assert advisor_context(TARGET, untuned, rules=RULES) is None
