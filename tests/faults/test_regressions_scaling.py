"""Planner defects found by the fault suite and ``bench/week.py`` (two in capacity scaling, and the canary-pool
pause issue 7 asks for), now fixed; these tests keep them fixed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.domain.actions import Scale
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult
from tests.support.builders import trial
from tests.support.week_traffic import SLO_5S, WINDOWS, agents, documents, entry, plan, stable_seen, tuning_round

pytestmark = pytest.mark.faults

CONFIG = EngineConfig(speculative_method="mtp", num_speculative_tokens=2, max_num_seqs=512)
AGENTS = agents(33.2, 800.0)
DOCUMENTS = documents(0.29, 26.0)


def _measured(config: EngineConfig, shape: TrafficShape, goodput_rps: float) -> TrialResult:
    spreads = {"ttft": (0.05, 0.08, 0.1), "tpot": (0.01, 0.02, 0.03)}
    goodput = goodput_rps * 512
    return trial(
        config,
        shape,
        slo=SLO_5S,
        goodput=goodput,
        throughput=goodput_rps,
        completed=1000,
        goodput_rps=goodput_rps,
        **spreads,
    )


def test_fleet_rate_of_a_tuned_window_uses_the_replicas_the_round_was_measured_with() -> None:
    """``_Planner._select`` records ``fleet_rate_rps=round_.shape.arrival_rate_rps * max(1, self.status.replicas)``:
    the round's per-replica rate (cut for the replicas the fleet had when the round *started*) times the replicas at
    *selection*. Since scaling runs in every phase (84ba84c), replicas change during a round: in ``bench/week.py`` a
    round started at 4 replicas (8.3 req/s each, 33 req/s in all) ends at 16 and the day window records a fleet rate
    of 132.7 req/s, three times the week's busiest hour; ``_scale`` then uses it as the forecast (the day runs on 6
    replicas where 3 carry the load, and a later round scales 3 -> 12). Expected: the fleet rate the round saw."""
    now = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    window = next(w for w in WINDOWS if w.name == "day")
    shape = decide.per_replica(AGENTS, 4).model_copy(update={"window": window})
    trials = ((STOCK, "baseline", "baseline"), (CONFIG, "optimizer", "trial 2"))
    round_ = tuning_round("day-1", shape, now - timedelta(minutes=20), "SLO breach", *trials)
    status = TargetStatus(
        phase=Phase.TRIALLING,
        replicas=16,  # scaled up while the round ran
        window="day",
        tuning=round_,
        trials=(_measured(STOCK, shape, 6.0), _measured(CONFIG, shape, 14.0)),
    )
    rules = decide.Rules(slo=SLO_5S, windows=WINDOWS, tuning=decide.TuningRules(max_trials=2, measure_stock=False))
    decision = plan(status, stable_seen(AGENTS, now, 9000, ttft=0.08, tpot=0.02), now, rules=rules)
    entry = decision.status.schedule_for("day")
    assert entry is not None and entry.fleet_rate_rps is not None
    assert entry.fleet_rate_rps == pytest.approx(AGENTS.arrival_rate_rps, rel=0.05)


def test_prewarm_sizes_the_next_window_with_its_own_capacity() -> None:
    """``_Planner._scale``: ahead of a window (``prewarm_lead_s``) the forecast becomes the upcoming window's
    ``fleet_rate_rps``, but it is divided by the *current* window's capacity. At 06:50 (night: 24k-token documents,
    2.05 req/s per replica) ahead of the morning ramp (agents, 20 req/s per replica, 25 req/s in all), the fleet
    scales from 1 to 16 replicas (25 x 1.25 / 2.05) instead of 2 (25 x 1.25 / 20); in ``bench/week.py`` every
    weekday morning starts at the replica maximum."""
    now = datetime(2026, 12, 1, 6, 50, tzinfo=UTC)

    def tuned(window: str, shape: TrafficShape, capacity: float, fleet_rate: float) -> ScheduledConfig:
        return entry(
            window, CONFIG, shape, capacity=capacity, tuned_at=now - timedelta(hours=20), fleet_rate_rps=fleet_rate
        )

    status = TargetStatus(
        phase=Phase.OBSERVING,
        active_config=CONFIG,
        replicas=1,
        window="night",
        schedule=(
            tuned("night", DOCUMENTS, 2.05, 0.29),
            tuned("morning-ramp", decide.per_replica(AGENTS, 2), 20.0, 25.0),
        ),
    )
    decision = plan(status, stable_seen(DOCUMENTS, now, 90, ttft=0.4, tpot=0.008), now)
    scales = [a for a in decision.actions if isinstance(a, Scale)]
    assert all(a.replicas <= 2 for a in scales), [a.reason for a in scales]


def test_trials_pause_with_a_reason_while_the_canary_pool_is_gone() -> None:
    """Issue 7: "canary node gone -> trials paused with a reason". The pool's absence reaches the planner as FAILED
    trials whose reason says so ("canary pool unavailable ..."). Today the round runs to its end on FAILED results,
    ends with "no trial met the SLO", and the next cycle starts a new round: 10 attempts in 4 rounds over 12 cycles.
    Expected: after a trial fails because the pool is unavailable, the loop stops starting trials for a while (one
    round at most in 12 minutes) and says why in status."""
    from tests.support.faults import run_scenario

    d = run_scenario("canary-gone").data
    assert d["rounds"] <= 1, f"{d['rounds']} rounds, {d['trial_calls']} trial attempts in {d['cycles']} cycles"
    world = d["world"]
    assert any("canary pool unavailable" in r.message for r in world.status.last_reasons)
