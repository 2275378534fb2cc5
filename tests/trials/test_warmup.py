"""The warm-up stability rule: consecutive rounds that stopped getting faster, a cap, the time budget."""

from __future__ import annotations

import pytest

from controller.trials.loadgen.warmup import WarmupRound, WarmupRule, judge, stable_interval, warm_until_steady

RULE = WarmupRule(tolerance=0.05, stable_intervals=2, max_rounds=5)


def rounds(*tput: float, tpot: float | None = 0.02) -> list[WarmupRound]:
    return [WarmupRound(t, tpot) for t in tput]


@pytest.mark.parametrize(
    ("tput", "expected"),
    [
        ((11_607, 14_070, 14_100, 14_050), (True, 4)),  # issue 30's cold first run, then steady
        ((14_000, 14_100, 14_050), (True, 3)),  # steady from the start: the fewest rounds two intervals need
        ((9_298, 16_090, 16_000), None),  # one stable interval is not enough: another round
        ((10_000, 12_000, 14_000, 16_000, 18_000), (False, 5)),  # still climbing at the cap: invalid
        ((14_000, 14_000), None),  # two rounds make one interval
        ((14_000,), None),
        ((14_000, 14_690, 15_400), (True, 3)),  # +4.9 % and +4.8 %: inside a 5 % tolerance
        ((14_000, 14_800, 14_800, 14_800), (True, 4)),  # +5.7 % first, then flat
        ((0.0, 0.0, 0.0, 0.0, 0.0), (False, 5)),  # nothing completed: never steady
        # a warm H200 at 256 streams, one wave per round (engine-h200/run5): dips are not warming
        ((11_380, 11_766, 10_637), (True, 3)),
        ((11_380, 11_766, 10_637, 8_846, 10_498), (False, 5)),  # ... but a climb of 19 % at the end is warming
        ((14_000, 12_000, 14_500, 14_600, 14_550), (True, 5)),  # a dip, a climb back, then flat
    ],
)
def test_judge_table(tput: tuple[float, ...], expected: tuple[bool, int] | None) -> None:
    verdict = judge(rounds(*tput), RULE)
    if expected is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert (verdict.steady, verdict.rounds) == expected


@pytest.mark.parametrize(
    ("before", "after", "stable"),
    [
        (WarmupRound(100, 0.020), WarmupRound(103, 0.0204), True),
        (WarmupRound(100, 0.023), WarmupRound(103, 0.020), False),  # throughput agrees, the step time fell 13 %
        (WarmupRound(100, None), WarmupRound(104, 0.020), True),  # TPOT compared only where both have one
        (WarmupRound(100, 0.020), WarmupRound(94, 0.020), True),  # slower is not warming
        (WarmupRound(100, 0.020), WarmupRound(106, 0.020), False),  # faster by more than the tolerance
        (WarmupRound(100, 0.020), WarmupRound(100, 0.018), False),  # the step time fell 10 %: still warming
        (WarmupRound(100, 0.020), WarmupRound(100, 0.025), True),  # the step time rose: a dip, not warming
        (WarmupRound(0, None), WarmupRound(100, None), False),
    ],
)
def test_stable_interval_table(before: WarmupRound, after: WarmupRound, stable: bool) -> None:
    assert stable_interval(before, after, 0.05) is stable


def test_the_verdict_keeps_every_round_and_says_why() -> None:
    verdict = judge(rounds(10_000, 12_000, 14_000, 16_000, 18_000), RULE)
    assert verdict is not None and not verdict.steady
    assert [r.output_tokens_per_s for r in verdict.history] == [10_000, 12_000, 14_000, 16_000, 18_000]
    assert "not steady after 5 warm-up rounds" in verdict.describe()
    assert "10000, 12000, 14000, 16000, 18000" in verdict.describe()


def test_warm_until_steady_stops_at_the_first_steady_round() -> None:
    seen: list[int] = []
    figures = [11_607, 14_070, 14_100, 14_050, 14_000, 14_000]

    def run_round(i: int) -> WarmupRound:
        seen.append(i)
        return WarmupRound(figures[i], 0.018)

    verdict = warm_until_steady(run_round, RULE, budget_s=1e9)
    assert verdict.steady and verdict.rounds == 4
    assert seen == [0, 1, 2, 3]


def test_warm_until_steady_is_invalid_when_the_time_runs_out() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def run_round(i: int) -> WarmupRound:
        now[0] += 30.0  # each round takes 30 s of the 60 s budget
        return WarmupRound(10_000 + 3_000 * i, 0.02)

    verdict = warm_until_steady(run_round, RULE, budget_s=60.0, clock=clock)
    assert not verdict.steady and verdict.rounds == 2
    assert "within the warm-up's 60 s" in verdict.reason


@pytest.mark.parametrize(
    ("concurrency", "requests"),
    [(1, 4), (16, 16), (256, 256), (0.4, 4), (64.2, 65)],
)
def test_round_requests(concurrency: float, requests: int) -> None:
    assert WarmupRule().round_requests(concurrency) == requests


@pytest.mark.parametrize(
    "kwargs",
    [{"tolerance": 0.0}, {"tolerance": 1.0}, {"stable_intervals": 0}, {"stable_intervals": 3, "max_rounds": 3}],
)
def test_bad_rules_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        WarmupRule(**kwargs)  # type: ignore[arg-type]
