"""A simulated traffic profile as data: its *populations* of clients (each a fixed request mix, a peak number of
concurrent streams, a nominal time in system per request and an *intensity curve* over the hour of day), the named
windows of the day, and noise. Profiles are validated by pydantic, from a preset
(:mod:`controller.simulator.traffic.presets`) or a YAML file (:meth:`TrafficProfile.from_yaml`);
:class:`~controller.simulator.traffic.diurnal.DiurnalTraffic` turns one into a traffic shape at any simulated time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controller.domain.traffic import LengthDistribution, TimeWindow
from controller.errors import InvalidInput


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
