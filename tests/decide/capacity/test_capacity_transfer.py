"""A capacity probed on one length mix sizes the replicas for a nearby mix scaled by the tokens a request carries:
the dense fleet's stock probed at 27.5 req/s per replica on the morning's 1,200-token requests was applied to the
evening's 1,470-token ones and the fleet scaled down to one replica at 21 req/s, which breached the SLO with 8 %
errors. Never scaled up for a lighter mix. Pure, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.decide import Rules, ScalingRules
from controller.decide.capacity import scaling
from controller.decide.context import PlanContext
from controller.domain.actions import Scale
from controller.domain.config import EngineConfig
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from tests.support.builders import observed as observed_at
from tests.support.builders import plan_context, scheduled
from tests.support.builders import shape as traffic

DAY = TimeWindow(name="day", start_hour=0, end_hour=24)
CONFIG = EngineConfig(max_num_seqs=512)
RULES = Rules(
    windows=(DAY,),
    scaling=ScalingRules(min_replicas=1, max_replicas=16, headroom=0.25, scale_down_stabilisation_s=0, lead_s=0),
)
NOW = datetime(2026, 12, 5, 18, 50, tzinfo=UTC)


def shape(rate: float, prompt: float, output: float = 516) -> TrafficShape:
    return traffic(rate, 24 * rate, prompt, output)


@pytest.mark.parametrize(
    ("probed", "observed", "expected"),
    [
        (shape(1, 688), shape(1, 688), 27.5),  # the probed mix itself
        (shape(1, 688), shape(1, 945), 27.5 * (688 + 516) / (945 + 516)),  # longer prompts: fewer requests
        (shape(1, 688), shape(1, 688, 1032), 27.5 * (688 + 516) / (688 + 1032)),  # longer answers
        (shape(1, 688), shape(1, 344), 27.5),  # a lighter mix: never more than probed
        (shape(1, 688), shape(1, 690), 27.5),  # two more prompt tokens: the probed mix
    ],
)
def test_transferred(probed: TrafficShape, observed: TrafficShape, expected: float) -> None:
    assert scaling.transferred(27.5, probed, observed) == pytest.approx(expected)


def context(observed: TrafficShape, replicas: int) -> PlanContext:
    entry = scheduled(
        "day", CONFIG, shape(20, 688), goodput=9000, stock_goodput=9000, reason="measured", capacity_rps=27.5
    )
    status = TargetStatus(active_config=CONFIG, window="day", replicas=replicas, schedule=(entry,))
    obs = observed_at(observed, NOW)
    return plan_context(status, RULES, NOW, DAY, observation=obs)


@pytest.mark.parametrize(
    ("observed", "replicas"),
    [
        # 21 req/s x 1.25 = 26.3 against 27.5: one replica on the probed mix
        (shape(21, 688), 1),
        # the same rate of 945-token prompts: 26.3 against 22.6 per replica, two
        (shape(21, 945), 2),
        # shorter prompts do not stretch the probed capacity: 23 x 1.25 = 28.8 > 27.5, still two
        (shape(23, 344), 2),
    ],
)
def test_replicas_for_a_nearby_mix(observed: TrafficShape, replicas: int) -> None:
    intent = scaling.scale(context(observed, replicas=2))
    wanted = next((a.replicas for a in intent.actions if isinstance(a, Scale)), 2)
    assert wanted == replicas, intent.notes
