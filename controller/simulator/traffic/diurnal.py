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

Profiles are data (:mod:`controller.simulator.traffic.profile`): a preset
(:data:`~controller.simulator.traffic.presets.PRESETS`) or a YAML file
(:meth:`~controller.simulator.traffic.profile.TrafficProfile.from_yaml`), validated by pydantic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from datetime import datetime, timedelta

from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.errors import InvalidInput
from controller.simulator.traffic.presets import load_preset
from controller.simulator.traffic.profile import TrafficProfile

#: Monday = 0 ... Sunday = 6 (``datetime.weekday()``).
WEEKEND_DAYS: frozenset[int] = frozenset({5, 6})


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
