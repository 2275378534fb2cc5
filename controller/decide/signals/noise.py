"""Measurement noise from repeated trials. Pure.

Each tuning round measures its baseline twice on the round's shape. Two measurements of one config differ only by
the noise of the measurement (client, engine warm-up, scheduling), so their spread is the noise figure the
optimizer's surrogate and the round's selection use instead of an assumed one.

The figure is the pooled relative standard deviation of goodput in log space: for every config measured more than
once on the same shape, the squared deviations of ``log(goodput)`` from that config's mean, summed and divided by
the number of repeats (measurements beyond the first). With one pair ``a, b`` it is ``|log(a / b)| / sqrt(2)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from controller.domain.trial import TrialResult

ASSUMED = 0.04
"""The relative noise assumed when no repeat has been measured."""
MIN_NOISE = 0.01
"""A measured figure is clamped to [MIN_NOISE, MAX_NOISE] before the surrogate uses it: one pair of repeats can
agree by chance (a simulator's repeats agree exactly), and a surrogate told the measurements are exact
overfits them; a figure above MAX_NOISE means the trials are too noisy to rank configs and is capped so the
surrogate still learns from them."""
MAX_NOISE = 0.25


def measured(trials: Sequence[TrialResult]) -> tuple[float, int] | None:
    """(relative noise, repeats) from the configs measured more than once on one shape; None without a repeat.

    Only successful measurements with a positive goodput count (a failed trial says nothing about noise)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for t in trials:
        value = t.objective()
        if not t.ok or value <= 0:
            continue
        groups.setdefault((t.config.key(), t.shape.model_dump_json()), []).append(value)
    return pooled(groups.values())


def pooled(groups: Iterable[Sequence[float]]) -> tuple[float, int] | None:
    """(relative noise, repeats) pooled over groups of repeated measurements of one config (positive values; a
    group of one is no repeat); None without a repeat."""
    squares, repeats = 0.0, 0
    for values in groups:
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        repeats += len(logs) - 1
    if repeats == 0:
        return None
    return math.sqrt(squares / repeats), repeats


def clamped(noise: float | None) -> float:
    """The figure a consumer uses: the measured one within [MIN_NOISE, MAX_NOISE], else the assumed one."""
    if noise is None or not math.isfinite(noise):
        return ASSUMED
    return min(max(noise, MIN_NOISE), MAX_NOISE)


def required_gain(min_gain: float, noise: float | None) -> float:
    """The gain over the active config a candidate needs to be called a winner: the policy's ``min_gain``, or, when
    the measured noise is larger, the ratio two measurements of one config differ by at one standard deviation of
    their difference (``exp(sqrt(2) * noise)``; with one pair of repeats, exactly their ratio). A measured figure is
    capped at MAX_NOISE; without one, ``min_gain`` alone applies."""
    if noise is None or not math.isfinite(noise):
        return min_gain
    return max(min_gain, math.exp(math.sqrt(2) * min(noise, MAX_NOISE)))


__all__ = ["ASSUMED", "MAX_NOISE", "MIN_NOISE", "clamped", "measured", "pooled", "required_gain"]
