"""Regression guards for defects the fault suite and ``bench/week.py`` found, all fixed since (commits 7a7acc8
and 84ba84c). Each docstring says what went wrong before the fix and where.

- the rollout analysis ignored the canary-measured latency trade-off, then applied it unscaled at partial weights;
- a stable variant that breaches the SLO by errors (saturation) did not make a candidate SLO miss inconclusive;
- a Promote whose status write was lost wedged the operator;
- capacity scaling read another window's capacity, and did not run while a window was re-tuned or rolled out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller import decide
from controller.decide import RolloutRules
from controller.decide.rollout.analysis import analyse
from controller.domain.actions import Scale
from controller.domain.config import EngineConfig
from controller.domain.observation import VariantStats
from controller.domain.phases import Phase
from controller.domain.proposal import Proposal
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import TrafficShape
from tests.support.week_traffic import SLO_5S, WINDOWS, agents, documents, entry, plan, stable_seen, tuning_round

pytestmark = pytest.mark.faults

RULES = RolloutRules(min_samples=100, max_ttft_regression=0.10, max_tpot_regression=0.10)


def test_a_spike_that_saturates_stable_is_inconclusive_not_a_candidate_failure() -> None:
    """The traffic-spike scenario, at the 50% step (numbers from its run): stable is saturated and sheds 3% of its
    requests (29 of 960; its served ones keep a 90 ms TTFT), the candidate serves everything but its p95 TTFT
    reaches 5.01 s, just over the 5 s SLO. Stable breaches the SLO (error rate 3% > 1%) as the candidate does
    (TTFT): load, not config. Before 7a7acc8 the analysis only looked for a stable *latency* breach and returned
    Failed: a false rollback that also blocked a good config for good."""
    stable = VariantStats(variant="stable", requests=960, errors=29, ttft_p95_s=0.09, tpot_p95_s=0.035)
    candidate = VariantStats(variant="candidate", requests=953, errors=0, ttft_p95_s=5.014, tpot_p95_s=0.02)
    verdict = analyse(candidate=candidate, stable=stable, slo=SLO_5S, rules=RULES, step_age_s=60)
    assert verdict.verdict == "Inconclusive", verdict.reason


def test_the_latency_trade_off_the_canary_measured_is_accepted() -> None:
    """``analyse`` takes ``expected_ttft_ratio``/``expected_tpot_ratio`` and its docstring says production may show
    that measured trade-off plus the policy's tolerance before it counts as a regression, but before 7a7acc8 the
    parameters were never read: a candidate the trials measured at 1.3x stable's TTFT (and chose for its throughput)
    fails in production at 1.3x against the bare 1.10x tolerance."""
    stable = VariantStats(
        variant="stable", requests=600, errors=0, ttft_p95_s=0.100, tpot_p95_s=0.030, good_requests=600
    )
    candidate = VariantStats(
        variant="candidate", requests=200, errors=0, ttft_p95_s=0.130, tpot_p95_s=0.020, good_requests=200
    )
    verdict = analyse(
        candidate=candidate,
        stable=stable,
        slo=SLO_5S,
        rules=RULES,
        expected_ttft_ratio=1.3,
        expected_tpot_ratio=0.7,
        step_age_s=600,
    )
    assert verdict.verdict == "Successful", verdict.reason


def test_a_promote_whose_status_write_was_lost_does_not_wedge_the_operator() -> None:
    """The operator applies Promote (``controller/reconcile.py``, ``_act``: ``self.ports.cluster.promote(target)``) and
    dies, or its status write is refused (409), before the status is written. The next operator starts from the
    RollingOut-at-100% status, decides Promote again, and ``Cluster.promote`` raises ``NotFound`` (the candidate
    already became stable; the simulated, in-memory and Kubernetes adapters all do this). ``NotFound`` is a
    PermanentError, which ``Reconciler.reconcile`` does not catch: every cycle raises from then on. A promote that
    finds the candidate already promoted should count as done and the cycle should reach Observing."""
    from tests.support.faults import run_scenario

    o = run_scenario("lost-write-Promote")
    assert o.data["errors"] == [], o.outcome
    assert o.data["converged"]


def test_a_latency_x2_config_is_rolled_back_at_the_step_the_fault_appears() -> None:
    """Issue 7: a bad config (latency x2 at 25%) is rolled back with exposure <= the first step's weight after the
    fault appears, within 2 analysis intervals. Before commit 84ba84c (``controller/decide/rollout.py``,
    ``analyse``) the 25% step passed: the candidate's own TTFT p95 doubles (35 -> 70 ms) but that is 1.43x stable's
    49 ms, inside the 1.31 x 1.10 = 1.44x allowed by the trade-off the canary measured. The canary measured 1.31x at
    the full per-replica load (256 streams); at 25% the candidate carries a quarter of it and should be faster than
    that, so the measured ratio hides a doubling. The 50% step rolled it back (exposure 50%, 34% of requests, 3
    cycles after the analysis had enough samples). Now the trade-off is scaled by the candidate's share."""
    from tests.support.faults import run_scenario

    d = run_scenario("bad-config").data
    assert d["max_weight_while_bad"] == 25, run_scenario("bad-config").outcome
    assert 1 <= d["cycles_to_rollback"] <= 2


def test_scaling_uses_the_capacity_measured_for_the_current_window() -> None:
    """``controller/decide/decide.py``, ``_Planner._scale`` (before 84ba84c): the per-replica capacity was looked up
    as the first schedule entry whose config is the active one (``next(s.capacity_rps for s in self.status.schedule
    if s.config.key() == active_key ...)``), not the current window's ``entry``. When one config is scheduled for
    several windows, the day is scaled with the capacity measured on the night's long-document shape. Found by
    ``bench/week.py``: the night entry says 2.9 req/s per replica, the day entry 22.4, and the day scales to the
    16-replica maximum (40 req/s x 1.25 / 2.9) instead of 3 (40 x 1.25 / 22.4)."""
    now = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)
    config = EngineConfig(speculative_method="mtp", num_speculative_tokens=3, max_num_seqs=128)
    day_shape, night_shape = agents(40.0, 960.0), documents(0.3, 26.0)

    def tuned(window: str, shape: TrafficShape, capacity: float) -> ScheduledConfig:
        tuned_at = now - timedelta(minutes=30)
        return entry(
            window,
            config,
            shape,
            capacity=capacity,
            tuned_at=tuned_at,
            replicas=3,
            fleet_rate_rps=shape.arrival_rate_rps,
        )

    status = TargetStatus(
        phase=Phase.OBSERVING,
        active_config=config,
        replicas=3,
        window="day",
        schedule=(tuned("night", night_shape, 2.9), tuned("day", decide.per_replica(day_shape, 3), 22.4)),
    )
    decision = plan(status, stable_seen(day_shape, now, 12000, ttft=0.08, tpot=0.02), now)
    scales = [a for a in decision.actions if isinstance(a, Scale)]
    assert all(a.replicas <= 3 for a in scales), [a.reason for a in scales]


def test_capacity_scaling_keeps_running_while_a_window_is_retuned() -> None:
    """``controller/decide/decide.py``: before 84ba84c ``_scale`` was only called at the end of ``_observe``; in
    Trialling, RollingOut and AwaitingApproval the replica count was frozen. In ``bench/week.py`` the morning ramp
    grows from 2 to 37 req/s on one replica: the saturation shows up as an SLO breach, which starts a re-tune (not a
    scale-up); re-tunes and rollouts follow one another for three hours and the replica count never moves (SLO
    attainment 89% over two days). Now: while re-tuning, a load above what the replicas sustain at the measured
    capacity still scales up."""
    now = datetime(2026, 12, 1, 9, 5, tzinfo=UTC)
    config = EngineConfig(speculative_method="mtp", num_speculative_tokens=3, max_num_seqs=128)
    fleet = agents(37.0, 890.0)
    window = next(w for w in WINDOWS if w.name == "morning-ramp")
    ramp_shape = fleet.model_copy(update={"window": window})
    round_ = tuning_round(
        "morning-ramp-1", ramp_shape, now - timedelta(minutes=5), "SLO breach", (config, "baseline", "baseline")
    )
    ramp = entry("morning-ramp", config, fleet, capacity=20.0, tuned_at=now - timedelta(hours=2), fleet_rate_rps=12.0)
    status = TargetStatus(
        phase=Phase.TRIALLING, active_config=config, replicas=1, window="morning-ramp", tuning=round_, schedule=(ramp,)
    )
    observation = stable_seen(fleet, now, 11000, ttft=23.0, tpot=0.011, errors=1800)
    other = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, max_num_seqs=512)
    decision = plan(status, observation, now, proposals=(Proposal(other, "next trial", "optimizer"),))
    scales = [a for a in decision.actions if isinstance(a, Scale)]
    assert scales and scales[0].replicas >= 2, [type(a).__name__ for a in decision.actions]
