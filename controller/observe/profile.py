"""Hour-of-week traffic profile from weeks of Prometheus history, compact enough for a CR status.

:func:`build_profile` runs the four range queries of :func:`controller.observe.queries.profile_queries` over a
configurable history (7-28 days, one point per ``step``) and folds them into a :class:`TrafficProfile`:

- 168 hour-of-week slots (Monday 00:00 UTC is slot 0), each with mean arrival rate, Little's-law concurrency and the
  arrival-weighted prompt/output means;
- the hourly mean arrival rate over the whole history (at most 672 numbers), which the forecast fits.

Values are rounded to 4 significant digits; a 28-day profile serialises to roughly 10 KB of JSON, so it lives in the
target's status and a restarted operator does not re-query weeks of data (:meth:`TrafficProfile.is_fresh`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from controller.domain.observation import TargetRef
from controller.domain.profile import HourSlot, TrafficProfile, hour_of_week
from controller.errors import InvalidInput, MetricsUnavailable
from controller.observe import promql
from controller.observe import queries as q
from controller.observe.prometheus import PrometheusMetrics

#: Prometheus refuses range queries of more than 11,000 points per series.
__all__ = [
    "MAX_POINTS",
    "HourSlot",
    "TrafficProfile",
    "build_profile",
    "hour_of_week",
    "profile_from_series",
]

MAX_POINTS = 11_000


def _round(x: float) -> float:
    return float(f"{x:.4g}")


Series = Sequence[tuple[float, float]]


def profile_from_series(
    target: str,
    series: Mapping[str, Series],
    *,
    start: datetime,
    end: datetime,
    step_s: float,
    built_at: datetime,
) -> TrafficProfile:
    """Fold ``(unix_ts, value)`` series named ``arrival_rate``, ``concurrency``, ``prompt_mean``, ``output_mean`` into a
    profile. Non-finite values (NaN from 0/0 in idle steps) are skipped; idle steps still count as rate 0."""
    # The hourly series the forecast fits holds complete hours only: a partial first or last hour would average a
    # slice of a rising or falling hour and bias the fit by the minute the history happens to start or end at.
    first_hour = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if first_hour < start:
        first_hour += timedelta(hours=1)
    # hour i is complete when its last point (each point is the rate over the preceding step) is at or before end
    n_hours = max(math.floor(((end - first_hour).total_seconds() + step_s) / 3600), 0)
    per_slot: dict[str, dict[int, list[float]]] = {k: defaultdict(list) for k in ("rate", "conc")}
    weighted: dict[str, dict[int, list[float]]] = {k: defaultdict(list) for k in ("prompt", "output", "w")}
    hourly: dict[int, list[float]] = defaultdict(list)
    rate_at = {ts: v for ts, v in series.get("arrival_rate", ()) if math.isfinite(v)}
    conc_at = {ts: v for ts, v in series.get("concurrency", ()) if math.isfinite(v)}
    prompt_at = {ts: v for ts, v in series.get("prompt_mean", ()) if math.isfinite(v) and v > 0}
    output_at = {ts: v for ts, v in series.get("output_mean", ()) if math.isfinite(v) and v > 0}
    t0 = first_hour.timestamp()
    for ts, rate in sorted(rate_at.items()):
        when = datetime.fromtimestamp(ts, UTC)
        how = hour_of_week(when)
        rate = max(rate, 0.0)
        per_slot["rate"][how].append(rate)
        per_slot["conc"][how].append(max(conc_at.get(ts, 0.0), 0.0))
        index = int((ts - t0) // 3600)
        if 0 <= index < n_hours:
            hourly[index].append(rate)
        if ts in prompt_at and ts in output_at and rate > 0:
            weighted["prompt"][how].append(prompt_at[ts] * rate)
            weighted["output"][how].append(output_at[ts] * rate)
            weighted["w"][how].append(rate)
    slots = []
    for how in sorted(per_slot["rate"]):
        rates = per_slot["rate"][how]
        w = sum(weighted["w"][how])
        slots.append(
            HourSlot(
                hour=how,
                arrival_rate=_round(sum(rates) / len(rates)),
                concurrency=_round(sum(per_slot["conc"][how]) / len(rates)),
                prompt_mean=_round(sum(weighted["prompt"][how]) / w) if w > 0 else None,
                output_mean=_round(sum(weighted["output"][how]) / w) if w > 0 else None,
                samples=len(rates),
            )
        )
    return TrafficProfile(
        target=target,
        built_at=built_at,
        history_start=first_hour,
        step_s=step_s,
        slots=tuple(slots),
        hourly_arrival=tuple(
            _round(sum(hourly[i]) / len(hourly[i])) if hourly.get(i) else None for i in range(n_hours)
        ),
    )


def _matrix_values(matrix: list[Any], what: str) -> list[tuple[float, float]]:
    if not matrix:
        return []
    if len(matrix) > 1:
        raise MetricsUnavailable(f"{what}: expected one series, got {len(matrix)} (unexpected label set)")
    try:
        return [(float(ts), float(v)) for ts, v in matrix[0]["values"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise MetricsUnavailable(f"{what}: malformed range answer") from exc


def build_profile(
    source: PrometheusMetrics,
    target: TargetRef,
    *,
    end: datetime,
    days: float = 14,
    step_s: float = 300,
) -> TrafficProfile:
    """Query ``days`` of history ending at ``end`` (4 range queries) and build the profile."""
    if not 1 <= days <= 28:
        raise InvalidInput(f"history must be 1-28 days, got {days}", source="profile", field="days")
    if days * 86400 / step_s > MAX_POINTS:
        raise InvalidInput(
            f"{days} days at {step_s}s steps exceeds {MAX_POINTS} points", source="profile", field="step_s"
        )
    start = end - timedelta(days=days)
    selector = source.settings.selector(target)
    series: dict[str, list[tuple[float, float]]] = {}
    for query in q.profile_queries(selector, promql.duration(step_s)):
        what = f"profile {target} {query.name}"
        series[query.name] = _matrix_values(source.query_range(query.expr, start, end, step_s, what), what)
    if not series["arrival_rate"]:
        raise MetricsUnavailable(f"profile {target}: no request history in the last {days} days")
    return profile_from_series(str(target), series, start=start, end=end, step_s=step_s, built_at=end)
