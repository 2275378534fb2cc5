"""Warm-up until the engine is steady: a stability rule on consecutive warm-up rounds, with a cap.

A fresh engine can read slow, and by a different amount per config (11,607 against 14,070 tok/s for stock on the
first and second runs of one H200 server, 9,298 against 16,090 for fp8 KV; the ranking flipped). A fixed count of
warm-up requests does not say whether the transient is over. Here the trial warms up in rounds at the trial's own
concurrency; each round gives an output throughput and a median TPOT (the client-side view of the engine's step
time). The engine is **steady** once ``stable_intervals`` consecutive intervals (pairs of adjacent rounds) each got
faster by at most ``tolerance``, in throughput and in TPOT (:func:`stable_interval`: a warm engine's rounds also
dip, and a dip is not warming). A trial whose engine is not steady after ``max_rounds`` rounds, or when the
warm-up's time is spent, is ``invalid``.

The rule is pure (:func:`judge`); :func:`warm_until_steady` runs it over a caller's round function, so the
trial runner and the tests drive it the same way.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WarmupRule:
    """When the warm-up may stop (see the module docstring)."""

    tolerance: float = 0.05
    stable_intervals: int = 2
    max_rounds: int = 6
    requests_per_stream: int = 1  # a round is this many requests per stream of the trial's concurrency
    min_round_requests: int = 4

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1:
            raise ValueError("tolerance must be in (0, 1)")
        if self.stable_intervals < 1:
            raise ValueError("stable_intervals must be >= 1")
        if self.max_rounds < self.stable_intervals + 1:
            raise ValueError("max_rounds must leave room for stable_intervals + 1 rounds")
        if self.requests_per_stream < 1 or self.min_round_requests < 1:
            raise ValueError("a round needs at least one request")

    def round_requests(self, concurrency: float) -> int:
        """Requests in one round at ``concurrency`` streams."""
        return max(self.min_round_requests, math.ceil(max(1.0, concurrency)) * self.requests_per_stream)


@dataclass(frozen=True)
class WarmupRound:
    """What one warm-up round measured."""

    output_tokens_per_s: float
    tpot_p50_s: float | None = None


@dataclass(frozen=True)
class WarmupVerdict:
    """How the warm-up ended: ``steady`` or not, after how many rounds, why, and every round's figures."""

    steady: bool
    rounds: int
    reason: str
    history: tuple[WarmupRound, ...] = field(default=())

    def describe(self) -> str:
        tput = ", ".join(f"{r.output_tokens_per_s:.0f}" for r in self.history)
        return f"{self.reason} (out tok/s per round: {tput})" if tput else self.reason


def _gain(a: float, b: float) -> float:
    """How much ``b`` is above ``a``, relative to ``a`` (negative when below); infinite when ``a`` is not
    positive (nothing to compare with)."""
    return b / a - 1.0 if a > 0 else math.inf


def stable_interval(before: WarmupRound, after: WarmupRound, tolerance: float) -> bool:
    """Whether the engine stopped warming between two adjacent rounds: the later round is not faster, by more than
    ``tolerance``, in throughput, nor in TPOT where both rounds have one.

    The test is one-sided. A warming engine gets faster; a warm one at high concurrency varies both ways from one
    round to the next. On the H200 (``engine-h200/run5``), one-wave rounds of 256 streams on a warm vLLM gave
    11,380, 11,766, 10,637, 8,846, 10,498 and 11,499 tok/s, while four-wave runs on the same server agreed within
    0.3 %. A two-sided test never saw two quiet intervals there and made the trial invalid; a dip is noise the
    measured replay averages over, not a transient a warm-up can wait out."""
    if after.output_tokens_per_s <= 0 or _gain(before.output_tokens_per_s, after.output_tokens_per_s) > tolerance:
        return False
    if before.tpot_p50_s is not None and after.tpot_p50_s is not None and after.tpot_p50_s > 0:
        return _gain(after.tpot_p50_s, before.tpot_p50_s) <= tolerance  # the step time fell by more: still warming
    return True


def judge(history: Sequence[WarmupRound], rule: WarmupRule) -> WarmupVerdict | None:
    """The verdict after these rounds, or None to run another round."""
    n = len(history)
    if n > rule.stable_intervals:
        recent = history[n - rule.stable_intervals - 1 :]
        if all(stable_interval(a, b, rule.tolerance) for a, b in itertools.pairwise(recent)):
            return WarmupVerdict(True, n, f"steady after {n} warm-up rounds", tuple(history))
    if n >= rule.max_rounds:
        return WarmupVerdict(
            False,
            n,
            f"engine not steady after {n} warm-up rounds (throughput and TPOT within"
            f" {rule.tolerance:.0%} over {rule.stable_intervals} consecutive intervals)",
            tuple(history),
        )
    return None


def warm_until_steady(
    run_round: Callable[[int], WarmupRound],
    rule: WarmupRule,
    *,
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> WarmupVerdict:
    """Run rounds (``run_round(i)``, i from 0) until :func:`judge` decides or ``budget_s`` is spent; a warm-up that
    runs out of time before it is steady is not steady."""
    start = clock()
    history: list[WarmupRound] = []
    while True:
        history.append(run_round(len(history)))
        verdict = judge(history, rule)
        if verdict is not None:
            return verdict
        if clock() - start >= budget_s:
            return WarmupVerdict(
                False,
                len(history),
                f"engine not steady within the warm-up's {budget_s:.0f} s ({len(history)} rounds)",
                tuple(history),
            )
