"""The demo's progress: one line per simulated hour, as soon as the hour is simulated."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from controller.demo.model import TimelinePoint
from controller.domain.traffic import TimeWindow


@dataclass(frozen=True)
class HourProgress:
    """What one simulated hour looked like: where the traffic was, what served it, what the operator did."""

    start: datetime
    day: int
    """1 for the simulated day's first 24 hours, 2 for the next, ..."""
    window: str
    replicas: int
    """GPUs held at the hour's end, candidates included."""
    config: str
    """The label of the stable config serving at the hour's end."""
    phase: str
    candidate_weight: int
    """The candidate's share of traffic (percent) at the hour's end."""
    gain: float
    """Tokens/s the fleet delivered over what the stock config would have, over the hour."""
    slo_attainment: float
    requests: int
    actions: tuple[tuple[str, int], ...]
    """Each kind of action the operator took in the hour, with how many times."""

    def line(self) -> str:
        day = f" (day {self.day})" if self.day > 1 else ""
        parts = [
            f"hour {self.start:%H:%M}{day}",
            f"window {self.window}",
            f"{self.replicas} replica{'s' if self.replicas != 1 else ''}",
            f"config {self.config}",
            f"phase {self.phase}",
            f"{self.gain:.2f}x stock",
            f"SLO {self.slo_attainment:.1%} of {self.requests:,}",
        ]
        if self.candidate_weight:
            parts.append(f"candidate at {self.candidate_weight}%")
        if self.actions:
            parts.append(", ".join(kind if n == 1 else f"{kind} x{n}" for kind, n in self.actions))
        return "  ".join(parts)


OnHour = Callable[[HourProgress], None]


def hour_progress(
    start: datetime,
    first: datetime,
    points: Sequence[TimelinePoint],
    actions: Sequence[tuple[datetime, str, str]],
    windows: Sequence[TimeWindow],
) -> HourProgress:
    """The hour from ``start`` (``first``: the simulation's start) out of its timeline points and actions."""
    end = start + timedelta(hours=1)
    hour = [p for p in points if start <= p.at < end]
    last = hour[-1] if hour else None
    clock_hour = start.hour + start.minute / 60
    stock = sum(p.stock_tokens_per_s for p in hour)
    requests = sum(p.requests for p in hour)
    kinds = Counter(kind for at, kind, _ in actions if start <= at < end)
    return HourProgress(
        start=start,
        day=(start - first) // timedelta(days=1) + 1,
        window=next((w.name for w in windows if w.contains(clock_hour)), "?"),
        replicas=last.replicas if last else 0,
        config=last.stable_config if last else "none",
        phase=last.phase if last else "?",
        candidate_weight=last.candidate_weight if last else 0,
        gain=sum(p.tokens_per_s for p in hour) / stock if stock > 0 else 0.0,
        slo_attainment=sum(p.good_requests for p in hour) / requests if requests else 1.0,
        requests=requests,
        actions=tuple(sorted(kinds.items())),
    )
