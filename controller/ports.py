"""The ports: one small Protocol per outside concern, and the requests they take. Adapters implement them; the
control loop (``controller.reconcile``) holds them. The values the ports pass (observations, trial results,
proposals) live in :mod:`controller.domain`; ``controller.decide`` never imports this module.

Port: in-memory / simulated adapter -> real adapter (module paths under ``controller``):

* ``MetricsSource``: adapters.simulated.fleet.SimulatedMetrics -> observe.prometheus.PrometheusMetrics,
  observe.grafana.GrafanaMetrics;
* ``Forecaster``: adapters.simulated.fleet.SimulatedForecaster -> observe.profile_forecaster.ProfileForecaster;
* ``LoadTester``: adapters.simulated.loadtester.SimulatedLoadTester -> trials.runner.TrialRunner (a local vLLM
  process or a Kubernetes canary pod, adapters.kube.canary); ``TrialStarter`` (trials started, then polled by later
  cycles): trials.background.BackgroundLoadTester around any LoadTester;
* ``TrafficRouter``: testing.memory.InMemoryRouter, adapters.simulated.fleet.SimulatedRouter ->
  adapters.routing.gateway.GatewayRouter (Gateway API HTTPRoute weights);
* ``Advisor``: decide.optimizer.OptimizerAdvisor (in process, no I/O) -> advisor.graph.AgentAdvisor (LangGraph
  agent on an OpenAI-compatible endpoint);
* ``Notifier``: adapters.notify.recording.RecordingNotifier -> adapters.notify.slack.SlackNotifier,
  adapters.notify.grafana.GrafanaAnnotator;
* ``Cluster``: testing.memory.InMemoryCluster, adapters.simulated.fleet.SimulatedCluster ->
  adapters.kube.cluster.KubeCluster;
* ``Clock``: clock.FakeClock -> clock.SystemClock.

``controller.testing.faults`` wraps any of these with faults (failing canaries, 409 on writes, advisors that are
down or answer garbage) for testing an integration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import ClassVar, Literal, Protocol, runtime_checkable

from controller.domain import trial_defaults
from controller.domain.actions import Notify
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation, TargetRef
from controller.domain.profile import TrafficProfile
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.slo import SLO
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """Current time, timezone-aware (UTC)."""
        ...


@runtime_checkable
class MetricsSource(Protocol):
    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        """Traffic shape and per-variant SLO signals for ``[start, end)``.

        Raises :class:`controller.errors.MetricsUnavailable` when the data is missing or untrustworthy.
        """
        ...


@runtime_checkable
class Forecaster(Protocol):
    def window_shapes(
        self, target: TargetRef, *, windows: Sequence[TimeWindow], now: datetime
    ) -> Mapping[str, TrafficShape]:
        """The fleet-level traffic shape expected in each window's busy hour over the next day, from history
        (the hour-of-week profile). Windows without enough history are left out."""
        ...

    def profile_state(self) -> TrafficProfile | None:
        """The profile the forecasts come from, for the target's status (None: nothing worth keeping)."""
        ...

    def restore(self, profile: TrafficProfile) -> None:
        """Resume from a profile kept in status (after a restart) instead of re-querying weeks of history."""
        ...


@dataclass(frozen=True)
class TrialBudget:
    """How much canary time one trial may use."""

    duration_s: float = trial_defaults.DURATION_S
    warmup_s: float = trial_defaults.WARMUP_S
    max_requests: int = trial_defaults.MAX_REQUESTS
    startup_timeout_s: float = trial_defaults.STARTUP_TIMEOUT_S

    #: The longest time in system a trial stretches itself for (bounds the canary time one trial may take).
    MAX_TIME_IN_SYSTEM_S: ClassVar[float] = 900.0

    def for_shape(self, shape: TrafficShape) -> TrialBudget:
        """This budget stretched to reach the shape's steady state: a replica fed ``shape`` holds its mean
        concurrency only after about one mean time in system (concurrency / arrival rate, Little's law), so the
        warm-up lasts at least that long and the measured window at least twice that. Otherwise a trial of
        90-second document requests measures a half-empty replica and overstates what it carries."""
        if shape.arrival_rate_rps <= 0 or shape.concurrency <= 0:
            return self
        in_system = min(shape.concurrency / shape.arrival_rate_rps, self.MAX_TIME_IN_SYSTEM_S)
        return replace(self, warmup_s=max(self.warmup_s, in_system), duration_s=max(self.duration_s, 2 * in_system))


@dataclass(frozen=True)
class TrialRequest:
    target: TargetRef
    config: EngineConfig
    shape: TrafficShape
    slo: SLO
    budget: TrialBudget = field(default_factory=TrialBudget)
    seed: int = 0
    loop: Literal["open", "closed"] | None = None
    """``open``: Poisson arrivals at the shape's rate (does one replica hold the SLO at that rate?); ``closed``: the
    shape's concurrency as streams that send again when answered (what does it deliver at that concurrency?);
    None: the load tester's default."""
    fresh: bool = False
    """Measure even when a cached result for this config and shape exists (a repeat that measures the noise)."""
    reason: str = ""
    """Why the trial was decided (its ``RunTrial``'s reason); the Trial CR's ``spec.reason``."""
    proposed_by: str = ""
    """Who proposed the config: the optimizer, an agent's name, the fallback, ``baseline``, ``repeat``, ...; the
    Trial CR's ``spec.proposedBy``."""


@runtime_checkable
class LoadTester(Protocol):
    def run(self, request: TrialRequest) -> TrialResult:
        """Launch the candidate, replay the shape, measure, tear down. Never raises for a bad config:
        crashes, refusals and timeouts come back as an ``infeasible`` TrialResult."""
        ...


@runtime_checkable
class TrialHandle(Protocol):
    def poll(self) -> TrialResult | None:
        """The trial's result once it has finished, None while it still runs. Asking again after the result came
        back returns the same result."""
        ...


@runtime_checkable
class TrialStarter(Protocol):
    """A load tester whose trials run in the background: the control cycle starts one and polls it in later cycles
    instead of waiting. A plain :class:`LoadTester` (``run`` only) completes within the cycle that starts it."""

    def start(self, request: TrialRequest) -> TrialHandle:
        """Begin the trial and return at once. Same contract as :meth:`LoadTester.run` for the eventual result."""
        ...


@runtime_checkable
class TrafficRouter(Protocol):
    def get_weight(self, target: TargetRef) -> int:
        """Percent of traffic currently routed to the candidate (0-100)."""
        ...

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        """Route ``candidate_weight`` percent to the candidate and the rest to stable."""
        ...


@runtime_checkable
class Advisor(Protocol):
    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        """Candidate configs worth a trial, best guess first. Output is validated before anything runs."""
        ...


@runtime_checkable
class Notifier(Protocol):
    def post(self, target: TargetRef, notification: Notify) -> None:
        """Deliver a notification. Must not block the control loop for long or raise on delivery failure."""
        ...


@runtime_checkable
class Cluster(Protocol):
    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        """Create or update a variant (``stable`` / ``candidate``) running ``config``."""
        ...

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None: ...

    def retire(self, target: TargetRef, variant: str) -> None:
        """Remove a variant after traffic has left it."""
        ...

    def promote(self, target: TargetRef) -> EngineConfig | None:
        """The candidate becomes stable: its warm pods keep serving, the old stable variant is retired and the
        route sends everything to the new stable. (Gateway: backendRefs swapped; Deployments relabelled.)
        Returns the config the promoted variant runs as read back from the cluster (None where it cannot say): the
        status records that one as active."""
        ...

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        """Replicas of the variant that pass readiness (0 while a new config is still starting)."""
        ...

    def external_autoscaler(self, target: TargetRef) -> str | None:
        """``Kind/name`` of an HPA or KEDA ScaledObject that already scales the stable workload, if any."""
        ...

    def record_event(
        self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        """An Event about the target: ``reason`` (a reason code in CamelCase), ``message`` (the sentence) and
        ``action``, the type of the action it records (``SetWeights``, ``Promote``, ...; empty when none)."""
        ...
