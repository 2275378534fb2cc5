"""What the simulated fleet needs from a performance model (:class:`Estimate`, :class:`Estimator`), and the cache
of its estimates: a replica's steady state is asked for on the shape rounded to a 1 % grid, so near-identical ticks
reuse one estimate.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Protocol

from controller.domain.config import EngineConfig
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, SpecDecodeStats


class Estimate(Protocol):
    """Steady state of one replica under one shape (:class:`controller.simulator.perf.PerfEstimate`)."""

    @property
    def feasible(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def output_tokens_per_s(self) -> float: ...
    @property
    def request_throughput(self) -> float: ...
    @property
    def ttft_s(self) -> Percentiles | None: ...
    @property
    def tpot_s(self) -> Percentiles | None: ...
    @property
    def e2e_s(self) -> Percentiles | None: ...
    @property
    def spec(self) -> SpecDecodeStats | None: ...


class Estimator(Protocol):
    def estimate(self, config: EngineConfig, shape: TrafficShape) -> Estimate: ...


def default_estimator(model: str, gpu: str) -> Estimator:
    """The performance model of ``model`` on ``gpu``."""
    from controller.simulator.perf import PerformanceModel
    from controller.simulator.profiles import load_gpu, load_model

    pm: Estimator = PerformanceModel(load_model(model), load_gpu(gpu))
    return pm


class EstimateCache:
    """An estimator's answers on rounded shapes, the ``limit`` most recently used kept. Thread-safe: fleets on one
    estimator may share it."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._cache: OrderedDict[tuple[object, ...], Estimate] = OrderedDict()
        self._lock = threading.Lock()

    def estimate(self, perf: Estimator, config: EngineConfig, shape: TrafficShape) -> Estimate:
        rounded = _round_shape(shape)
        key = (config, _shape_key(rounded))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        est = perf.estimate(config, rounded)
        with self._lock:
            self._cache[key] = est
            while len(self._cache) > self.limit:
                self._cache.popitem(last=False)
        return est

    def __len__(self) -> int:
        return len(self._cache)


def _round_sig(x: float, rel: float = 0.01) -> float:
    """Round to a 1 % grid in log space (so cached estimates are reused across near-identical ticks)."""
    if x <= 0:
        return x
    step = math.log1p(rel)
    return math.exp(round(math.log(x) / step) * step)


def _round_dist(d: LengthDistribution) -> LengthDistribution:
    mean = _round_sig(d.mean)
    maximum = d.maximum if d.maximum is None or d.maximum >= mean else math.ceil(mean)
    return LengthDistribution(mean=mean, cv=round(d.cv, 2), maximum=maximum)


def _round_shape(shape: TrafficShape) -> TrafficShape:
    return shape.model_copy(
        update={
            "arrival_rate_rps": _round_sig(shape.arrival_rate_rps),
            "concurrency": _round_sig(shape.concurrency),
            "prompt_tokens": _round_dist(shape.prompt_tokens),
            "output_tokens": _round_dist(shape.output_tokens),
            "repetitiveness": round(shape.repetitiveness, 2),
            "prefix_share": round(shape.prefix_share, 2),
            "window": None,
        }
    )


def _shape_key(shape: TrafficShape) -> tuple[object, ...]:
    return (
        shape.arrival_rate_rps,
        shape.concurrency,
        shape.prompt_tokens.mean,
        shape.prompt_tokens.cv,
        shape.prompt_tokens.maximum,
        shape.output_tokens.mean,
        shape.output_tokens.cv,
        shape.output_tokens.maximum,
        shape.repetitiveness,
        shape.prefix_share,
    )
