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
ticks. One variant's tick is :func:`controller.simulator.fleet.tick.variant_tick`; the records live in
:mod:`controller.simulator.fleet.records` and are kept in columns (:class:`~controller.simulator.fleet.history.TickLog`,
about 0.4 KB a tick), the percentile distributions in :mod:`controller.simulator.percentiles`,
the performance model's estimates and their cache in :mod:`controller.simulator.fleet.estimates`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from controller.clock import FakeClock
from controller.domain.config import STOCK, EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.errors import InvalidInput, NotFound
from controller.simulator.fleet.estimates import Estimate, EstimateCache, Estimator, default_estimator
from controller.simulator.fleet.history import TickLog
from controller.simulator.fleet.records import VARIANTS, Faults, FleetTick, VariantState, VariantTick, totals
from controller.simulator.fleet.tick import variant_tick
from controller.simulator.traffic.diurnal import DiurnalTraffic


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
        history_s: float | None = None,
        estimates: EstimateCache | None = None,
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
        self.perf: Estimator = perf if perf is not None else default_estimator(model, gpu)
        self.ticks = TickLog()
        self.history_s = history_s
        """Keep only the ticks that started in the last ``history_s`` seconds (None: all of them); a long-running
        fleet (the operator's ``simulator`` backend) then holds a bounded history, as Prometheus keeps a retention."""
        self._weight = 0
        self._cursor = clock.now()
        self._estimates = estimates if estimates is not None else EstimateCache()
        """The performance model's answers; fleets on the same ``perf`` may share one (a bounded cache: the operator's
        ``simulator`` backend gives its fleets one per model and GPU)."""
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

    @property
    def estimates(self) -> EstimateCache:
        """The cache of the performance model's answers (shared by fleets given the same one)."""
        return self._estimates

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
        if self.history_s is not None:
            self.ticks.drop_before(self._cursor - timedelta(seconds=self.history_s))

    # ----- reading back -------------------------------------------------------------------------------------------
    def ticks_between(self, start: datetime, end: datetime) -> list[FleetTick]:
        """Recorded ticks whose start lies in ``[start, end)`` (ticks are recorded in time order)."""
        return self.ticks.between(start, end)

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
            records[name] = variant_tick(
                name,
                index,
                state,
                share,
                round(share * 100),
                shape,
                start,
                dt,
                seed=self.seed,
                faults=self.faults,
                slo=self.slo,
                estimate=self._estimate,
            )
        return FleetTick(start, end, shape, weight, records)

    def _estimate(self, config: EngineConfig, shape: TrafficShape) -> Estimate:
        return self._estimates.estimate(self.perf, config, shape)


# ----- helpers -----------------------------------------------------------------------------------------------------
def _variant(name: str) -> str:
    if name not in VARIANTS:
        raise InvalidInput(f"unknown variant {name!r}; expected one of {list(VARIANTS)}", field="variant")
    return name


def _replicas(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInput(f"must be a non-negative integer, got {n!r}", field="replicas")
    return n
