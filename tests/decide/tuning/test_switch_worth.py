"""A scheduled switch's economics in GPU-hours: the replicas it saves over the window at the pessimistic end of the
forecast and of the capacities' noise, against its whole rollout (candidates for each step's bake, the old fleet
held while it drains, trials still to run)."""

from __future__ import annotations

import pytest

from controller.decide import ScalingRules
from controller.decide.tuning.economics import SwitchWorth, switch_worth

RULES = ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25)
NIGHT_S = 8 * 3600.0


def worth(**overrides: object) -> SwitchWorth:
    args: dict[str, object] = {
        "rate_rps": 4.0,
        "active_capacity_rps": 0.5,
        "new_capacity_rps": 1.0,
        "active_tp": 1,
        "new_tp": 1,
        "window_s": NIGHT_S,
        "current_replicas": 10,
        "steps": (10, 50, 100),
        "bake_s": 600.0,
        "rules": RULES,
        "forecast_uncertainty": 0.1,
        "capacity_uncertainty": 0.05,
    }
    args.update(overrides)
    return switch_worth(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({}, "switch-pays"),  # 10 vs 5 replicas all night
        ({"new_capacity_rps": 0.5}, "switch-not-paying"),  # the same capacity: nothing saved
        # 5 % more capacity: 10 vs 10 replicas once the noise of the two probes' ratio is held against it
        ({"new_capacity_rps": 0.525}, "switch-not-paying"),
        # one replica saved for an hour's window: less than the rollout's candidates and trials hold
        ({"new_capacity_rps": 0.6, "window_s": 3600.0, "trial_gpu_hours": 0.5}, "switch-not-paying"),
        # the same saving over a night pays
        ({"new_capacity_rps": 0.6}, "switch-pays"),
        # the day's 30 replicas held a quarter of an hour and a 3-hour rollout's candidates through a quiet evening
        # cost more than it saves
        ({"current_replicas": 30, "bake_s": 3600.0, "window_s": 4 * 3600.0}, "switch-not-paying"),
        # a rollout longer than the window saves nothing
        ({"bake_s": 3 * 3600.0}, "switch-not-paying"),
        # two GPUs per replica: the new config's 5 replicas hold 10 GPUs, as the active config's 10 do
        ({"new_tp": 2}, "switch-not-paying"),
    ],
)
def test_a_switch_pays_only_when_its_saving_exceeds_its_whole_cost(overrides: dict[str, object], code: str) -> None:
    assert worth(**overrides).code == code


def test_the_cost_is_the_candidates_the_old_fleet_held_and_the_trials() -> None:
    w = worth(trial_gpu_hours=0.25)
    # 5 replicas of the new config: 1, 3 and 5 candidates for 10 minutes each
    assert w.candidate_gpu_hours == pytest.approx(9 * 600 / 3600)
    # 10 replicas running where the active config needs 10: nothing held beyond the need
    assert w.held_gpu_hours == 0.0
    assert w.cost_gpu_hours == pytest.approx(1.5 + 0.25)
    # 5 replicas saved for the 7.5 hours after the 30-minute rollout
    assert w.median_saved_gpu_hours == pytest.approx(5 * 7.5)
    # 4 replicas above the need, until the scale-down's 15-minute stabilisation has passed (the rollout does not
    # hold them: both capacities are known)
    held = worth(current_replicas=14)
    assert held.held_gpu_hours == pytest.approx(4 * 0.25)
    # a stabilisation longer than the rollout: held for the rollout
    slow = ScalingRules(min_replicas=1, max_replicas=32, headroom=0.25, scale_down_stabilisation_s=7200.0)
    assert worth(current_replicas=14, rules=slow).held_gpu_hours == pytest.approx(4 * 0.5)


def test_a_pre_validated_swaps_surge_holds_the_whole_new_fleet_for_each_of_its_short_steps() -> None:
    swap = worth(steps=(50, 100), bake_s=60.0, surge=True)
    # the new config's 5 replicas for the night's 4 req/s, from the first step, for two steps of a minute
    assert swap.candidate_gpu_hours == pytest.approx(5 * 2 * 60 / 3600)
    assert swap.rollout_s == 120.0
    # the same steps without the surge: 3 candidates, then 5
    assert worth(steps=(50, 100), bake_s=60.0).candidate_gpu_hours == pytest.approx((3 + 5) * 60 / 3600)
    # against the full rollout's 1.5 GPU-hours over 30 minutes
    assert swap.candidate_gpu_hours < worth().candidate_gpu_hours


@pytest.mark.parametrize(
    ("forecast_uncertainty", "capacity_uncertainty", "saved_replicas"),
    [
        (0.0, 0.0, 1),  # 4 req/s: 10 replicas of the active config, 9 of the new one
        (0.0, 0.1, 0),  # the new config's capacity 10 % lower: 10 of each
        (0.2, 0.0, 0),  # 3.2 req/s: 8 replicas of either
    ],
)
def test_the_saving_counted_is_the_least_within_the_uncertainty(
    forecast_uncertainty: float, capacity_uncertainty: float, saved_replicas: int
) -> None:
    w = worth(
        new_capacity_rps=0.56,
        forecast_uncertainty=forecast_uncertainty,
        capacity_uncertainty=capacity_uncertainty,
    )
    assert w.median_saved_gpu_hours == pytest.approx(1 * 7.5)
    assert w.saved_gpu_hours == pytest.approx(saved_replicas * 7.5)


def test_invalid_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        worth(steps=())
    with pytest.raises(ValueError):
        worth(forecast_uncertainty=1.0)
