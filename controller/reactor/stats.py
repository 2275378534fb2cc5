"""Fixed-size duration statistics: what the operator keeps about its cycles' wall times, however long it runs."""

from __future__ import annotations

import bisect
import math

#: Bucket upper bounds in seconds: 10 per decade from 100 us to 1,000 s (71 buckets), the last one unbounded.
BOUNDS: tuple[float, ...] = tuple(10 ** (e / 10) for e in range(-40, 31))


class DurationHistogram:
    """Counts durations in log-spaced buckets (relative resolution about 26 %): a fixed number of integers,
    however many cycles ran. ``len()`` is the count; :meth:`quantile` answers from the buckets (a bucket's upper
    bound, never above the largest duration seen)."""

    def __init__(self, bounds: tuple[float, ...] = BOUNDS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum += seconds
        self.max = max(self.max, seconds)

    def __len__(self) -> int:
        return self.count

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1): the upper bound of the bucket it falls in, capped at the largest duration."""
        if self.count == 0:
            return math.nan
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                bound = self.bounds[index] if index < len(self.bounds) else math.inf
                return min(bound, self.max)
        return self.max

    def mean(self) -> float:
        return self.sum / self.count if self.count else math.nan


__all__ = ["BOUNDS", "DurationHistogram"]
