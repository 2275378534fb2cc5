"""When a tuning round's search stops asking for trials, and when a window is not searched again: table-driven.

A trial pays while the gain its proposer expects, on the window's GPU-hours over the payback horizon, saves more
GPU time than the trial holds; a window whose traffic is back on a shape it was searched on reuses that search."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

from controller.decide import Rules, TuningRules
from controller.decide.search.optimizer import OptimizerAdvisor, expected_gain
from controller.decide.tuning import rounds as tuning
from controller.decide.tuning.economics import expected_excess_gain, trial_worth
from controller.domain.actions import RunTrial
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import TrialResult
from tests.support.builders import observed as observed_at
from tests.support.builders import plan_context, scheduled
from tests.support.optimizer_space import CONFIGS, POLICY
from tests.support.tuning_round import (
    ACTIVE,
    BETTER,
    DOCUMENTS,
    NIGHT,
    NOW,
    OPENING,
    OTHER,
    RULES,
    SHAPE,
    context,
    measured,
    trialling,
)


# ----- the verdict on one trial --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gain", "window_gpu_hours", "cost", "needed", "code"),
    [
        (None, 100.0, 0.1, 0.0, "trial-gain-unknown"),  # the opening picks: nothing to weigh yet
        (0.10, 100.0, 0.1, 0.0, "trial-pays"),  # saves 9.1 GPU-hours for 0.1
        (0.0, 100.0, 0.1, 0.0, "search-no-gain"),
        (-0.05, 100.0, 0.1, 0.0, "search-no-gain"),
        (0.02, 100.0, 0.1, 0.03, "search-below-threshold"),  # a 2 % find is not switched to
        (0.04, 100.0, 0.1, 0.03, "trial-pays"),
        (0.001, 50.0, 0.1, 0.0, "trial-not-worth-it"),  # saves 0.05 GPU-hours for 0.1
        (0.10, 1.0, 0.2, 0.0, "trial-not-worth-it"),  # a short, small window: 0.09 saved for 0.2
    ],
)
def test_trial_worth(gain: float | None, window_gpu_hours: float, cost: float, needed: float, code: str) -> None:
    verdict = trial_worth(
        expected_gain=gain, window_gpu_hours=window_gpu_hours, trial_gpu_hours=cost, needed_gain=needed
    )
    assert verdict.code == code
    assert verdict.pays is (code in ("trial-pays", "trial-gain-unknown"))
    if gain is not None and gain > needed:
        assert verdict.saved_gpu_hours == pytest.approx(gain / (1 + gain) * window_gpu_hours)


def test_trial_worth_refuses_negative_hours() -> None:
    with pytest.raises(ValueError, match="GPU-hours"):
        trial_worth(expected_gain=0.1, window_gpu_hours=-1.0, trial_gpu_hours=0.1)


@pytest.mark.parametrize(
    ("median", "sd", "needed", "expect"),
    [
        (0.10, 0.0, 0.0, 0.10),  # no uncertainty: the median itself
        (0.10, 0.0, 0.03, 0.07),
        (-0.10, 0.0, 0.0, 0.0),
        # a median at the best measured, sd 0.2: E[max(e^X - 1, 0)], X ~ N(0, 0.2^2) = e^0.02 Phi(0.2) - Phi(0)
        (0.0, 0.2, 0.0, math.exp(0.02) * 0.5792597094391030 - 0.5),
    ],
)
def test_expected_excess_gain_is_a_lognormal_expected_improvement(
    median: float, sd: float, needed: float, expect: float
) -> None:
    assert expected_excess_gain(median, sd, needed) == pytest.approx(expect, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize(
    ("gain", "sd", "success", "needed", "code"),
    [
        # a median 47 % below the best measured, after failed trials, with the model unsure (x1.47): still worth
        # a trial on a window of 100 GPU-hours
        (-0.47, math.log(1.47), 1.0, 0.0, "trial-pays"),
        (-0.47, 0.02, 1.0, 0.0, "search-no-gain"),  # the same median, the model sure of it
        (0.02, 0.01, 1.0, 0.03, "search-below-threshold"),
        (0.10, 0.05, 1.0, 0.03, "trial-pays"),
        (0.10, 0.05, 0.0, 0.03, "trial-not-worth-it"),  # the failure model says it will not run
        (0.0005, 0.001, 1.0, 0.0, "trial-not-worth-it"),  # sure of a 0.05 % gain: 0.05 GPU-hours for 0.1
    ],
)
def test_trial_worth_weighs_the_uncertainty_of_the_gain(
    gain: float, sd: float, success: float, needed: float, code: str
) -> None:
    verdict = trial_worth(
        expected_gain=gain,
        window_gpu_hours=100.0,
        trial_gpu_hours=0.1,
        needed_gain=needed,
        gain_uncertainty=sd,
        success_chance=success,
    )
    assert verdict.code == code, verdict.describe()
    excess = success * expected_excess_gain(gain, sd, needed)
    assert verdict.saved_gpu_hours == pytest.approx(excess / (1 + needed + excess) * 100.0)


@pytest.mark.parametrize(("sd", "success"), [(-0.1, 1.0), (math.nan, 1.0), (math.inf, 1.0), (0.1, 1.5), (0.1, -0.1)])
def test_trial_worth_refuses_an_uncertainty_or_chance_out_of_range(sd: float, success: float) -> None:
    with pytest.raises(ValueError):
        trial_worth(
            expected_gain=0.1, window_gpu_hours=1.0, trial_gpu_hours=0.1, gain_uncertainty=sd, success_chance=success
        )


@pytest.mark.parametrize(
    ("predicted", "best", "gain"),
    [(1100.0, 1000.0, 0.1), (900.0, 1000.0, -0.1), (None, 1000.0, None), (1100.0, None, None), (1.0, 0.0, None)],
)
def test_expected_gain_of_a_suggestion(predicted: float | None, best: float | None, gain: float | None) -> None:
    assert expected_gain(predicted, best) == (pytest.approx(gain) if gain is not None else None)


# ----- a round's next trials -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gains", "trialled", "stop"),
    [
        ((0.20, 0.10), (BETTER, OTHER), None),  # both expected to pay
        ((0.20, 0.01), (BETTER,), None),  # the second is below the switch threshold: the batch ends there
        ((0.01, 0.20), (), "search-below-threshold"),  # the advisor's best pick does not pay: the search stops
        ((-0.05, -0.10), (), "search-no-gain"),
        ((None, None), (BETTER, OTHER), None),  # no estimate: the opening picks run
    ],
)
def test_next_trials_run_while_they_pay(
    gains: tuple[float | None, float | None], trialled: tuple[EngineConfig, ...], stop: str | None
) -> None:
    proposals = (
        Proposal(BETTER, "GP-EI", "optimizer", expected_gain=gains[0]),
        Proposal(OTHER, "GP-EI", "optimizer", expected_gain=gains[1]),
    )
    status = trialling(OPENING)
    assert status.tuning is not None
    ctx = context(status, proposals)
    step = tuning.next_trials(ctx, status.tuning)
    ran = tuple(a.config for a in step.actions if isinstance(a, RunTrial)) if step is not None else ()
    assert ran == trialled
    stopped = tuning.search_stop(ctx, status.tuning) if step is None else None
    assert (stopped.status.tuning.stop_code if stopped and stopped.status.tuning else None) == stop
    if stopped is not None:
        assert stopped.code == "search-stopped"  # a stop that saves trials is news
        assert stopped.status.tuning is not None and stopped.status.tuning.stop_reason


@pytest.mark.parametrize(
    ("fleet_concurrency", "horizon_days", "code"),
    [
        (256.0, 7.0, "trial-pays"),  # 2 replicas x 8 h x 7 days = 112 GPU-hours: 0.5 % of it is 0.56
        (128.0, 0.05, "trial-not-worth-it"),  # 1 replica x 8 h x 0.05 days: 0.4 GPU-hours, 0.5 % of it < one trial
    ],
)
def test_the_window_gpu_hours_over_the_horizon_decide(fleet_concurrency: float, horizon_days: float, code: str) -> None:
    rules = Rules(
        slo=RULES.slo,
        tuning=TuningRules(max_trials=8, min_gain=1.0, payback_horizon_s=horizon_days * 86400),
        windows=RULES.windows,
        scaling=RULES.scaling,
    )
    status = trialling(OPENING, fleet_concurrency)
    assert status.tuning is not None
    proposal = Proposal(BETTER, "GP-EI", "optimizer", expected_gain=0.005)
    verdict = tuning.worth(context(status, (proposal,), rules), status.tuning, proposal)
    assert verdict.code == code
    # one trial holds its 120 s measurement and the engine's 180 s start
    assert verdict.cost_gpu_hours == pytest.approx(300 / 3600)


@pytest.mark.parametrize(
    ("spent", "proposals", "code"),
    [
        (8, (Proposal(BETTER, "GP-EI", "optimizer", expected_gain=0.2),), "search-budget-spent"),
        (3, (), "search-no-proposals"),
    ],
)
def test_a_search_that_stops_for_other_reasons_says_why(spent: int, proposals: tuple[Proposal, ...], code: str) -> None:
    trials = (*OPENING, *(measured(ACTIVE, 1000.0) for _ in range(spent - len(OPENING))))
    status = trialling(trials)
    assert status.tuning is not None
    ctx = context(status, proposals)
    assert tuning.next_trials(ctx, status.tuning) is None
    stopped = tuning.search_stop(ctx, status.tuning)
    assert stopped is not None and stopped.status.tuning is not None
    assert stopped.status.tuning.stop_code == code
    assert stopped.code == "search-ended"  # the search's ordinary end
    # once stopped, it stays stopped
    again = ctx.with_status(stopped.status)
    assert tuning.next_trials(again, stopped.status.tuning) is None
    assert tuning.search_stop(again, stopped.status.tuning) is None


# ----- not searching a window again on a shape it was searched on ----------------------------------------------------
def entry(config: EngineConfig, shape: TrafficShape, at: datetime) -> ScheduledConfig:
    return scheduled(
        "night",
        config,
        shape,
        goodput=1200,
        stock_goodput=800,
        reason="measured",
        tuned_at=at,
        capacity_rps=4.0,
        fleet_rate_rps=8.0,
    )


YESTERDAY = NOW - timedelta(days=1)


LIGHTER = SHAPE.model_copy(update={"concurrency": 32.0, "arrival_rate_rps": 1.0})


@pytest.mark.parametrize(
    ("schedule", "searches", "blocked", "observed", "code", "config"),
    [
        # searched at a quarter of the per-replica load (no config held the SLO at the design load): the same
        # fleet load, so the same search
        ((entry(ACTIVE, LIGHTER, YESTERDAY),), (), (), SHAPE, "search-reused", ACTIVE),
        # four times the fleet load it was searched for: drifted, searched again
        (
            (entry(ACTIVE, SHAPE, YESTERDAY),),
            (),
            (),
            SHAPE.model_copy(update={"arrival_rate_rps": 16.0}),
            "tune-drift",
            None,
        ),
        # the window's own entry, on this shape: a breach or a repeated drift verdict does not search it again
        ((entry(ACTIVE, SHAPE, YESTERDAY),), (), (), SHAPE, "search-reused", ACTIVE),
        # the traffic is back on the documents the window was searched on before: that search's config again
        (
            (entry(ACTIVE, SHAPE, YESTERDAY),),
            (entry(OTHER, DOCUMENTS, YESTERDAY),),
            (),
            DOCUMENTS,
            "search-reused",
            OTHER,
        ),
        # a shape never searched: a new round
        ((entry(ACTIVE, SHAPE, YESTERDAY),), (), (), DOCUMENTS, "tune-drift", None),
        # the window's entry is not the active config, and its search never measured the active one (a breach of
        # a config promoted in another window): searched again, with the active config as its baseline
        ((entry(OTHER, SHAPE, YESTERDAY),), (), (), SHAPE, "tune-drift", None),
        # an earlier search whose config was rolled back since: searched again
        (
            (entry(ACTIVE, SHAPE, YESTERDAY),),
            (entry(OTHER, DOCUMENTS, YESTERDAY),),
            (OTHER.key(),),
            DOCUMENTS,
            "tune-drift",
            None,
        ),
    ],
)
def test_a_window_is_searched_again_only_on_a_new_shape(
    schedule: tuple[ScheduledConfig, ...],
    searches: tuple[ScheduledConfig, ...],
    blocked: tuple[str, ...],
    observed: TrafficShape,
    code: str,
    config: EngineConfig | None,
) -> None:
    fleet = observed.model_copy(
        update={"concurrency": observed.concurrency * 2, "arrival_rate_rps": observed.arrival_rate_rps * 2}
    )
    status = TargetStatus(
        active_config=ACTIVE,
        replicas=2,
        schedule=schedule,
        searches=searches,
        blocked_configs=blocked,
        trials=(measured(ACTIVE, 900.0, DOCUMENTS),),  # the documents' search measured the active config
    )
    ctx = plan_context(
        status,
        Rules(slo=RULES.slo, windows=RULES.windows, scaling=RULES.scaling, design_slots=128),
        NOW,
        NIGHT,
        observation=observed_at(fleet, NOW),
    )
    intent = tuning.start(ctx, "drifted", NIGHT, code="tune-drift", observed=True)
    assert intent.code == code
    now_entry = intent.status.schedule_for("night")
    if config is None:
        assert intent.status.tuning is not None
        assert any(isinstance(a, RunTrial) for a in intent.actions)
        # the entry being replaced is kept for a later return to its shape
        assert [s.shape for s in intent.status.searches if s.window == "night"][-1] == schedule[0].shape
    else:
        assert intent.status.tuning is None
        assert not any(isinstance(a, RunTrial) for a in intent.actions)
        assert now_entry is not None and now_entry.config == config and now_entry.tuned_at == NOW
        # the entry it replaced is kept in turn
        kept = {(s.config.key(), s.shape.prompt_tokens.mean) for s in intent.status.searches}
        if config != schedule[0].config:
            assert (schedule[0].config.key(), schedule[0].shape.prompt_tokens.mean) in kept


def test_an_operator_asked_re_tune_searches_whatever_was_searched_before() -> None:
    status = TargetStatus(active_config=ACTIVE, replicas=2, schedule=(entry(ACTIVE, SHAPE, YESTERDAY),))
    fleet = SHAPE.model_copy(update={"concurrency": 256.0, "arrival_rate_rps": 8.0})
    ctx = plan_context(
        status,
        Rules(slo=RULES.slo, windows=RULES.windows, scaling=RULES.scaling, design_slots=128),
        NOW,
        NIGHT,
        observation=observed_at(fleet, NOW),
        drifted=True,
    )
    assert tuning.start(ctx, "asked", NIGHT, code="tune-drift", observed=True).code == "tune-drift"


def test_searches_kept_per_window_are_bounded() -> None:
    shapes = [SHAPE.model_copy(update={"prompt_tokens": LengthDistribution(mean=512 * 4**i)}) for i in range(6)]
    status = TargetStatus(active_config=ACTIVE)
    for i, shape in enumerate(shapes):
        status = status.model_copy(update={"schedule": (entry(ACTIVE, shape, NOW + timedelta(hours=i)),)})
        ctx = plan_context(status, RULES, NOW, NIGHT)
        status = status.model_copy(update={"searches": tuning.archived(ctx, "night")})
    kept = [s.shape.prompt_tokens.mean for s in status.searches]
    assert kept == [s.prompt_tokens.mean for s in shapes[-tuning.SEARCHES_PER_WINDOW :]]


# ----- the optimizer says what it expects --------------------------------------------------------------------------
def test_the_optimizer_attaches_the_gain_it_expects_over_the_best_measured() -> None:
    def prior(config: EngineConfig, _shape: TrafficShape) -> float:
        return 1000.0 + 10.0 * (config.max_num_seqs or 0) + 100.0 * (config.num_speculative_tokens or 0)

    advisor = OptimizerAdvisor(POLICY, prior=prior, seed=0)

    def context(history: tuple[TrialResult, ...]) -> AdvisorContext:
        return AdvisorContext(TargetRef("ns", "m", "model"), SHAPE, RULES.slo, CONFIGS[0], history, max_proposals=2)

    # nothing measured yet: the warm start's pick carries no estimate
    assert [p.expected_gain for p in advisor.propose(context(()))] == [None, None]
    history = tuple(measured(c, prior(c, SHAPE)) for c in CONFIGS[:4])
    proposals = advisor.propose(context(history))
    assert proposals and all(p.expected_gain is not None and p.expected_gain > -1 for p in proposals)
    # the surrogate on a prior that the measurements follow expects the prior's ranking: a gain where the prior has
    # one over the best measured config
    best = max(prior(c, SHAPE) for c in CONFIGS[:4])
    first = proposals[0]
    assert first.expected_gain is not None
    assert (first.expected_gain > 0) == (prior(first.config, SHAPE) > best)
    # and how sure it is, with the failure model's chance that the config runs (no failures here: 1)
    assert all(p.gain_uncertainty is not None and p.gain_uncertainty > 0 for p in proposals)
    assert all(p.success_chance == 1.0 for p in proposals)
    assert [p.gain_uncertainty for p in advisor.propose(context(()))] == [None, None]
