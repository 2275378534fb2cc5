"""One tick of the simulated fleet for one variant: the requests its share of the traffic brings, drawn (Poisson),
and what becomes of them (failed, saturated, injected errors, good), as a :class:`VariantTick`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import numpy as np

from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.simulator.fleet.estimates import Estimate
from controller.simulator.fleet.records import Faults, VariantState, VariantTick
from controller.simulator.percentiles import fraction_within, scaled


def variant_tick(
    name: str,
    index: int,
    state: VariantState | None,
    share: float,
    weight: int,
    shape: TrafficShape,
    start: datetime,
    dt: float,
    *,
    seed: int,
    faults: Faults,
    slo: SLO,
    estimate: Callable[[EngineConfig, TrafficShape], Estimate],
) -> VariantTick:
    """One variant's record of one tick of ``dt`` seconds from ``start``: its ``share`` of ``shape``'s requests drawn,
    failed where no replica is ready, the config is infeasible or the replicas are saturated, the injected errors,
    and the good requests (see :mod:`controller.simulator.fleet.service`, steps 2-5). Draws derive from ``(seed, start,
    index)``."""
    rng = np.random.default_rng([seed % 2**63, int(start.timestamp() * 1000) % 2**63, index])
    rate = shape.arrival_rate_rps * share
    conc = shape.concurrency * share
    requests = int(rng.poisson(rate * dt)) if rate > 0 else 0
    replicas = state.replicas if state is not None else 0
    tp = state.config.tensor_parallel_size if state is not None else 1
    gpu_seconds = replicas * tp * dt
    ready = state.ready(start) if state is not None else 0

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
    est = estimate(state.config, per_replica)
    if not est.feasible or est.ttft_s is None or est.tpot_s is None:
        return failed(f"infeasible: {est.reason}" if est.reason else "infeasible")
    latency = faults.latency_multiplier.get(name, 1.0)
    ttft, tpot, e2e = scaled(est.ttft_s, latency), scaled(est.tpot_s, latency), scaled(est.e2e_s, latency)
    assert ttft is not None and tpot is not None
    capacity_rps = est.request_throughput * ready
    served_share = min(1.0, capacity_rps / rate) if rate > 0 else 1.0
    saturated = int(rng.binomial(requests, 1.0 - served_share)) if served_share < 1.0 else 0
    served = requests - saturated
    injected = faults.error_rate.get(name, 0.0)
    injected_errors = int(rng.binomial(served, min(max(injected, 0.0), 1.0))) if injected > 0 else 0
    ok = served - injected_errors
    p_good = fraction_within(ttft, slo.ttft_seconds) * fraction_within(tpot, slo.tpot_seconds)
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
        capacity_tokens_per_s=est.output_tokens_per_s * ready,
        note="; ".join(notes),
    )
