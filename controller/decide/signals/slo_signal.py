"""SLO-breach signal in the multi-window burn-rate style (Google SRE workbook, ch. 5).

Pure: the good/total request counts of each window and ``now`` are passed in; the previous :class:`SloSignalState`
is passed in and the next one returned.

``burn = (1 - good/total) / (1 - objective)``: a burn of 1 spends the error budget exactly as fast as the objective
allows. A :class:`BurnRule` fires when BOTH its long and its short window burn at or above ``burn`` (the long window
proves it is significant, the short one that it is still happening) AND both windows hold at least ``min_requests``
requests, so a quiet minute with one slow request cannot trigger it. The signal clears when no rule fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator


class WindowCounts(BaseModel):
    """Requests in one look-back window ending now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_s: float = Field(gt=0)
    good: float = Field(ge=0)
    total: float = Field(ge=0)

    @model_validator(mode="after")
    def _good_at_most_total(self) -> WindowCounts:
        if self.good > self.total:
            raise ValueError(f"good ({self.good}) exceeds total ({self.total})")
        return self

    def burn(self, objective: float) -> float | None:
        if self.total <= 0:
            return None
        return (1 - self.good / self.total) / (1 - objective)


class BurnRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    long_s: float = Field(gt=0)
    short_s: float = Field(gt=0)
    burn: float = Field(gt=0)
    min_requests: float = Field(default=50, ge=1)

    @model_validator(mode="after")
    def _short_below_long(self) -> BurnRule:
        if self.short_s >= self.long_s:
            raise ValueError(f"short window ({self.short_s}s) must be shorter than long ({self.long_s}s)")
        return self


#: Page-worthy fast burn and a slower, longer one (SRE workbook defaults, 30-day budget).
DEFAULT_RULES: tuple[BurnRule, ...] = (
    BurnRule(long_s=3600, short_s=300, burn=14.4, min_requests=50),
    BurnRule(long_s=21600, short_s=1800, burn=6.0, min_requests=200),
)


class SloSignalState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    breaching: bool = False
    since: datetime | None = None


@dataclass(frozen=True)
class SloSignal:
    breaching: bool
    changed: bool
    reason: str
    burns: dict[str, float | None]


def _find(windows: dict[float, WindowCounts], seconds: float) -> WindowCounts | None:
    return windows.get(float(seconds))


def assess(
    counts: list[WindowCounts] | tuple[WindowCounts, ...],
    state: SloSignalState,
    *,
    now: datetime,
    objective: float = 0.99,
    rules: tuple[BurnRule, ...] = DEFAULT_RULES,
) -> tuple[SloSignal, SloSignalState]:
    """Evaluate every rule against the windows in ``counts`` (matched by ``window_s``)."""
    if not 0 < objective < 1:
        raise ValueError(f"objective must be in (0, 1), got {objective}")
    windows = {float(c.window_s): c for c in counts}
    burns: dict[str, float | None] = {f"{w:.0f}s": c.burn(objective) for w, c in sorted(windows.items())}
    fired: list[str] = []
    notes: list[str] = []
    for rule in rules:
        long_w, short_w = _find(windows, rule.long_s), _find(windows, rule.short_s)
        label = f"{rule.long_s:.0f}s/{rule.short_s:.0f}s@{rule.burn:g}"
        if long_w is None or short_w is None:
            notes.append(f"{label}: window counts missing")
            continue
        if long_w.total < rule.min_requests or short_w.total < rule.min_requests:
            notes.append(
                f"{label}: too few requests ({long_w.total:.0f}/{short_w.total:.0f} < {rule.min_requests:.0f})"
            )
            continue
        lb, sb = long_w.burn(objective), short_w.burn(objective)
        assert lb is not None and sb is not None
        if lb >= rule.burn and sb >= rule.burn:
            fired.append(f"{label}: burn {lb:.1f} (long) and {sb:.1f} (short) >= {rule.burn:g}")
        else:
            notes.append(f"{label}: burn {lb:.1f}/{sb:.1f} < {rule.burn:g}")
    breaching = bool(fired)
    changed = breaching != state.breaching
    if breaching:
        reason = "SLO burning: " + "; ".join(fired)
        new_state = SloSignalState(breaching=True, since=state.since if state.breaching else now)
    else:
        reason = "SLO ok: " + ("; ".join(notes) if notes else "no rules")
        new_state = SloSignalState(breaching=False, since=None)
    return SloSignal(breaching, changed, reason, burns), new_state
