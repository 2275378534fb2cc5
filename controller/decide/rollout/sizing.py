"""A rollout's size and span: the candidate replicas each step runs (its share of the fleet, or a pre-validated
swap's whole surge) and how long a stepped rollout takes. Pure."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from controller.decide.rules import RolloutRules
from controller.domain.rollout import RolloutState


@dataclass(frozen=True)
class Swap:
    """A pre-validated swap's shape: its steps, its bake per step and the candidate replicas it surges at once."""

    steps: tuple[int, ...]
    bake_s: float
    surge_replicas: int


def candidate_replicas_for(fleet_replicas: int, weight: int) -> int:
    """Candidate replicas that carry ``weight`` percent of a fleet of ``fleet_replicas`` at the same load each."""
    return max(1, math.ceil(max(1, fleet_replicas) * weight / 100 - 1e-9))


def rollout_span_s(rules: RolloutRules, cold_start_s: float, fleet_replicas: int) -> float:
    """How long a stepped rollout takes once its first replicas are ready, on a fleet of ``fleet_replicas``: each
    step bakes ``bake_s``, and a step that needs more candidate replicas than the one before
    (:func:`candidate_replicas_for`) first waits for their cold start."""
    needs = [candidate_replicas_for(fleet_replicas, w) for w in rules.steps]
    grows = sum(1 for before, after in itertools.pairwise(needs) if after > before)
    return len(rules.steps) * rules.bake_s + grows * cold_start_s


def candidate_need(state: RolloutState, index: int, fleet_replicas: int) -> int:
    """Ready candidate replicas step ``index`` needs: a swap's whole surge, else the step's share of the fleet."""
    return state.surge_replicas or candidate_replicas_for(fleet_replicas, state.steps[index])


__all__ = ["Swap", "candidate_need", "candidate_replicas_for", "rollout_span_s"]
