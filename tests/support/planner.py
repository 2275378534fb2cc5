"""The planner's test setting: a night and a day window, 20 req/s of 512/512 tokens at noon, stock against the MTP
configs, and one ``plan`` call with defaults for what a test does not vary."""

from __future__ import annotations

from datetime import UTC, datetime

from controller import decide
from controller.decide import Rules, ScalingRules, TuningRules
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.proposal import Proposal
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult
from tests.support.builders import observed, scheduled, shape, trial

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
MTP3 = EngineConfig(speculative_method="mtp", num_speculative_tokens=3)
SHAPE = shape(20, 256)
RULES = Rules(slo=SLO(ttft_seconds=2, tpot_seconds=0.1), tuning=TuningRules(max_trials=4), windows=(NIGHT, DAY))
SCALING = Rules(
    slo=RULES.slo,
    tuning=TuningRules(max_trials=3),
    windows=RULES.windows,
    scaling=ScalingRules(min_replicas=1, max_replicas=8, headroom=0.25, scale_down_stabilisation_s=0),
)


def observation(shape: TrafficShape = SHAPE) -> Observation:
    """The five minutes up to noon, on ``shape``, with no variant signals."""
    return observed(shape, NOON)


def measured(config: EngineConfig, goodput: float, shape: TrafficShape, ttft: float = 0.5) -> TrialResult:
    """A trial of ``config`` on ``shape`` at ``goodput`` tok/s, TTFT p95 ``ttft`` s."""
    return trial(config, shape, slo=RULES.slo, goodput=goodput, ttft=(ttft / 2, ttft, ttft * 1.2))


def plan(status: TargetStatus, proposals: tuple[Proposal, ...] = (), **kw: object) -> decide.Decision:
    """One planner cycle at noon on ``observation()`` under ``RULES``; ``kw`` replaces any argument."""
    args: dict[str, object] = {
        "status": status,
        "observation": observation(),
        "observe_error": None,
        "proposals": proposals,
        "rules": RULES,
        "now": NOON,
    }
    args.update(kw)
    return decide.plan(**args)  # type: ignore[arg-type]


def tuning_status(results: list[TrialResult], proposers: list[str]) -> TargetStatus:
    """The first cycle's tuning round with ``results`` (re-shaped to the round's shape) proposed by ``proposers``."""
    first = plan(TargetStatus())
    assert first.status.tuning is not None
    round_ = first.status.tuning.model_copy(
        update={"trial_keys": tuple(r.config.key() for r in results), "trial_proposers": tuple(proposers)}
    )
    shaped = [r.model_copy(update={"shape": round_.shape}) for r in results]
    return first.status.model_copy(update={"tuning": round_, "trials": tuple(shaped)})


def probed_day(capacity_rps: float | None, config: EngineConfig = MTP1) -> ScheduledConfig:
    """The day's entry, tuned at noon: ``config`` at 2x stock, ``capacity_rps`` per replica as probed."""
    return scheduled("day", config, SHAPE, capacity_rps=capacity_rps, tuned_at=NOON)
