"""What the planner is told to do: the tuning, schedule, digest and capacity rules (from the policy). Pure values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from controller.decide.signals import drift as drifts
from controller.domain import rollout_defaults as defaults
from controller.domain import trial_defaults, tuning_defaults
from controller.domain.approval import ApprovalMode
from controller.domain.config import EngineConfig
from controller.domain.rollout_defaults import MissingDataAction
from controller.domain.slo import SLO
from controller.domain.traffic import TimeWindow
from controller.policy import scaling as scaling_defaults
from controller.policy.models import DEFAULT_LOSSY, LossyRule, Policy, lossy_reasons
from controller.policy.scaling import ProbeLoop
from controller.policy.space import SearchSpace

DEFAULT_WINDOWS: tuple[TimeWindow, ...] = (TimeWindow(name="all-day", start_hour=0, end_hour=24),)


ExternalMode = Literal["defer", "takeover"]


@dataclass(frozen=True)
class RolloutRules:
    """How a rollout proceeds. Built from the policy by the act layer; defaults are the policy's."""

    steps: tuple[int, ...] = defaults.STEPS
    bake_s: float = defaults.BAKE_SECONDS
    min_samples: int = defaults.MIN_SAMPLES
    max_ttft_regression: float = defaults.MAX_TTFT_REGRESSION
    """Candidate p95 TTFT may exceed stable's by at most this fraction, even inside the SLO."""
    max_tpot_regression: float = defaults.MAX_TPOT_REGRESSION
    max_error_rate_increase: float = 0.005
    max_error_rate: float = defaults.MAX_ERROR_RATE
    """Absolute ceiling on the candidate's error rate, whatever stable's."""
    min_goodput_ratio: float = defaults.MIN_GOODPUT_RATIO
    """Candidate/stable goodput per replica, at the load each replica carries (see :func:`goodput_ratio`)."""
    analysis_interval_s: float = defaults.ANALYSIS_INTERVAL_SECONDS
    """How often a rollout in progress is analysed (the loop's requeue while RollingOut)."""
    on_missing_data: MissingDataAction = defaults.ON_MISSING_DATA
    """``hold``: a step whose data cannot be judged waits; ``rollback``: it rolls back once it has baked."""
    manual_gates: tuple[int, ...] = ()
    """Step indexes that wait for a human before their weight is applied (0 = the first step)."""
    slo_headroom: float = defaults.SLO_HEADROOM
    """A candidate whose latency at the SLO's percentile is at most this fraction of the SLO bound is not failed on
    its ratio to stable alone (0: never waived). The ratio is a proxy for headroom the SLO would lose, and it moves
    for reasons that are not the config: at a window boundary the traffic is changing shape under the rollout, the
    candidate's replicas carry a different load per replica than stable's under weighted routing, and a config
    tuned for the next window's shape is judged on the current window's traffic. Far inside the SLO (at the
    percentile the SLO is on, so a p99 bound is judged by the p99) the ratio says nothing the SLO needs; a breach of
    the SLO, errors, goodput and data that cannot be judged are checked as before."""
    rejection_memory_s: float = defaults.REJECTION_MEMORY_SECONDS
    """A config a human rejected for a window is not proposed for it again for this long, unless the window's
    traffic drifts from the shape it had when rejected (:mod:`controller.decide.rejections`)."""
    low_traffic_after_s: float = 2400.0
    """A step that has baked this long with no regression signal passes on fewer than ``min_samples`` requests
    (quiet hours would otherwise hold a rollout for the whole night); it still needs ``min_failure_samples``."""

    def __post_init__(self) -> None:
        if not self.steps or self.steps[-1] != 100:
            raise ValueError("rollout steps must end at 100")
        if any(not 0 < s <= 100 for s in self.steps) or list(self.steps) != sorted(set(self.steps)):
            raise ValueError("rollout steps must be strictly increasing percentages in (0, 100]")
        if not 0 <= self.max_error_rate <= 1 or self.min_goodput_ratio < 0 or self.analysis_interval_s <= 0:
            raise ValueError("need 0 <= max_error_rate <= 1, min_goodput_ratio >= 0 and analysis_interval_s > 0")
        if not 0 <= self.slo_headroom < 1:
            raise ValueError("need 0 <= slo_headroom < 1")
        if self.rejection_memory_s < 0:
            raise ValueError("need rejection_memory_s >= 0")

    @property
    def min_failure_samples(self) -> int:
        """A clear failure needs fewer samples than a success: rolling back early is cheap, promoting is not."""
        return max(10, self.min_samples // 4)


@dataclass(frozen=True)
class ScalingRules:
    min_replicas: int = 1
    max_replicas: int = 8
    headroom: float = scaling_defaults.HEADROOM
    """Spare capacity kept above the forecast (0.2 = plan for 120% of the forecast load)."""
    scale_down_stabilisation_s: float = scaling_defaults.SCALE_DOWN_STABILISATION_SECONDS
    """Desired replicas must stay below the current count this long before replicas are removed."""
    external_autoscaler_mode: ExternalMode = "defer"
    lead_s: float = 600.0
    """While the load rises towards its window's forecast busy hour, replicas are sized for the load expected this
    long ahead (a replica added now serves after a cold start, and the next decision comes a control cycle
    later); 0 sizes from the observed load alone."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")
        if self.headroom < 0:
            raise ValueError("headroom must be >= 0")
        if self.lead_s < 0:
            raise ValueError("lead_s must be >= 0")


@dataclass(frozen=True)
class ProbeRules:
    first_factor: float = 2.0
    """The first probe replays the round's per-replica load at this multiple; probes keep multiplying by it until
    the SLO breaks, then narrow the bracket geometrically."""
    precision: float = 1.1
    """The search stops once the highest load that held and the lowest that did not are this close."""
    max_trials: int = 8
    max_concurrency: float = 8192.0


@dataclass(frozen=True)
class ApiPrice:
    """What an API provider charges, in USD per million tokens."""

    input_per_million: float
    output_per_million: float

    def cost(self, *, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1e6


@dataclass(frozen=True)
class TuningRules:
    max_trials: int = trial_defaults.MAX_TRIALS
    """Trials per tuning round, the baseline and the stock reference included."""
    canary_gpu_minutes: float = trial_defaults.CANARY_GPU_MINUTES
    """Canary GPU-minutes a round's trials may use together (the guardrails refuse a proposal beyond them)."""
    trial_duration_s: float = trial_defaults.DURATION_S
    """One trial's measured window."""
    trial_warmup_s: float = trial_defaults.WARMUP_S
    trial_startup_timeout_s: float = trial_defaults.STARTUP_TIMEOUT_S
    """How long a trial's engine may take to start before the trial fails."""
    trials_per_cycle: int = 2
    min_gain: float = 1.0 + tuning_defaults.MIN_GAIN
    """A candidate must beat the active config's goodput by this factor to be rolled out."""
    approval: ApprovalMode = tuning_defaults.APPROVAL
    dry_run: bool = tuning_defaults.DRY_RUN
    measure_stock: bool = True
    """Also trial the stock config in each round, as the reference for gain-over-stock evidence."""
    keep_trials: int = 200
    payback_horizon_s: float = 7 * 86400.0
    """How long a window's config is expected to serve once found: a search's next trial runs only while the GPU
    time its expected gain saves over this horizon (the window's GPU-hours on each of its days) exceeds the trial's
    own GPU time."""
    trial_startup_s: float = 180.0
    """GPU-seconds a trial holds before it measures (the engine's cold start and warm-up) when its results report
    none: what each trial costs on the canary pool besides its measurement."""

    @property
    def trial_minutes(self) -> float:
        """Canary minutes one trial is budgeted at, per GPU (its warm-up and measured window)."""
        return (self.trial_duration_s + self.trial_warmup_s) / 60.0


@dataclass(frozen=True)
class ScheduleRules:
    """When a time-of-day switch is worth making."""

    prewarm_lead_s: float = 900.0
    """Start moving to the next window's config this long before the window begins (vLLM cold start is minutes),
    when its engine's cold start was never measured; once its canary trials (or its earlier rollouts) measured one,
    the lead is that cold start plus ``prewarm_margin_s``, so its replicas are ready as the window begins."""
    prewarm_margin_s: float = 300.0
    """Added to a measured cold start for the pre-warm's lead: a control cycle's latency (the decision may come a
    cycle after the lead begins) and a replica's readiness check."""
    min_dwell_s: float = 3600.0
    """No two automatic config switches closer together than this (against flapping)."""
    switch_cost_s: float = 1800.0
    """What a switch costs, in seconds of the window's gain: warm-up GPU time, rollout steps and risk."""
    forecast_uncertainty: float = 0.1
    """Relative error of a window's load forecast: a switch with managed replicas must save more GPU-hours than its
    rollout costs at the forecast rate and at this share either side of it (with the new config's capacity lowered
    by the measured noise of the two probes' ratio)."""
    retune_min_interval_s: float = 3600.0
    """A window is re-tuned on drift at most this often."""
    tune_ahead_s: float = 3 * 3600.0
    """With a load forecast, tune a window that has no config yet this long before it starts, on its forecast
    busy-hour shape, so its config can be pre-warmed instead of found while production waits."""
    swap_steps: tuple[int, ...] = (50, 100)
    """A pre-validated swap's weights: a switch between two configs production already served in the windows it
    moves between (each promoted there after its canary and an analysed rollout) shifts the traffic in these steps
    instead of the rollout's own, with the analysis and the automatic rollback still on."""
    swap_bake_s: float = 60.0
    """A pre-validated swap's bake per step, instead of the rollout's ``bake_s``."""

    def __post_init__(self) -> None:
        steps = self.swap_steps
        if not steps or steps[-1] != 100 or any(not 0 < w <= 100 for w in steps) or list(steps) != sorted(set(steps)):
            raise ValueError("swap steps must be strictly increasing percentages in (0, 100], ending at 100")
        if self.prewarm_lead_s < 0 or self.prewarm_margin_s < 0:
            raise ValueError("prewarm_lead_s and prewarm_margin_s must be >= 0")
        if self.swap_bake_s <= 0:
            raise ValueError("swap_bake_s must be > 0")


@dataclass(frozen=True)
class DigestRules:
    """A daily summary (Slack and Events) with the schedule and its economics."""

    hour: int = 9
    gpu_usd_per_hour: float = 0.0
    api: ApiPrice = field(default_factory=lambda: ApiPrice(input_per_million=0.0, output_per_million=0.0))


@dataclass(frozen=True)
class Rules:
    slo: SLO = field(default_factory=SLO)
    tuning: TuningRules = field(default_factory=TuningRules)
    rollout: RolloutRules = field(default_factory=RolloutRules)
    windows: tuple[TimeWindow, ...] = DEFAULT_WINDOWS
    schedule: ScheduleRules = field(default_factory=ScheduleRules)
    drift: drifts.DriftParams = field(default_factory=drifts.DriftParams)
    scaling: ScalingRules | None = None
    """Manage the stable variant's replica count from measured capacity (None: leave replicas alone)."""
    digest: DigestRules | None = None
    capacity_probe: ProbeRules = field(default_factory=ProbeRules)
    """The capacity search: first multiple of the round's load, precision, trial and concurrency caps."""
    capacity_probe_loop: ProbeLoop = scaling_defaults.CAPACITY_PROBE_LOOP
    """Probes replay Poisson arrivals at the probed rate (as production's arrivals test a replica), or a closed loop
    at the probed concurrency."""
    reactive_scale_interval_s: float = 900.0
    """Without a probed capacity, replicas are added on an SLO breach at most this often (new replicas need a cold
    start before they relieve the breach)."""
    replica_settle_s: float = 600.0
    """After Shiftlight changes the replica count, production SLO signals say nothing about per-replica capacity
    until an observation window starts this long after the change (new replicas cold-start, removed replicas hand
    their load to the others): a breach in between does not lower a probed capacity."""
    breach_capacity_factor: float = 0.9
    """When production breaches the SLO below the probed capacity, the capacity becomes this share of the
    per-replica rate that breached."""
    capacity_transfer_distance: float = 0.7
    """A capacity probed on one length mix sizes replicas for another only when their mean prompt and output
    lengths are this close (sum of absolute log ratios; 0.7 is about 2x in one of them)."""
    capacity_finalists: int = 1
    """With managed replicas, this many runners-up of a round (configs that met the SLO at the design load within
    ``finalist_gap`` of the best goodput) have their capacity probed too, and the one that needs the fewest
    replicas for the window's load wins: goodput at one load says little about where the SLO breaks."""
    finalist_gap: float = 0.1
    quiet_utilisation: float = 0.5
    """With managed replicas, drift below this share of the probed capacity does not trigger a re-tune."""
    design_slots: int = 256
    """Sequence slots of one replica (the largest ``max_num_seqs`` the search space allows): with managed replicas,
    a round replays the window's load spread over the fewest replicas whose slots hold it, so configs are compared
    near the per-replica load the fleet will be sized for, not at whatever the replica count happens to be."""
    space: SearchSpace = field(default_factory=lambda: Policy().space)
    """The configs a proposal may be: the policy's search space, bound to its constraints between knobs and its
    memory fit (:meth:`~controller.policy.space.SearchSpace.violations`)."""
    lossy: tuple[LossyRule, ...] = DEFAULT_LOSSY
    """Which configs can change model output (the policy's ``quality_gate.lossy``): they need the quality gate,
    and with ``manual-for-lossy`` approval a human."""

    def lossy_reasons(self, config: EngineConfig) -> list[str]:
        """Why ``config`` can change model output (empty: it cannot)."""
        return lossy_reasons(self.lossy, config)

    def is_lossy(self, config: EngineConfig) -> bool:
        return bool(self.lossy_reasons(config))

    @classmethod
    def from_policy(
        cls,
        policy: Policy,
        windows: Sequence[TimeWindow] = (),
        *,
        replicas: tuple[int, int] | None = None,
        digest: DigestRules | None = None,
    ) -> Rules:
        """The user's policy (and the target's windows and replica bounds) as the planner's rules: the one
        translation of a :class:`Policy` into what decide reads. ``replicas``: the (min, max) replicas Shiftlight
        manages, sized by the policy's ``scaling`` section (None: it leaves the replica count alone)."""
        thresholds = policy.rollout.thresholds
        scaling = None
        if replicas is not None:
            scaling = ScalingRules(
                min_replicas=replicas[0],
                max_replicas=replicas[1],
                headroom=policy.scaling.headroom,
                scale_down_stabilisation_s=policy.scaling.scale_down_stabilisation_seconds,
            )
        return cls(
            slo=policy.slo,
            tuning=TuningRules(
                max_trials=policy.trial_budget.max_trials,
                canary_gpu_minutes=policy.trial_budget.canary_gpu_minutes,
                trial_duration_s=policy.trial_budget.trial_duration_s,
                trial_warmup_s=policy.trial_budget.warmup_s,
                trial_startup_timeout_s=policy.trial_budget.startup_timeout_s,
                min_gain=1.0 + policy.min_gain,
                approval=policy.approval,
                dry_run=policy.dry_run,
            ),
            rollout=RolloutRules(
                steps=tuple(policy.rollout.steps),
                bake_s=policy.rollout.bake_seconds,
                min_samples=policy.rollout.min_samples,
                max_ttft_regression=thresholds.max_ttft_regression,
                max_tpot_regression=thresholds.max_tpot_regression,
                max_error_rate=thresholds.max_error_rate,
                min_goodput_ratio=thresholds.min_goodput_ratio,
                slo_headroom=thresholds.slo_headroom,
                analysis_interval_s=policy.rollout.analysis_interval_seconds,
                on_missing_data=policy.rollout.on_missing_data,
                rejection_memory_s=policy.rollout.rejection_memory_seconds,
            ),
            windows=tuple(windows) or DEFAULT_WINDOWS,
            scaling=scaling,
            digest=digest,
            capacity_probe_loop=policy.scaling.capacity_probe_loop,
            design_slots=policy.largest_max_num_seqs(),
            space=policy.space,
            lossy=tuple(policy.quality_gate.lossy),
        )
