"""What a cluster that keeps its own record (the simulated fleet, the in-memory cluster) writes down: each call
made on it and each Event recorded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef

__all__ = ["ClusterCall", "RecordedEvent"]


@dataclass(frozen=True)
class ClusterCall:
    """One call made on a cluster adapter, in the order it was made."""

    op: Literal["deploy", "scale", "retire", "promote", "event"]
    target: TargetRef
    variant: str = ""
    config: EngineConfig | None = None
    replicas: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class RecordedEvent:
    """A Kubernetes-Event-like record: what happened to a target, when and why."""

    target: TargetRef
    reason: str
    message: str
    warning: bool
    at: datetime | None
    action: str = ""
    """The type of the action the Event records (``SetWeights``, ``Promote``, ...; empty when none)."""
