"""The in-process production fleet: vLLM variants serving diurnal traffic in compressible simulated time.

A :class:`SimulatedFleet` is one tuned service: a ``stable`` variant and optionally a ``candidate`` variant, each a
group of identical replicas running one :class:`EngineConfig`, behind a router that sends ``candidate_weight``
percent of requests to the candidate. :meth:`SimulatedFleet.advance` moves simulated time in ticks (60 s by
default). Each tick:

1. takes the traffic shape at the tick's start from :class:`DiurnalTraffic` (times the injected spike factor);
2. splits the arrival rate ``λ`` across variants by weight and across each variant's *ready* replicas, so one
   replica sees ``r = λ·w/n``; its concurrency follows Little's law at the traffic's own time in system,
   ``c = r·(C/λ) = C·w/n``;
3. asks the performance model for the steady state of that per-replica shape (cached on a shape rounded to 1 %);
4. draws the tick's arrivals (Poisson), fails those beyond the replica's capacity (``est.request_throughput`` at
   that concurrency; every request routed to an infeasible config or to a variant with no ready replica fails too)
   and the injected error share, and counts the good ones: a served request is good with probability
   ``P(TTFT <= slo.ttft) · P(TPOT <= slo.tpot)``, each read off the estimated percentiles by interpolating a
   piecewise-linear distribution through p50/p95/p99 (see :func:`fraction_within`);
5. records a :class:`FleetTick` with per-variant :class:`VariantTick` aggregates: requests, errors, good requests,
   TTFT/TPOT/E2E percentiles, output tokens, speculative acceptance, GPU-seconds (replicas x TP x tick, cold and
   crashed replicas included: they hold their GPUs) and the true shape.

A new variant, or one redeployed with a different config, starts *cold*: its replicas serve nothing for
``cold_start_s`` (default 180 s; vLLM's documented cold start is 2-8 minutes: weights, torch.compile, CUDA graphs).
Added replicas are cold for the same time; removed replicas stop at once. :meth:`promote` swaps the candidate's
warm replicas in as the new stable.

Fault injection (:class:`Faults`, at ``fleet.faults``): latency multiplier and error share per variant, a metrics
fault (``outage``, ``nan``, ``empty``) the metrics adapter acts on, and a traffic spike factor.

Every random draw derives from ``(seed, tick time, variant)``: the same calls with the same seed give the same
ticks. The records live in :mod:`controller.simulator.fleet_records`, the percentile distributions in
:mod:`controller.simulator.percentiles`; both are importable from here too.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Protocol

import numpy as np

from controller.clock import FakeClock
from controller.domain.config import STOCK, EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, SpecDecodeStats
from controller.errors import InvalidInput, NotFound
from controller.simulator.fleet_records import (
    VARIANTS,
    Faults,
    FleetTick,
    MetricsFault,
    VariantState,
    VariantTick,
    totals,
)
from controller.simulator.percentiles import fraction_within, mixture_quantile, scaled
from controller.simulator.traffic import DiurnalTraffic

__all__ = [
    "VARIANTS",
    "Estimate",
    "Estimator",
    "Faults",
    "FleetTick",
    "MetricsFault",
    "SimulatedFleet",
    "VariantState",
    "VariantTick",
    "fraction_within",
    "mixture_quantile",
    "totals",
]


# ----- what the fleet needs from a performance model ---------------------------------------------------------------
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


# ----- the fleet ---------------------------------------------------------------------------------------------------
class SimulatedFleet:
    """One tuned service's production fleet, simulated in process. See the module docstring."""

    def __init__(
        self,
        model: str,
        gpu: str,
        traffic: DiurnalTraffic,
        clock: FakeClock,
        seed: int = 0,
        *,
        stable_config: EngineConfig = STOCK,
        stable_replicas: int = 1,
        slo: SLO | None = None,
        cold_start_s: float = 180.0,
        tick_s: float = 60.0,
        perf: Estimator | None = None,
    ) -> None:
        if cold_start_s < 0:
            raise InvalidInput(f"must be >= 0, got {cold_start_s}", field="cold_start_s")
        if not 0 < tick_s <= 3600:
            raise InvalidInput(f"must be in (0, 3600], got {tick_s}", field="tick_s")
        self.model = model
        self.gpu = gpu
        self.traffic = traffic
        self.clock = clock
        self.seed = int(seed)
        self.slo = slo or SLO()
        self.cold_start_s = float(cold_start_s)
        self.tick_s = float(tick_s)
        self.faults = Faults()
        self.perf: Estimator = perf if perf is not None else _default_perf(model, gpu)
        self.ticks: list[FleetTick] = []
        self._weight = 0
        self._cursor = clock.now()
        self._cache: OrderedDict[tuple[object, ...], Estimate] = OrderedDict()
        now = clock.now()
        self._variants: dict[str, VariantState] = {
            "stable": VariantState("stable", stable_config, [now] * _replicas(stable_replicas), now)
        }

    # ----- control surface (used by the simulated adapters) -------------------------------------------------------
    @property
    def candidate_weight(self) -> int:
        return self._weight

    def set_weight(self, candidate_weight: int) -> None:
        if isinstance(candidate_weight, bool) or not isinstance(candidate_weight, int):
            raise InvalidInput(f"must be an integer, got {candidate_weight!r}", field="candidate_weight")
        if not 0 <= candidate_weight <= 100:
            raise InvalidInput(f"must be within 0..100, got {candidate_weight}", field="candidate_weight")
        self.catch_up()
        self._weight = candidate_weight

    def variant(self, name: str) -> VariantState | None:
        return self._variants.get(_variant(name))

    @property
    def variants(self) -> dict[str, VariantState]:
        return dict(self._variants)

    def deploy(self, variant: str, config: EngineConfig, replicas: int) -> None:
        """Create a variant, or change its config (all replicas restart cold), or just its replica count."""
        name, n = _variant(variant), _replicas(replicas)
        self.catch_up()
        now = self.clock.now()
        current = self._variants.get(name)
        if current is not None and current.config == config:
            self._resize(current, n, now)
            return
        cold = now + timedelta(seconds=self.cold_start_s)
        self._variants[name] = VariantState(name, config, [cold] * n, now)

    def scale(self, variant: str, replicas: int) -> None:
        name, n = _variant(variant), _replicas(replicas)
        self.catch_up()
        current = self._variants.get(name)
        if current is None:
            raise NotFound(f"variant {name!r} is not deployed")
        self._resize(current, n, self.clock.now())

    def retire(self, variant: str) -> None:
        """Remove a variant (no-op when it is already gone). Traffic still routed to it fails."""
        name = _variant(variant)
        self.catch_up()
        self._variants.pop(name, None)

    def promote(self) -> None:
        """The candidate's (warm) replicas become stable; the old stable is retired; all traffic goes to stable."""
        self.catch_up()
        candidate = self._variants.pop("candidate", None)
        if candidate is None:
            raise NotFound("no candidate variant to promote")
        candidate.name = "stable"
        self._variants["stable"] = candidate
        self._weight = 0

    def ready_replicas(self, variant: str) -> int:
        state = self._variants.get(_variant(variant))
        return state.ready(self.clock.now()) if state is not None else 0

    def _resize(self, state: VariantState, n: int, now: datetime) -> None:
        if n > state.replicas:
            state.ready_at.extend([now + timedelta(seconds=self.cold_start_s)] * (n - state.replicas))
        elif n < state.replicas:
            state.ready_at.sort()  # keep the warm ones: cold (newest) replicas go first
            del state.ready_at[n:]

    # ----- time ---------------------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> datetime:
        """Simulate ``seconds`` from now in ticks, moving the clock with them; returns the new time."""
        if seconds < 0:
            raise InvalidInput(f"must be >= 0, got {seconds}", field="seconds")
        self.catch_up()
        end = self.clock.now() + timedelta(seconds=seconds)
        self._simulate_until(end, move_clock=True)
        return self.clock.now()

    def catch_up(self) -> None:
        """Simulate up to the clock's time if someone else moved the clock."""
        if self._cursor < self.clock.now():
            self._simulate_until(self.clock.now(), move_clock=False)

    def _simulate_until(self, end: datetime, *, move_clock: bool) -> None:
        step = timedelta(seconds=self.tick_s)
        while self._cursor < end:
            tick_end = min(self._cursor + step, end)
            self.ticks.append(self._tick(self._cursor, tick_end))
            self._cursor = tick_end
            if move_clock:
                self.clock.set(tick_end)

    # ----- reading back -------------------------------------------------------------------------------------------
    def ticks_between(self, start: datetime, end: datetime) -> list[FleetTick]:
        """Recorded ticks whose start lies in ``[start, end)`` (ticks are recorded in time order)."""
        lo = bisect.bisect_left(self.ticks, start, key=_tick_start)
        hi = bisect.bisect_left(self.ticks, end, lo=lo, key=_tick_start)
        return self.ticks[lo:hi]

    def gpu_seconds(
        self, variant: str | None = None, *, start: datetime | None = None, end: datetime | None = None
    ) -> float:
        """GPU-seconds held (replicas x tensor-parallel size x time) by ``variant`` (or all) in ``[start, end)``."""
        ticks = [t for t in self.ticks if (start is None or t.start >= start) and (end is None or t.start < end)]
        return totals(ticks, variant)["gpu_seconds"]

    # ----- one tick -----------------------------------------------------------------------------------------------
    def _tick(self, start: datetime, end: datetime) -> FleetTick:
        dt = (end - start).total_seconds()
        shape = self.traffic.shape_at(start)
        spike = self.faults.traffic_spike
        if spike != 1.0:
            shape = shape.model_copy(
                update={"arrival_rate_rps": shape.arrival_rate_rps * spike, "concurrency": shape.concurrency * spike}
            )
        weight = self._weight
        shares = {"stable": (100 - weight) / 100, "candidate": weight / 100}
        records: dict[str, VariantTick] = {}
        for index, name in enumerate(VARIANTS):
            state = self._variants.get(name)
            share = shares[name]
            if state is None and share <= 0:
                continue
            records[name] = self._variant_tick(name, index, state, share, round(share * 100), shape, start, dt)
        return FleetTick(start, end, shape, weight, records)

    def _variant_tick(
        self,
        name: str,
        index: int,
        state: VariantState | None,
        share: float,
        weight: int,
        shape: TrafficShape,
        start: datetime,
        dt: float,
    ) -> VariantTick:
        rng = np.random.default_rng([self.seed % 2**63, int(start.timestamp() * 1000) % 2**63, index])
        rate = shape.arrival_rate_rps * share
        conc = shape.concurrency * share
        requests = int(rng.poisson(rate * dt)) if rate > 0 else 0
        replicas = state.replicas if state is not None else 0
        tp = state.config.tensor_parallel_size if state is not None else 1
        gpu_seconds = replicas * tp * dt
        ready = state.ready(start) if state is not None else 0
        vshape = shape.model_copy(update={"arrival_rate_rps": rate, "concurrency": conc}) if share > 0 else None

        def failed(note: str) -> VariantTick:
            return VariantTick(
                variant=name,
                config=state.config if state is not None else None,
                replicas=replicas,
                ready_replicas=ready,
                weight=weight,
                requests=requests,
                errors=requests,
                good_requests=0,
                output_tokens=0.0,
                prompt_tokens=0.0,
                ttft_s=None,
                tpot_s=None,
                e2e_s=None,
                spec_acceptance=None,
                gpu_seconds=gpu_seconds,
                shape=vshape,
                capacity_tokens_per_s=0.0,
                note=note,
            )

        if state is None:
            return failed("not deployed")
        if ready == 0:
            return failed("cold start" if replicas else "no replicas")
        if share <= 0 or rate <= 0:
            return failed("no traffic")  # requests == 0, so nothing fails
        per_replica = shape.model_copy(update={"arrival_rate_rps": rate / ready, "concurrency": conc / ready})
        est = self._estimate(state.config, per_replica)
        if not est.feasible or est.ttft_s is None or est.tpot_s is None:
            return failed(f"infeasible: {est.reason}" if est.reason else "infeasible")
        latency = self.faults.latency_multiplier.get(name, 1.0)
        ttft, tpot, e2e = scaled(est.ttft_s, latency), scaled(est.tpot_s, latency), scaled(est.e2e_s, latency)
        assert ttft is not None and tpot is not None
        capacity_rps = est.request_throughput * ready
        served_share = min(1.0, capacity_rps / rate) if rate > 0 else 1.0
        saturated = int(rng.binomial(requests, 1.0 - served_share)) if served_share < 1.0 else 0
        served = requests - saturated
        injected = self.faults.error_rate.get(name, 0.0)
        injected_errors = int(rng.binomial(served, min(max(injected, 0.0), 1.0))) if injected > 0 else 0
        ok = served - injected_errors
        p_good = fraction_within(ttft, self.slo.ttft_seconds) * fraction_within(tpot, self.slo.tpot_seconds)
        good = int(rng.binomial(ok, p_good)) if ok else 0
        notes = []
        if saturated:
            notes.append(f"saturated: capacity {capacity_rps:.2f} req/s < offered {rate:.2f} req/s")
        if injected_errors:
            notes.append("injected errors")
        return VariantTick(
            variant=name,
            config=state.config,
            replicas=replicas,
            ready_replicas=ready,
            weight=weight,
            requests=requests,
            errors=saturated + injected_errors,
            good_requests=good,
            output_tokens=ok * shape.output_tokens.mean,
            prompt_tokens=ok * shape.prompt_tokens.mean,
            ttft_s=ttft,
            tpot_s=tpot,
            e2e_s=e2e,
            spec_acceptance=est.spec.acceptance_rate if est.spec is not None else None,
            gpu_seconds=gpu_seconds,
            shape=vshape,
            capacity_tokens_per_s=est.output_tokens_per_s * ready,
            note="; ".join(notes),
        )

    def _estimate(self, config: EngineConfig, shape: TrafficShape) -> Estimate:
        rounded = _round_shape(shape)
        key = (config, _shape_key(rounded))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        est = self.perf.estimate(config, rounded)
        self._cache[key] = est
        if len(self._cache) > 20_000:
            self._cache.popitem(last=False)
        return est


# ----- helpers -----------------------------------------------------------------------------------------------------
def _default_perf(model: str, gpu: str) -> Estimator:
    from controller.simulator.perf import PerformanceModel
    from controller.simulator.profiles import load_gpu, load_model

    pm: Estimator = PerformanceModel(load_model(model), load_gpu(gpu))
    return pm


def _tick_start(tick: FleetTick) -> datetime:
    return tick.start


def _variant(name: str) -> str:
    if name not in VARIANTS:
        raise InvalidInput(f"unknown variant {name!r}; expected one of {list(VARIANTS)}", field="variant")
    return name


def _replicas(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInput(f"must be a non-negative integer, got {n!r}", field="replicas")
    return n


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
