"""A trial is worth running only while what it may find saves whole replicas: table-driven.

With managed replicas the saving of a find is counted in replicas the window's busy hour no longer needs, above
the fleet's minimum; a window that runs on its minimum saves nothing whatever is found (``trial-not-worth-it``)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

import pytest

from controller.decide import Rules, ScalingRules, TuningRules
from controller.decide.tuning import rounds as tuning
from controller.decide.tuning.economics import trial_worth, whole_replicas_saved
from controller.domain import TargetStatus
from controller.domain.actions import RunTrial
from controller.domain.codes import Code
from controller.domain.proposal import Proposal
from tests.support.builders import scheduled
from tests.support.tuning_round import (
    ACTIVE,
    BETTER,
    NIGHT,
    NOW,
    OPENING,
    RULES,
    SHAPE,
    context,
    trialling,
)


@pytest.mark.parametrize(
    ("replicas", "floor", "gain", "needed", "expect"),
    [
        (1, 1, 0.50, 0.0, 0.0),  # one replica is one replica of any config
        (3, 3, 0.50, 0.0, 0.0),  # on the fleet's minimum
        (2, 1, 0.05, 0.0, 0.05),  # needs in (1, 1.05] come down to one replica: 5 % of the cases
        (2, 1, 1.00, 0.0, 1.0),  # twice the goodput: always one fewer
        (9, 1, 0.10, 0.0, 0.8),  # 8 x 1.1 = 8.8: needs up to 8.8 fit on 8
        (9, 1, 0.10, 0.12, 0.0),  # a find below the switch threshold is not used
        (4, 1, 0.0, 0.0, 0.0),
    ],
)
def test_whole_replicas_saved_at_a_known_gain(
    replicas: int, floor: int, gain: float, needed: float, expect: float
) -> None:
    got = whole_replicas_saved(replicas, floor=floor, median_gain=gain, uncertainty=None, needed_gain=needed)
    assert got == pytest.approx(expect, abs=1e-9)


def test_whole_replicas_saved_weighs_the_uncertainty() -> None:
    sure = whole_replicas_saved(2, floor=1, median_gain=0.0, uncertainty=0.0, needed_gain=0.0)
    unsure = whole_replicas_saved(2, floor=1, median_gain=0.0, uncertainty=math.log(1.5), needed_gain=0.0)
    assert sure == 0.0
    assert 0.0 < unsure < 1.0  # a chance that the find is much better
    assert whole_replicas_saved(1, floor=1, median_gain=0.0, uncertainty=1.0, needed_gain=0.0) == 0.0
    half = whole_replicas_saved(
        2, floor=1, median_gain=0.0, uncertainty=math.log(1.5), needed_gain=0.0, success_chance=0.5
    )
    assert half == pytest.approx(unsure / 2)


@pytest.mark.parametrize(
    ("replicas", "gain", "sd", "code"),
    [
        (1, 0.20, 0.3, "trial-not-worth-it"),  # a window on one replica: nothing to save
        (8, 0.20, 0.3, "trial-pays"),
        (2, 0.02, 0.0, "trial-not-worth-it"),  # 2 % of a replica over 100 GPU-hours: 1.0 < 2.0 the trial holds
        (2, -0.10, 0.0, "search-no-gain"),
        (None, 0.20, 0.3, "trial-pays"),  # replicas not managed: the share of the fleet, as before
    ],
)
def test_trial_worth_in_whole_replicas(replicas: int | None, gain: float, sd: float, code: str) -> None:
    verdict = trial_worth(
        expected_gain=gain,
        window_gpu_hours=100.0,
        trial_gpu_hours=2.0,
        gain_uncertainty=sd,
        replicas=replicas,
    )
    assert verdict.code == code, verdict.describe()


def test_trial_worth_refuses_no_replicas() -> None:
    with pytest.raises(ValueError, match="replicas"):
        trial_worth(expected_gain=0.1, window_gpu_hours=1.0, trial_gpu_hours=0.1, replicas=0)


@pytest.mark.parametrize(
    ("fleet_concurrency", "entry_replicas", "current", "code"),
    [
        (128.0, None, 1, "trial-not-worth-it"),  # one replica's slots, one replica running: nothing to save
        (128.0, 6, 1, "trial-pays"),  # the window's schedule ran 6 replicas at its busy hour
        (128.0, None, 6, "trial-pays"),  # 6 running now in the round's own window
        (512.0, None, 1, "trial-pays"),  # 4 replicas' slots
    ],
)
def test_a_rounds_trial_weighs_the_windows_replicas(
    fleet_concurrency: float, entry_replicas: int | None, current: int, code: str
) -> None:
    rules = Rules(
        slo=RULES.slo,
        tuning=TuningRules(max_trials=8, min_gain=1.0),
        windows=RULES.windows,
        scaling=ScalingRules(min_replicas=1, max_replicas=16, headroom=0.25, scale_down_stabilisation_s=900),
    )
    status = trialling(OPENING, fleet_concurrency).model_copy(update={"replicas": current})
    if entry_replicas is not None:
        entry = scheduled(
            "night",
            ACTIVE,
            SHAPE,
            goodput=1000.0,
            stock_goodput=800.0,
            replicas=entry_replicas,
            tuned_at=NOW - timedelta(days=1),
        )
        status = status.model_copy(update={"schedule": (entry,)})
    assert status.tuning is not None
    proposal = Proposal(BETTER, "GP-EI", "optimizer", expected_gain=0.3, gain_uncertainty=0.2)
    verdict = tuning.worth(context(status, (proposal,), rules), status.tuning, proposal)
    assert verdict.code == code, verdict.describe()


@pytest.mark.parametrize(
    ("scaling", "current", "fleet_concurrency", "repeats", "codes"),
    [
        (True, 1, 128.0, 0, ["trial-not-worth-it"]),  # one replica at the busy hour: no find saves a GPU
        (True, 6, 128.0, 1, []),  # six running now in the round's own window
        (True, 1, 4096.0, 1, []),  # the busy hour fills several replicas' slots
        (False, 1, 128.0, 1, []),  # replicas not managed: a faster config saves GPU time
    ],
)
def test_a_round_measures_the_noise_only_where_a_find_could_save_a_gpu(
    scaling: bool, current: int, fleet_concurrency: float, repeats: int, codes: list[str]
) -> None:
    rules = RULES if scaling else Rules(slo=RULES.slo, tuning=RULES.tuning, windows=RULES.windows)
    status = TargetStatus(active_config=ACTIVE, replicas=current, window="night")
    ctx = context(status, (), rules)
    assert ctx.observation is not None
    shape = ctx.observation.shape.model_copy(update={"concurrency": fleet_concurrency})
    ctx = replace(ctx, observation=ctx.observation.model_copy(update={"shape": shape}))
    started = tuning.start(ctx, "no tuned config", NIGHT, code=Code.TUNE_NO_CONFIG)
    runs = [a for a in started.actions if isinstance(a, RunTrial)]
    assert runs[0].proposed_by == "baseline"
    assert sum(r.repeat for r in runs) == repeats
    assert [c for c, _ in started.coded_notes] == codes
