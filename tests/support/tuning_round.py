"""A night's tuning round at 04:30 for the search's stopping rules: the active config, a better and another one, the
round's opening trials and the planner context its next step reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controller.decide import Rules, ScalingRules, TuningRules
from controller.decide.context import PlanContext
from controller.domain import SLO, EngineConfig, LengthDistribution, TargetStatus, TimeWindow, TrafficShape, TrialResult
from controller.domain.phases import Phase
from controller.domain.proposal import Proposal
from controller.domain.status import TuningRound
from tests.support.builders import observed, plan_context, shape, trial

NOW = datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
ACTIVE = EngineConfig(max_num_seqs=256)
BETTER = EngineConfig(max_num_seqs=512)
OTHER = EngineConfig(max_num_batched_tokens=4096)
SHAPE = shape(4.0, 128)
DOCUMENTS = SHAPE.model_copy(update={"prompt_tokens": LengthDistribution(mean=16000), "repetitiveness": 0.8})
RULES = Rules(
    slo=SLO(ttft_seconds=2, tpot_seconds=0.1),
    tuning=TuningRules(max_trials=8, trials_per_cycle=2, min_gain=1.03),
    windows=(NIGHT, DAY),
    scaling=ScalingRules(min_replicas=1, max_replicas=16, headroom=0.25, scale_down_stabilisation_s=900),
)


def measured(config: EngineConfig, goodput: float, shape: TrafficShape = SHAPE) -> TrialResult:
    """A two-minute trial of ``config`` on ``shape`` at ``goodput`` tok/s, every request within the SLO."""
    return trial(config, shape, slo=RULES.slo, goodput=goodput, goodput_rps=shape.arrival_rate_rps, duration_s=120.0)


def trialling(trials: tuple[TrialResult, ...], fleet_concurrency: float = 256.0) -> TargetStatus:
    """The night's round, started half an hour ago on ``SHAPE``, with ``trials`` measured (all opening picks)."""
    round_ = TuningRound(
        id="night-202612010400",
        window="night",
        shape=SHAPE,
        started_at=NOW - timedelta(minutes=30),
        reason="tuning ahead",
        trial_keys=tuple(t.config.key() for t in trials),
        trial_proposers=tuple("baseline" for _ in trials),
        trial_reasons=tuple("opening" for _ in trials),
        fleet_concurrency=fleet_concurrency,
        fleet_rate_rps=8.0,
    )
    return TargetStatus(phase=Phase.TRIALLING, active_config=ACTIVE, replicas=2, trials=trials, tuning=round_)


def context(status: TargetStatus, proposals: tuple[Proposal, ...], rules: Rules = RULES) -> PlanContext:
    """The planner's context at ``NOW`` in the night window, on ``SHAPE``."""
    return plan_context(status, rules, NOW, NIGHT, observation=observed(SHAPE, NOW), proposals=proposals)


OPENING = (measured(ACTIVE, 1000.0), measured(EngineConfig(), 800.0), measured(ACTIVE, 1000.0))
