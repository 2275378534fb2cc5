"""Priors for the optimizer from the simulator's performance model (the optimizer itself never imports it)."""

from __future__ import annotations

import importlib
from typing import Any

from controller.decide import ShapePrior
from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape
from controller.policy import Policy


def simulator_prior(model: str, gpu: str) -> ShapePrior:
    """``(config, shape) -> estimated output tokens/s`` (0 when the config does not fit) for two profiles."""
    perf_mod = importlib.import_module("controller.simulator.perf")
    perf: Any = perf_mod.PerformanceModel.shared(model, gpu)  # one per (model, GPU), bounded

    def prior(config: EngineConfig, shape: TrafficShape) -> float:
        if perf.feasibility(config) is not None:
            return 0.0
        return float(perf.estimate(config, shape).output_tokens_per_s)

    return prior


def policy_prior(policy: Policy) -> ShapePrior | None:
    """The simulator prior for the policy's target, when it names known profiles; else None."""
    if policy.target.model is None or policy.target.gpu is None:
        return None
    try:
        return simulator_prior(policy.target.model, policy.target.gpu)
    except Exception:  # unknown profile or no simulator: no prior
        return None


__all__ = ["policy_prior", "simulator_prior"]
