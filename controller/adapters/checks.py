"""The argument checks every Cluster and TrafficRouter adapter applies: a weight, a variant, a replica count."""

from __future__ import annotations

from controller.errors import InvalidInput

__all__ = ["VARIANTS", "check_replicas", "check_variant", "check_weight"]

VARIANTS: frozenset[str] = frozenset({"stable", "candidate"})


def check_weight(candidate_weight: int) -> int:
    """Validate a candidate weight (an int in 0..100) or raise :class:`InvalidInput`."""
    if isinstance(candidate_weight, bool) or not isinstance(candidate_weight, int):
        raise InvalidInput(f"must be an integer, got {candidate_weight!r}", field="candidate_weight")
    if not 0 <= candidate_weight <= 100:
        raise InvalidInput(f"must be within 0..100, got {candidate_weight}", field="candidate_weight")
    return candidate_weight


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise InvalidInput(f"unknown variant {variant!r}; expected one of {sorted(VARIANTS)}", field="variant")
    return variant


def check_replicas(replicas: int) -> int:
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise InvalidInput(f"must be a non-negative integer, got {replicas!r}", field="replicas")
    return replicas
