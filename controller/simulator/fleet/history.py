"""The simulated fleet's recorded ticks, kept in columns: :class:`TickLog`.

A long-running fleet (one per TunedService in the operator's ``simulator`` backend) holds hours of ticks. As objects
(a :class:`FleetTick` with its traffic shape and a :class:`VariantTick` per variant, each a pydantic or dataclass
instance with its own floats) a tick took about 5 KB; here it takes about 0.4 KB: the numbers in typed arrays
(``array('d')``, ``array('q')``) and, per variant, references to the objects ticks share (the config, the
percentile distributions of the cached estimate, the traffic window, the note). A tick is built back as the same
:class:`FleetTick` when it is read (indexing, slicing, iteration).
"""

from __future__ import annotations

import bisect
import math
import sys
from array import array
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import cast, overload

from controller.domain.config import EngineConfig
from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.domain.trial import Percentiles
from controller.simulator.fleet.records import VARIANTS, FleetTick, VariantTick

_US = timedelta(microseconds=1)
_SHAPE = 10  # rate, concurrency, prompt (mean, cv, max), output (mean, cv, max), repetitiveness, prefix share
_INTS = 6  # replicas, ready replicas, weight, requests, errors, good requests
_FLOATS = 5  # output tokens, prompt tokens, speculative acceptance (nan: none), GPU-seconds, capacity
_OBJECTS = 5  # config, TTFT, TPOT and E2E percentiles, note


class _Variant:
    """One variant's columns; a tick in which the variant was absent has ``present`` 0."""

    __slots__ = ("floats", "ints", "objects", "present")

    def __init__(self) -> None:
        self.present = array("b")
        self.ints = array("q")
        self.floats = array("d")
        self.objects: list[EngineConfig | Percentiles | str | None] = []  # config, TTFT, TPOT, E2E, note

    def append(self, v: VariantTick | None) -> None:
        if v is None:
            self.present.append(0)
            self.ints.extend((0,) * _INTS)
            self.floats.extend((0.0,) * _FLOATS)
            self.objects.extend((None, None, None, None, ""))
            return
        self.present.append(1)
        self.ints.extend((v.replicas, v.ready_replicas, v.weight, v.requests, v.errors, v.good_requests))
        spec = math.nan if v.spec_acceptance is None else v.spec_acceptance
        self.floats.extend((v.output_tokens, v.prompt_tokens, spec, v.gpu_seconds, v.capacity_tokens_per_s))
        self.objects.extend((v.config, v.ttft_s, v.tpot_s, v.e2e_s, v.note))

    def drop(self, n: int) -> None:
        del self.present[:n]
        del self.ints[: n * _INTS]
        del self.floats[: n * _FLOATS]
        del self.objects[: n * _OBJECTS]

    def get(self, name: str, i: int) -> VariantTick | None:
        if not self.present[i]:
            return None
        replicas, ready, weight, requests, errors, good = self.ints[i * _INTS : (i + 1) * _INTS]
        output, prompt, spec, gpu, capacity = self.floats[i * _FLOATS : (i + 1) * _FLOATS]
        config, ttft, tpot, e2e, note = self.objects[i * _OBJECTS : (i + 1) * _OBJECTS]
        assert config is None or isinstance(config, EngineConfig)
        assert isinstance(note, str)
        return VariantTick(
            variant=name,
            config=config,
            replicas=replicas,
            ready_replicas=ready,
            weight=weight,
            requests=requests,
            errors=errors,
            good_requests=good,
            output_tokens=output,
            prompt_tokens=prompt,
            ttft_s=cast(Percentiles | None, ttft),
            tpot_s=cast(Percentiles | None, tpot),
            e2e_s=cast(Percentiles | None, e2e),
            spec_acceptance=None if math.isnan(spec) else spec,
            gpu_seconds=gpu,
            capacity_tokens_per_s=capacity,
            note=note,
        )


class TickLog(Sequence[FleetTick]):
    """Ticks in time order, stored in columns; reads give :class:`FleetTick` objects equal to those appended."""

    def __init__(self) -> None:
        self._start = array("q")  # microseconds since the epoch
        self._end = array("q")
        self._weight = array("q")
        self._shape = array("d")
        self._window: list[TimeWindow | None] = []
        self._variants = {name: _Variant() for name in VARIANTS}
        self._tz: tzinfo | None = UTC

    # ----- writing --------------------------------------------------------------------------------------------------
    def append(self, tick: FleetTick) -> None:
        if not self._start:
            self._tz = tick.start.tzinfo
        s = tick.shape
        self._start.append(self._micros(tick.start))
        self._end.append(self._micros(tick.end))
        self._weight.append(tick.candidate_weight)
        self._shape.extend(
            (
                s.arrival_rate_rps,
                s.concurrency,
                *_length(s.prompt_tokens),
                *_length(s.output_tokens),
                s.repetitiveness,
                s.prefix_share,
            )
        )
        self._window.append(s.window)
        for name, columns in self._variants.items():
            columns.append(tick.variants.get(name))

    def drop_before(self, start: datetime) -> None:
        """Forget the ticks that started before ``start``."""
        n = bisect.bisect_left(self._start, self._micros(start))
        if n == 0:
            return
        del self._start[:n]
        del self._end[:n]
        del self._weight[:n]
        del self._shape[: n * _SHAPE]
        del self._window[:n]
        for columns in self._variants.values():
            columns.drop(n)

    # ----- reading --------------------------------------------------------------------------------------------------
    def between(self, start: datetime, end: datetime) -> list[FleetTick]:
        """Ticks whose start lies in ``[start, end)``."""
        lo = bisect.bisect_left(self._start, self._micros(start))
        hi = bisect.bisect_left(self._start, self._micros(end), lo=lo)
        return [self._tick(i) for i in range(lo, hi)]

    def __len__(self) -> int:
        return len(self._start)

    def footprint(self) -> int:
        """Bytes the log's own columns hold (the configs, distributions and windows it refers to are shared)."""
        arrays = [self._start, self._end, self._weight, self._shape]
        lists = [sys.getsizeof(self._window)]
        for columns in self._variants.values():
            arrays += [columns.present, columns.ints, columns.floats]
            lists.append(sys.getsizeof(columns.objects))
        return sum(map(sys.getsizeof, arrays)) + sum(lists)

    @overload
    def __getitem__(self, index: int) -> FleetTick: ...
    @overload
    def __getitem__(self, index: slice) -> list[FleetTick]: ...
    def __getitem__(self, index: int | slice) -> FleetTick | list[FleetTick]:
        if isinstance(index, slice):
            return [self._tick(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("tick index out of range")
        return self._tick(index)

    def __iter__(self) -> Iterator[FleetTick]:
        for i in range(len(self)):
            yield self._tick(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TickLog | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it replaces

    def _tick(self, i: int) -> FleetTick:
        rate, conc, p_mean, p_cv, p_max, o_mean, o_cv, o_max, rep, prefix = self._shape[i * _SHAPE : (i + 1) * _SHAPE]
        shape = TrafficShape.model_construct(
            arrival_rate_rps=rate,
            concurrency=conc,
            prompt_tokens=_distribution(p_mean, p_cv, p_max),
            output_tokens=_distribution(o_mean, o_cv, o_max),
            repetitiveness=rep,
            prefix_share=prefix,
            window=self._window[i],
        )
        variants = {}
        for name, columns in self._variants.items():
            v = columns.get(name, i)
            if v is not None:
                variants[name] = v
        return FleetTick(self._time(self._start[i]), self._time(self._end[i]), shape, self._weight[i], variants)

    # ----- time -----------------------------------------------------------------------------------------------------
    def _epoch(self) -> datetime:
        return datetime(1970, 1, 1, tzinfo=self._tz)

    def _micros(self, when: datetime) -> int:
        return (when - self._epoch()) // _US

    def _time(self, micros: int) -> datetime:
        return self._epoch() + timedelta(microseconds=micros)


def _length(d: LengthDistribution) -> tuple[float, float, float]:
    return d.mean, d.cv, math.nan if d.maximum is None else float(d.maximum)


def _distribution(mean: float, cv: float, maximum: float) -> LengthDistribution:
    return LengthDistribution.model_construct(mean=mean, cv=cv, maximum=None if math.isnan(maximum) else int(maximum))


__all__ = ["TickLog"]
