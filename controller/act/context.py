"""What the act handlers are given: the target, the ports they act through and the trial settings."""

from __future__ import annotations

from dataclasses import dataclass

from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.ports import Cluster, LoadTester, Notifier, TrafficRouter, TrialBudget


@dataclass(frozen=True)
class ActPorts:
    router: TrafficRouter
    cluster: Cluster
    notifier: Notifier
    load_tester: LoadTester


@dataclass(frozen=True)
class TrialSettings:
    """How every trial of a target is measured: against which SLO, with what canary budget, from which seed."""

    slo: SLO
    budget: TrialBudget
    seed: int = 0


@dataclass(frozen=True)
class ActContext:
    target: TargetRef
    ports: ActPorts
    trials: TrialSettings
