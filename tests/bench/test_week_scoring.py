"""The week benchmark's scoring: qualification, worst window, ratios, the ideal sizing and the ceiling's choice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import week
from controller.decide import Rules


@pytest.mark.parametrize(
    ("overall", "worst", "expected"),
    [
        (0.995, 0.98, True),
        (0.99, 0.97, True),  # both bounds inclusive
        (0.989, 0.99, False),  # overall too low
        (0.999, 0.969, False),  # one window too low
        (1.0, 1.0, True),
    ],
)
def test_qualification_needs_99_overall_and_97_in_every_window(overall: float, worst: float, expected: bool) -> None:
    assert week.qualifies(overall, worst) is expected


@pytest.mark.parametrize(
    ("tallies", "expected"),
    [
        ({}, (1.0, None)),
        ({("d1", "night"): (0.0, 0.0)}, (1.0, None)),  # a window without requests is not scored
        ({("d1", "night"): (100.0, 99.0), ("d1", "day"): (1000.0, 960.0)}, (0.96, ("d1", "day"))),
        ({("d1", "night"): (10.0, 9.0), ("d2", "night"): (10.0, 10.0)}, (0.9, ("d1", "night"))),
    ],
)
def test_worst_window_is_the_lowest_attainment_of_a_window_with_requests(
    tallies: dict[tuple[str, str], tuple[float, float]], expected: tuple[float, object]
) -> None:
    worst, where = week.worst_window(tallies)
    assert worst == pytest.approx(expected[0])
    assert where == expected[1]


@pytest.mark.parametrize(
    ("baseline", "hours", "counts", "expected"),
    [
        (150.0, 100.0, True, "1.50x"),  # baseline over ours: higher is better
        (80.0, 100.0, True, "0.80x"),
        (150.0, 100.0, False, "n/q"),  # a side that does not qualify gives no ratio
        (150.0, 0.0, True, "n/q"),
    ],
)
def test_gpu_hour_ratio(baseline: float, hours: float, counts: bool, expected: str) -> None:
    assert week.gpu_hour_ratio(baseline, hours, counts=counts) == expected


def test_week_line_format() -> None:
    line = week.week_line(
        stock="1.40x", static="1.10x", ceiling="1.20x", attainment_overall=0.9951, attainment_worst=0.9712
    )
    assert line == (
        "week: GPU-hours vs stock+HPA 1.40x fewer, vs ideal best static 1.10x, ceiling 1.20x, "
        "SLO attainment 99.5% (worst window 97.1%)"
    )


@pytest.mark.parametrize(
    ("stock_hours", "ceiling_hours", "counts", "over_ceiling", "over_floor"),
    [
        (1159.4, 803.5, True, "1.44x", "6.90x"),  # room to beat stock + HPA by a planner like the ceiling
        (188.5, 198.2, True, "0.95x", "1.12x"),  # stock + HPA runs hotter than the ceiling's headroom: no 1.3x here
        (188.5, 198.2, False, "n/q", "n/q"),  # stock + HPA does not qualify
    ],
)
def test_bounds_line_says_how_far_any_planner_can_get_against_stock_and_hpa(
    stock_hours: float, ceiling_hours: float, counts: bool, over_ceiling: str, over_floor: str
) -> None:
    floor = 168.0  # one replica, one GPU, all week
    line = week.bounds_line(
        stock_hours=stock_hours, ceiling_hours=ceiling_hours, floor_hours=floor, stock_counts=counts
    )
    assert line == (
        f"bounds: stock+HPA {stock_hours:.1f} GPU-hours is {over_ceiling} the ceiling's {ceiling_hours:.1f} and "
        f"{over_floor} the floor's 168.0 (the fewest replicas all week)"
    )


@pytest.mark.parametrize(
    ("concurrency", "capacity", "headroom", "lo", "hi", "expected"),
    [
        (100.0, 50.0, 0.0, 1, 16, 2),
        (100.0, 50.0, 0.25, 1, 16, 3),  # 125 / 50 -> 3
        (100.0, 125.0, 0.25, 1, 16, 1),  # exactly one replica's worth
        (0.0, 50.0, 0.25, 0, 16, 1),  # never below one
        (0.0, 50.0, 0.25, 2, 16, 2),  # the minimum
        (10_000.0, 50.0, 0.25, 1, 16, 16),  # the maximum
        (10.0, 0.0, 0.25, 1, 16, 16),  # a config that cannot hold the SLO gets the maximum
    ],
)
def test_ideal_replicas(concurrency: float, capacity: float, headroom: float, lo: int, hi: int, expected: int) -> None:
    assert week.ideal_replicas(concurrency, capacity, headroom=headroom, lo=lo, hi=hi) == expected


@pytest.mark.parametrize(
    ("replicas", "previous", "fallback", "expected"),
    [
        ({0: 4, 1: 3, 2: 5}, None, 0, 1),  # fewest wins
        ({0: 3, 1: 3, 2: 5}, 1, 0, 1),  # a tie keeps the previous hour's config (no switch)
        ({0: 3, 1: 3, 2: 3}, 2, 0, 2),
        ({0: 3, 1: 3, 2: 5}, 2, 1, 1),  # previous not tied: the ideal static config
        ({0: 5, 1: 3, 2: 3}, None, 0, 1),  # neither: the lowest index
    ],
)
def test_ceiling_choice(replicas: dict[int, int], previous: int | None, fallback: int, expected: int) -> None:
    assert week.ceiling_choice(replicas, previous=previous, fallback=fallback) == expected


@pytest.mark.parametrize(
    ("plan", "expected"),
    [([(0, 1), (0, 3), (0, 2)], 0), ([(0, 1), (1, 1), (1, 2), (0, 2)], 2), ([(3, 1)], 0)],
)
def test_plan_switches_counts_config_changes_only(plan: list[tuple[int, int]], expected: int) -> None:
    assert week.plan_switches(plan) == expected


def test_ideal_static_plan_and_ceiling_from_per_hour_replicas() -> None:
    # two configs: 0 is better by day (hours 8-19), 1 by night; 48 hours (a Monday and a Tuesday)
    day = {(t, h): (2 if 8 <= h < 20 else 4) for t in (0, 5) for h in range(24)}
    night = {(t, h): (3 if 8 <= h < 20 else 1) for t in (0, 5) for h in range(24)}
    sizing = week.IdealSizing([week.STOCK, week.STOCK], {0: day, 1: night})
    assert sizing.static_gpu_hours(0, 48) == 2 * (12 * 2 + 12 * 4)
    assert sizing.static_gpu_hours(1, 48) == 2 * (12 * 3 + 12 * 1)
    assert sizing.best_index(48) == 1
    ceiling = sizing.ceiling_plan(48)
    assert sum(n for _i, n in ceiling) == 2 * (12 * 2 + 12 * 1)
    assert week.plan_switches(ceiling) == 4  # night -> day -> night -> day -> night


def test_counting_load_tester_charges_the_canary_pool_for_launched_trials_only() -> None:
    from controller.domain.slo import SLO
    from controller.domain.traffic import LengthDistribution, TrafficShape
    from controller.ports import TrialBudget, TrialRequest

    shape = TrafficShape(
        arrival_rate_rps=1.0,
        concurrency=4.0,
        prompt_tokens=LengthDistribution(mean=512),
        output_tokens=LengthDistribution(mean=256),
    )

    class Fake:
        def __init__(self, status: object) -> None:
            self.status = status

        def run(self, request: TrialRequest) -> object:
            return week.TrialResult(
                config=request.config, shape=request.shape, slo=request.slo, status=self.status, reason="x"
            )

    budget = TrialBudget(duration_s=120.0, warmup_s=10.0)
    request = TrialRequest(week.TargetRef("ns", "n", "m"), week.STOCK, shape, SLO(), budget)
    launched = week.CountingLoadTester(Fake(week.TrialStatus.FAILED), cold_start_s=180.0)
    launched.run(request)
    launched.run(request)
    assert launched.trials == 2
    assert launched.gpu_seconds == pytest.approx(2 * (180.0 + 10.0 + 120.0))
    assert launched.by_kind == {"other": 2}
    refused = week.CountingLoadTester(Fake(week.TrialStatus.INFEASIBLE), cold_start_s=180.0)
    refused.run(request)
    assert refused.trials == 0 and refused.gpu_seconds == 0.0


@pytest.mark.parametrize(
    ("static_hours", "hours", "counts", "gain"),
    [
        (120.0, 100.0, True, "+20.0 GPU-hours"),  # the schedule saved hours against the best static config
        (100.0, 110.0, True, "-10.0 GPU-hours"),  # it cost more than never switching
        (120.0, 100.0, False, "n/q"),  # a side that does not qualify gives no gain
    ],
)
def test_schedule_line_gives_the_realised_gain_and_the_switching_cost(
    static_hours: float, hours: float, counts: bool, gain: str
) -> None:
    line = week.schedule_line(
        static_hours=static_hours,
        hours=hours,
        candidate_hours=3.25,
        trial_hours=1.5,
        trials=12,
        promotions=4,
        rollbacks=1,
        counts=counts,
    )
    assert line == (
        f"schedule: realised gain vs ideal best static {gain} ({static_hours:.1f} vs {hours:.1f}); switching cost: "
        "3.2 GPU-hours on rollout candidates, 1.5 on 12 canary trials, 4 promotions, 1 rollbacks"
    )


@pytest.mark.parametrize("name", ["rag-batch", "support-afternoon", "shift-desk", "launch-week"])
def test_the_unseen_scenarios_bring_their_own_windows_and_seeds(name: str) -> None:
    new = week.SCENARIOS[name]
    for old in ("workstation", "dense-fleet", "doc-quoting", "rag-batch", "support-afternoon"):
        if old == name:
            continue
        base = week.SCENARIOS[old]
        assert new.seed != base.seed
        assert week.week_traffic(new).windows != week.week_traffic(base).windows


def _shape(prompt: float, output: float, concurrency: float = 4.0) -> object:
    from controller.domain.traffic import LengthDistribution, TrafficShape

    return TrafficShape(
        arrival_rate_rps=1.0,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=prompt),
        output_tokens=LengthDistribution(mean=output),
    )


@pytest.mark.parametrize(
    ("prompt", "output", "mid_concurrency", "moved"),
    [
        (800.0, 300.0, 4.0, False),  # the mid-point's mix
        (820.0, 310.0, 4.0, False),  # within 5 %
        (6000.0, 300.0, 4.0, True),  # the business hours' long prompts still in the quarter
        (800.0, 300.0, 0.0, True),  # no load at the mid-point: every loaded quarter is sized on its own
    ],
)
def test_a_quarter_hour_is_sized_on_its_own_mix_when_it_moved(
    prompt: float, output: float, mid_concurrency: float, moved: bool
) -> None:
    mid = _shape(800.0, 300.0, mid_concurrency)
    assert week.mix_moved(_shape(prompt, output), mid) is moved


def test_production_rate_held_is_per_ready_replica_within_the_slo_and_without_a_candidate() -> None:
    from datetime import UTC, datetime, timedelta

    from controller.simulator.fleet.records import FleetTick, VariantTick

    start = datetime(2026, 11, 30, tzinfo=UTC)

    def tick(requests: int, good: int, ready: int, candidate: bool = False) -> FleetTick:
        def variant(name: str, n: int) -> VariantTick:
            return VariantTick(
                variant=name,
                config=None,
                replicas=n,
                ready_replicas=n,
                weight=0,
                requests=requests,
                errors=0,
                good_requests=good,
                output_tokens=0.0,
                prompt_tokens=0.0,
                ttft_s=None,
                tpot_s=None,
                e2e_s=None,
                spec_acceptance=None,
                gpu_seconds=60.0 * n,
                capacity_tokens_per_s=0.0,
            )

        variants = {"stable": variant("stable", ready)}
        if candidate:
            variants["candidate"] = variant("candidate", 1)
        return FleetTick(
            start=start,
            end=start + timedelta(seconds=60),
            shape=_shape(800, 300),
            candidate_weight=0,
            variants=variants,
        )

    assert week.production_rate_held([tick(600, 600, 2), tick(600, 600, 2)]) == pytest.approx(5.0)
    assert week.production_rate_held([tick(600, 590, 2)]) is None  # 98 % within the SLO
    assert week.production_rate_held([tick(600, 600, 2, candidate=True)]) is None


@pytest.mark.parametrize(
    ("scenario", "policy_file", "loop"),
    [
        ("workstation", "week-workstation.yaml", "open"),
        ("support-afternoon", "week-workstation.yaml", "open"),
        ("dense-fleet", "week-dense-8b-h200.yaml", "closed"),
        ("rag-batch", "week-dense-8b-h200.yaml", "closed"),
        ("doc-quoting", "week-doc-quoting-3090.yaml", "closed"),
        ("shift-desk", "week-dense-8b-h200.yaml", "closed"),
        ("launch-week", "week-workstation.yaml", "open"),
    ],
)
def test_each_scenario_runs_a_policy_file_of_bench_policies(scenario: str, policy_file: str, loop: str) -> None:
    """The week's settings live in ``bench/policies/``: its cycle's rules are the policy's, nothing set in code."""
    s = week.SCENARIOS[scenario]
    assert s.policy_path == week.REPO / "bench" / "policies" / policy_file
    policy = week.week_policy(s)
    rules = Rules.from_policy(policy, replicas=(s.min_replicas, s.max_replicas))
    assert policy.approval == "auto"
    assert (rules.tuning.max_trials, rules.tuning.trial_duration_s, rules.tuning.trial_warmup_s) == (6, 120.0, 10.0)
    assert (rules.rollout.bake_s, rules.rollout.min_samples) == (600.0, 100)
    assert rules.scaling is not None
    assert (rules.scaling.headroom, rules.scaling.scale_down_stabilisation_s) == (0.25, 900.0)
    assert rules.capacity_probe_loop == loop


def test_the_probe_loop_option_replaces_the_policys() -> None:
    s = replace(week.SCENARIOS["dense-fleet"], probe_loop="open")
    assert week.week_policy(s).scaling.capacity_probe_loop == "open"
