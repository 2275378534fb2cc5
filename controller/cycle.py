"""One recipe for the control cycle: :func:`cycle_for` builds the :class:`~controller.reconcile.Reconciler` of a
target from its spec, its policy, the caller's cycle settings and the ports.

Every composition root goes through it: the Kubernetes and simulator backends of the operator, the demo and the
week bench. The rules come from :meth:`~controller.decide.rules.Rules.from_policy` alone (the one translation of
a policy into what decide reads): the spec gives the time-of-day windows and the replica bounds Shiftlight manages,
the policy everything else (the SLO, the trial budget, the rollout, the scaling headroom, the capacity probes'
loop). What differs between the roots is passed in, never rebuilt as rules of their own: the ports (a forecaster
where one is known, Prometheus' or the simulated traffic's), the digest, the GPU-hour price.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controller.crd.tuned_service import ReplicaBounds, TunedServiceSpec
from controller.decide import DigestRules, Rules
from controller.domain import evidence
from controller.domain.traffic import TimeWindow
from controller.domain.trial import TrialResult
from controller.policy import Policy
from controller.reconcile import Ports, Reconciler


@dataclass(frozen=True)
class CycleSpec:
    """What a target's spec says about its cycle: its time-of-day windows (none: one all-day window) and the
    replica bounds Shiftlight manages (None: it leaves the replica count alone)."""

    windows: tuple[TimeWindow, ...] = ()
    replicas: ReplicaBounds | None = None

    @classmethod
    def of(cls, spec: TunedServiceSpec, *, default_windows: Sequence[TimeWindow] = ()) -> CycleSpec:
        """A TunedService's ``spec.schedule`` (``default_windows`` when it sets none) and ``spec.replicas``."""
        return cls(windows=tuple(spec.schedule) or tuple(default_windows), replicas=spec.replicas)


@dataclass(frozen=True)
class CycleSettings:
    """What the caller of the cycle chooses, beside the spec and the policy."""

    observe_window_s: float = 300.0
    """How far back each cycle's observation reaches (at least the time between two cycles)."""
    trial_seed: int = 0
    digest: DigestRules | None = None
    """The daily digest (None: none)."""
    gpu_price: evidence.GpuPrice | None = None
    """What a GPU-hour costs, for a decision's cost in its notice (None: GPU-hours only)."""
    on_trial: Callable[[TrialResult], None] | None = None
    """Told of every trial a cycle folds."""


def rules_for(spec: TunedServiceSpec | CycleSpec, policy: Policy, settings: CycleSettings) -> Rules:
    """The planner's rules for a target: its policy, its windows, the replicas it lets Shiftlight manage."""
    cycle = spec if isinstance(spec, CycleSpec) else CycleSpec.of(spec)
    bounds = cycle.replicas
    replicas = (bounds.min_replicas, bounds.max_replicas) if bounds is not None else None
    return Rules.from_policy(policy, cycle.windows, replicas=replicas, digest=settings.digest)


def cycle_for(spec: TunedServiceSpec | CycleSpec, policy: Policy, settings: CycleSettings, ports: Ports) -> Reconciler:
    """The control cycle of one target (a TunedService's spec, or a :class:`CycleSpec` where there is none)."""
    return Reconciler(
        ports,
        rules_for(spec, policy, settings),
        observe_window_s=settings.observe_window_s,
        trial_seed=settings.trial_seed,
        on_trial=settings.on_trial,
        gpu_price=settings.gpu_price,
    )


__all__ = ["CycleSettings", "CycleSpec", "cycle_for", "rules_for"]
