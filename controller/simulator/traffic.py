"""Seeded diurnal traffic: the shape production asks of a model at any simulated time.

A profile mixes *populations* of clients. Each population has a fixed request mix (prompt/output length
distributions, repetitiveness, prefix sharing), a peak number of concurrent streams and a nominal time in system
per request; an *intensity curve* over the hour of day scales its streams between 0 and 1. The default profile,
``coding-agents``, follows the workstation in the field notes:

* ``agents``: coding agents during the working day, up to 256 concurrent 512-in / 512-out streams, peaking
  around midday (13:00);
* ``documents``: long-document work at night, a handful (1-8) of streams with ~24k-token prompts whose answers
  quote the document (high repetitiveness, the case lookup drafters accelerate);
* ramps between the two in the morning and evening.

``chat-quoting`` follows field note 2's consumer card: chat by day (short prompts, fresh text) and document quoting
at night (25k-token documents whose answers copy them, where a lookup drafter pays several-fold).

At hour ``h`` each population contributes ``streams_i = peak_i * intensity_i(h)`` concurrent streams and, by Little's
law, ``rate_i = streams_i / request_seconds_i`` arrivals per second. The shape is the mixture: concurrency and
rate add up, length distributions are mixed by request rate (first and second moments, so the mixture's
coefficient of variation is exact), repetitiveness is weighted by output tokens and prefix sharing by prompt tokens.

Noise is multiplicative and log-normal with coefficient of variation ``noise_cv``, drawn at knots every
``noise_knot_minutes`` and linearly interpolated between them, so traffic wanders smoothly instead of jittering each
minute. Every draw is derived from ``(seed, knot index)``, never from call order: ``shape_at`` is a pure function of
the time and the seed.

Profiles are data (:data:`PRESETS`, or a YAML file through :meth:`TrafficProfile.from_yaml`), validated by pydantic.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.errors import InvalidInput

__all__ = [
    "PRESETS",
    "DiurnalTraffic",
    "IntensityCurve",
    "Population",
    "TrafficProfile",
    "preset_names",
]

#: Monday = 0 ... Sunday = 6 (``datetime.weekday()``).
WEEKEND_DAYS: frozenset[int] = frozenset({5, 6})


class IntensityCurve(BaseModel):
    """Intensity (0..1, relative to a population's peak) over the hour of day.

    ``knots`` are ``(hour, value)`` pairs with strictly increasing hours covering 0 and 24; between knots the value
    follows a cosine ease (smooth, no overshoot).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    knots: tuple[tuple[float, float], ...] = Field(min_length=2)

    @field_validator("knots")
    @classmethod
    def _valid_knots(cls, knots: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        hours = [h for h, _ in knots]
        if hours[0] != 0 or hours[-1] != 24:
            raise ValueError(f"knots must start at hour 0 and end at hour 24, got {hours[0]} .. {hours[-1]}")
        if any(b <= a for a, b in itertools.pairwise(hours)):
            raise ValueError(f"knot hours must be strictly increasing, got {hours}")
        if any(not 0 <= v <= 1 for _, v in knots):
            raise ValueError("knot values must lie in [0, 1]")
        return knots

    def at(self, hour: float) -> float:
        hour = hour % 24.0
        knots = self.knots
        for (h0, v0), (h1, v1) in itertools.pairwise(knots):
            if h0 <= hour <= h1:
                u = (hour - h0) / (h1 - h0)
                return v0 + (v1 - v0) * (1 - math.cos(math.pi * u)) / 2
        return knots[-1][1]  # unreachable: knots cover [0, 24]


class Population(BaseModel):
    """One kind of client: its request mix, peak concurrent streams and nominal time in system per request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    peak_concurrency: float = Field(gt=0, le=1e5, description="concurrent streams at intensity 1")
    request_seconds: float = Field(
        gt=0, le=86_400, description="nominal time in system per request; arrival rate = streams / request_seconds"
    )
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution
    repetitiveness: float = Field(default=0.0, ge=0, le=1)
    prefix_share: float = Field(default=0.0, ge=0, le=1)
    curve: IntensityCurve
    weekend_curve: IntensityCurve | None = Field(default=None, description="replaces `curve` on Saturday/Sunday")
    weekend_scale: float = Field(default=1.0, ge=0, le=10, description="multiplies intensity on Saturday/Sunday")

    def intensity(self, hour: float, *, weekend: bool) -> float:
        if weekend:
            curve = self.weekend_curve or self.curve
            return curve.at(hour) * self.weekend_scale
        return self.curve.at(hour)


class TrafficProfile(BaseModel):
    """A named traffic profile: populations, the named windows of the day, and noise."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=63)
    description: str = ""
    populations: dict[str, Population] = Field(min_length=1)
    windows: tuple[TimeWindow, ...] = Field(min_length=1)
    noise_cv: float = Field(default=0.08, ge=0, le=1, description="multiplicative log-normal noise on load")
    noise_knot_minutes: float = Field(default=15.0, gt=0, le=1440)

    @model_validator(mode="after")
    def _windows_tile_the_day(self) -> TrafficProfile:
        total = sum(w.hours for w in self.windows)
        if abs(total - 24.0) > 1e-9:
            raise ValueError(f"windows must cover the day exactly once (24 h), they cover {total:g} h")
        for quarter in range(96):
            hour = quarter / 4 + 0.125
            owners = [w.name for w in self.windows if w.contains(hour)]
            if len(owners) != 1:
                raise ValueError(f"hour {hour:g} lies in {len(owners)} windows {owners}; windows must not overlap")
        names = [w.name for w in self.windows]
        if len(set(names)) != len(names):
            raise ValueError(f"window names must be unique, got {names}")
        return self

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str = "<traffic profile>") -> TrafficProfile:
        """Validate outside data; errors name ``source`` and the offending field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(first["msg"], source=source, field=where) from exc

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrafficProfile:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise InvalidInput(f"cannot read traffic profile: {exc}", source=str(path)) from exc
        if not isinstance(data, Mapping):
            raise InvalidInput("a traffic profile must be a mapping", source=str(path))
        return cls.parse(data, source=str(path))


# ----- presets ------------------------------------------------------------------------------------------------------
_DAY_WINDOWS: list[dict[str, Any]] = [
    {"name": "night", "start_hour": 0, "end_hour": 7},
    {"name": "morning-ramp", "start_hour": 7, "end_hour": 10},
    {"name": "day", "start_hour": 10, "end_hour": 18},
    {"name": "evening", "start_hour": 18, "end_hour": 24},
]

_AGENTS: dict[str, Any] = {
    # The field notes' workstation benchmark: 256 streams of 512 in / 512 out.
    "peak_concurrency": 256,
    # ~24 s per request at peak (~45 ms per output token): what one stock replica sustains near its limit.
    "request_seconds": 24.0,
    "prompt_tokens": {"mean": 512, "cv": 0.25, "maximum": 4096},
    "output_tokens": {"mean": 512, "cv": 0.25, "maximum": 4096},
    "repetitiveness": 0.10,
    "prefix_share": 0.30,
    # off at night, ramp 07-10, plateau with a midday peak, fading through the evening
    "curve": {
        "knots": [[0, 0.0], [7, 0.0], [10, 0.8], [13, 1.0], [18, 0.6], [21, 0.05], [22, 0.0], [24, 0.0]],
    },
    "weekend_curve": {"knots": [[0, 0.0], [9, 0.0], [12, 0.8], [15, 1.0], [19, 0.4], [22, 0.0], [24, 0.0]]},
    "weekend_scale": 0.3,
}

_DOCUMENTS: dict[str, Any] = {
    # Night-time long-document work: a few streams quoting 25k-token documents (field notes, report 2).
    "peak_concurrency": 6,
    "request_seconds": 90.0,
    "prompt_tokens": {"mean": 24000, "cv": 0.4, "maximum": 128000},
    "output_tokens": {"mean": 1024, "cv": 0.5, "maximum": 8192},
    "repetitiveness": 0.85,
    "prefix_share": 0.5,
    "curve": {"knots": [[0, 1.0], [6, 1.0], [9, 0.0], [19, 0.0], [23, 1.0], [24, 1.0]]},
    "weekend_curve": {"knots": [[0, 1.0], [9, 1.0], [12, 0.3], [18, 0.3], [22, 1.0], [24, 1.0]]},
}

_CHAT: dict[str, Any] = {
    # Interactive chat by day: short prompts, a few hundred tokens of fresh text in reply.
    "peak_concurrency": 64,
    "request_seconds": 20.0,
    "prompt_tokens": {"mean": 1024, "cv": 0.6, "maximum": 8192},
    "output_tokens": {"mean": 384, "cv": 0.5, "maximum": 4096},
    "repetitiveness": 0.05,
    "prefix_share": 0.4,
    "curve": {"knots": [[0, 0.0], [7, 0.0], [10, 0.8], [13, 1.0], [18, 0.7], [21, 0.1], [22, 0.0], [24, 0.0]]},
    "weekend_curve": {"knots": [[0, 0.0], [9, 0.0], [12, 0.6], [15, 0.7], [19, 0.4], [22, 0.0], [24, 0.0]]},
    "weekend_scale": 0.5,
}

_QUOTING: dict[str, Any] = {
    # Document quoting at night (field note 2): 25k-token documents whose answers copy long passages of them, the
    # text a lookup drafter guesses right ~15 times in 16.
    "peak_concurrency": 8,
    "request_seconds": 60.0,
    "prompt_tokens": {"mean": 8000, "cv": 0.3, "maximum": 24000},
    "output_tokens": {"mean": 2048, "cv": 0.5, "maximum": 8192},
    "repetitiveness": 0.95,
    "prefix_share": 0.95,
    "curve": {"knots": [[0, 1.0], [6, 1.0], [9, 0.0], [19, 0.0], [23, 1.0], [24, 1.0]]},
}

#: Named traffic profiles, as data. Validated by :class:`TrafficProfile` on first use.
PRESETS: dict[str, dict[str, Any]] = {
    "coding-agents": {
        "name": "coding-agents",
        "description": "coding agents by day (256 x 512/512 at midday), long-document work at night (1-8 streams)",
        "populations": {"agents": _AGENTS, "documents": _DOCUMENTS},
        "windows": _DAY_WINDOWS,
        "noise_cv": 0.08,
    },
    "chat-quoting": {
        "name": "chat-quoting",
        "description": "chat by day (64 x 1k/384 at midday), document quoting at night (8 x 25k/1.5k, 95% copied)",
        "populations": {"chat": _CHAT, "quoting": _QUOTING},
        "windows": _DAY_WINDOWS,
        "noise_cv": 0.08,
    },
    "agents-flat": {
        "name": "agents-flat",
        "description": "constant 256 x 512/512 agent traffic, no daily cycle (load tests, benchmarks)",
        "populations": {
            "agents": {
                **_AGENTS,
                "curve": {"knots": [[0, 1.0], [24, 1.0]]},
                "weekend_curve": None,
                "weekend_scale": 1.0,
            }
        },
        "windows": [{"name": "all-day", "start_hour": 0, "end_hour": 24}],
        "noise_cv": 0.0,
    },
    "documents-flat": {
        "name": "documents-flat",
        "description": "constant long-document traffic, 6 streams of ~24k-token prompts, no daily cycle",
        "populations": {
            "documents": {
                **_DOCUMENTS,
                "curve": {"knots": [[0, 1.0], [24, 1.0]]},
                "weekend_curve": None,
            }
        },
        "windows": [{"name": "all-day", "start_hour": 0, "end_hour": 24}],
        "noise_cv": 0.0,
    },
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def load_preset(name: str) -> TrafficProfile:
    if name not in PRESETS:
        raise InvalidInput(f"unknown traffic profile {name!r}; known: {', '.join(preset_names())}", field="profile")
    return TrafficProfile.parse(PRESETS[name], source=f"traffic preset {name!r}")


# ----- mixing -------------------------------------------------------------------------------------------------------
def _mix_lengths(parts: list[tuple[float, LengthDistribution]]) -> LengthDistribution:
    """Mixture of length distributions with weights (request rates): exact first and second moments."""
    total = sum(w for w, _ in parts)
    if total <= 0:
        return parts[0][1]
    mean = sum(w * d.mean for w, d in parts) / total
    second = sum(w * d.second_moment() for w, d in parts) / total
    cv = math.sqrt(max(second - mean * mean, 0.0)) / mean
    caps = [d.maximum for w, d in parts if w > 0]
    maximum = None if any(c is None for c in caps) or not caps else max(c for c in caps if c is not None)
    if maximum is not None and maximum < mean:
        maximum = math.ceil(mean)
    return LengthDistribution(mean=mean, cv=min(cv, 10.0), maximum=maximum)


def mix_shapes(parts: list[tuple[float, TrafficShape]], *, window: TimeWindow | None = None) -> TrafficShape:
    """Aggregate shapes weighted by ``weight`` (e.g. requests or seconds): lengths mixed by request weight,
    repetitiveness by output tokens, prefix share by prompt tokens. Rate and concurrency are weight-averaged."""
    parts = [(w, s) for w, s in parts if w > 0] or parts[:1]
    total = sum(w for w, _ in parts) or 1.0
    out_w = sum(w * s.output_tokens.mean for w, s in parts) or 1.0
    in_w = sum(w * s.prompt_tokens.mean for w, s in parts) or 1.0
    return TrafficShape(
        arrival_rate_rps=sum(w * s.arrival_rate_rps for w, s in parts) / total,
        concurrency=sum(w * s.concurrency for w, s in parts) / total,
        prompt_tokens=_mix_lengths([(w, s.prompt_tokens) for w, s in parts]),
        output_tokens=_mix_lengths([(w, s.output_tokens) for w, s in parts]),
        repetitiveness=min(1.0, sum(w * s.output_tokens.mean * s.repetitiveness for w, s in parts) / out_w),
        prefix_share=min(1.0, sum(w * s.prompt_tokens.mean * s.prefix_share for w, s in parts) / in_w),
        window=window,
    )


# ----- the generator ------------------------------------------------------------------------------------------------
class DiurnalTraffic:
    """The traffic shape at any simulated time of day, seeded and deterministic.

    ``DiurnalTraffic(seed, profile="coding-agents")`` repeats the same weekday every day;
    ``DiurnalTraffic.week(seed)`` (or ``weekly=True``) also applies the profile's weekend differences on
    Saturday and Sunday. ``load_scale`` multiplies every population's streams (and so its arrival rate), e.g. to
    size the profile for a smaller GPU or a larger fleet. Times are read in UTC.
    """

    def __init__(
        self,
        seed: int = 0,
        profile: str | TrafficProfile = "coding-agents",
        *,
        weekly: bool = False,
        load_scale: float = 1.0,
    ) -> None:
        if not 0 < load_scale <= 1e4:
            raise InvalidInput(f"must be in (0, 10000], got {load_scale}", field="load_scale")
        self.seed = int(seed)
        self.load_scale = float(load_scale)
        self.profile = load_preset(profile) if isinstance(profile, str) else profile
        self.weekly = weekly
        self._noise_cache: dict[int, float] = {}

    @classmethod
    def week(
        cls, seed: int = 0, profile: str | TrafficProfile = "coding-agents", *, load_scale: float = 1.0
    ) -> DiurnalTraffic:
        """A week-long generator: weekdays as the profile's curves, weekends with its weekend differences."""
        return cls(seed, profile, weekly=True, load_scale=load_scale)

    # ----- windows ------------------------------------------------------------------------------------------------
    @property
    def windows(self) -> tuple[TimeWindow, ...]:
        return self.profile.windows

    def window_at(self, hour: float) -> TimeWindow:
        hour = hour % 24.0
        return next(w for w in self.profile.windows if w.contains(hour))

    def window(self, name: str) -> TimeWindow:
        for w in self.profile.windows:
            if w.name == name:
                return w
        raise InvalidInput(f"unknown window {name!r}; known: {[w.name for w in self.windows]}", field="window")

    # ----- shapes -------------------------------------------------------------------------------------------------
    def shape_at(self, when: datetime) -> TrafficShape:
        """The (noisy) shape at a point in simulated time."""
        hour = when.hour + when.minute / 60 + (when.second + when.microsecond / 1e6) / 3600
        weekday = when.weekday()
        day_index = when.toordinal()
        minute_of_day = hour * 60
        return self._shape(hour, weekday=weekday, noise=self._noise(day_index, minute_of_day))

    def shape_at_hour(self, hour: float, *, day_of_week: int = 0, noise: bool = True, day: int = 0) -> TrafficShape:
        """The shape at ``hour`` (0-24) of day ``day`` (an arbitrary index for noise) falling on ``day_of_week``."""
        if not 0 <= day_of_week <= 6:
            raise InvalidInput(f"day_of_week must be 0 (Monday) .. 6 (Sunday), got {day_of_week}", field="day_of_week")
        h = hour % 24.0
        factor = self._noise(day, h * 60) if noise else 1.0
        return self._shape(h, weekday=day_of_week, noise=factor)

    def nominal_shape(self, window: str | TimeWindow, *, day_of_week: int = 0) -> TrafficShape:
        """Noise-free representative shape of a window: the time-weighted mix of its hours (every 5 minutes)."""
        w = self.window(window) if isinstance(window, str) else window
        steps = max(1, round(w.hours * 12))
        shapes = [
            self.shape_at_hour(w.start_hour + (i + 0.5) * w.hours / steps, day_of_week=day_of_week, noise=False)
            for i in range(steps)
        ]
        # weight by requests so lengths mix per request; rate and concurrency then come out request-weighted,
        # so restore their time averages explicitly
        mixed = mix_shapes([(s.arrival_rate_rps, s) for s in shapes], window=w)
        return mixed.model_copy(
            update={
                "arrival_rate_rps": sum(s.arrival_rate_rps for s in shapes) / steps,
                "concurrency": sum(s.concurrency for s in shapes) / steps,
            }
        )

    def day(self, start: datetime, *, step_s: float = 60.0) -> Iterator[tuple[datetime, TrafficShape]]:
        """``(time, shape)`` every ``step_s`` seconds for 24 hours from ``start``."""
        steps = math.ceil(86_400 / step_s)
        for i in range(steps):
            t = start + timedelta(seconds=i * step_s)
            yield t, self.shape_at(t)

    # ----- internals ----------------------------------------------------------------------------------------------
    def _shape(self, hour: float, *, weekday: int, noise: float) -> TrafficShape:
        weekend = self.weekly and weekday in WEEKEND_DAYS
        pops = list(self.profile.populations.values())
        streams = [self.load_scale * pop.peak_concurrency * pop.intensity(hour, weekend=weekend) for pop in pops]
        rates = [s / pop.request_seconds for s, pop in zip(streams, pops, strict=True)]
        # lengths mix per request; when nobody is active keep the first population's mix, with no load
        weights = rates if sum(rates) > 0 else [1.0] + [0.0] * (len(pops) - 1)
        out_w = sum(w * p.output_tokens.mean for w, p in zip(weights, pops, strict=True))
        in_w = sum(w * p.prompt_tokens.mean for w, p in zip(weights, pops, strict=True))
        return TrafficShape(
            arrival_rate_rps=sum(rates) * noise,
            concurrency=sum(streams) * noise,
            prompt_tokens=_mix_lengths([(w, p.prompt_tokens) for w, p in zip(weights, pops, strict=True)]),
            output_tokens=_mix_lengths([(w, p.output_tokens) for w, p in zip(weights, pops, strict=True)]),
            repetitiveness=min(
                1.0,
                sum(w * p.output_tokens.mean * p.repetitiveness for w, p in zip(weights, pops, strict=True)) / out_w,
            ),
            prefix_share=min(
                1.0, sum(w * p.prompt_tokens.mean * p.prefix_share for w, p in zip(weights, pops, strict=True)) / in_w
            ),
            window=self.window_at(hour),
        )

    def _knot_noise(self, knot: int) -> float:
        cached = self._noise_cache.get(knot)
        if cached is None:
            cv = self.profile.noise_cv
            if cv == 0:
                cached = 1.0
            else:
                sigma = math.sqrt(math.log1p(cv * cv))
                rng = random.Random(f"shiftlight-traffic:{self.seed}:{knot}")
                cached = math.exp(rng.gauss(-sigma * sigma / 2, sigma))  # mean 1
            if len(self._noise_cache) > 100_000:
                self._noise_cache.clear()
            self._noise_cache[knot] = cached
        return cached

    def _noise(self, day: int, minute_of_day: float) -> float:
        if self.profile.noise_cv == 0:
            return 1.0
        span = self.profile.noise_knot_minutes
        # knots are counted over continuous time so noise is continuous across midnight
        position = (day * 1440 + minute_of_day) / span
        k0 = math.floor(position)
        frac = position - k0
        a = self._knot_noise(k0)
        b = self._knot_noise(k0 + 1)
        return a + (b - a) * frac
