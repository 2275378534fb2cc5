"""The decide step of the control loop: status + observation + proposals in, a Plan and the next status out.

Pure: no I/O, no clock reads (``now`` is passed in), no adapters. Every action carries the reason that status,
Events, ``shiftctl explain`` and Slack show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from controller.decide import drift as drifts
from controller.decide import noise as noises
from controller.decide import rollout as rollouts
from controller.decide.capacity import (
    ProbeRules,
    ScalingDecision,
    ScalingRules,
    desired_replicas,
    holds,
    length_distance,
    next_probe_factor,
    probe_bracket,
    replicas_for,
)
from controller.decide.economics import ApiPrice, schedule_economics
from controller.decide.selection import best_trial, find
from controller.domain.actions import Action, Notify, Promote, Rollback, RunTrial, Scale, Severity
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import Observation
from controller.domain.phases import Phase, transition
from controller.domain.proposal import Proposal
from controller.domain.slo import SLO
from controller.domain.status import DriftState, MeasuredNoise, ScheduledConfig, TargetStatus, TuningRound
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult

ApprovalMode = Literal["auto", "manual", "manual-for-lossy"]

DEFAULT_WINDOWS: tuple[TimeWindow, ...] = (TimeWindow(name="all-day", start_hour=0, end_hour=24),)


@dataclass(frozen=True)
class TuningRules:
    max_trials: int = 8
    """Trials per tuning round, the baseline and the stock reference included."""
    trials_per_cycle: int = 2
    min_gain: float = 1.03
    """A candidate must beat the active config's goodput by this factor to be rolled out."""
    approval: ApprovalMode = "auto"
    dry_run: bool = False
    measure_stock: bool = True
    """Also trial the stock config in each round, as the reference for gain-over-stock evidence."""
    keep_trials: int = 200


@dataclass(frozen=True)
class ScheduleRules:
    """When a time-of-day switch is worth making."""

    prewarm_lead_s: float = 900.0
    """Start moving to the next window's config this long before the window begins (vLLM cold start is minutes)."""
    min_dwell_s: float = 3600.0
    """No two automatic config switches closer together than this (against flapping)."""
    switch_cost_s: float = 1800.0
    """What a switch costs, in seconds of the window's gain: warm-up GPU time, rollout steps and risk."""
    retune_min_interval_s: float = 3600.0
    """A window is re-tuned on drift at most this often."""
    tune_ahead_s: float = 3 * 3600.0
    """With a load forecast, tune a window that has no config yet this long before it starts, on its forecast
    busy-hour shape, so its config can be pre-warmed instead of found while production waits."""


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
    rollout: rollouts.RolloutRules = field(default_factory=rollouts.RolloutRules)
    windows: tuple[TimeWindow, ...] = DEFAULT_WINDOWS
    schedule: ScheduleRules = field(default_factory=ScheduleRules)
    drift: drifts.DriftParams = field(default_factory=drifts.DriftParams)
    scaling: ScalingRules | None = None
    """Manage the stable variant's replica count from measured capacity (None: leave replicas alone)."""
    digest: DigestRules | None = None
    capacity_probe: ProbeRules = field(default_factory=ProbeRules)
    """The capacity search: first multiple of the round's load, precision, trial and concurrency caps."""
    capacity_probe_loop: Literal["open", "closed"] = "open"
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


@dataclass(frozen=True)
class Decision:
    status: TargetStatus
    actions: tuple[Action, ...]
    notes: tuple[str, ...]


def window_at(windows: Sequence[TimeWindow], now: datetime) -> TimeWindow:
    hour = now.hour + now.minute / 60 + now.second / 3600
    return next((w for w in windows if w.contains(hour)), windows[0])


def per_replica(shape: TrafficShape, replicas: int) -> TrafficShape:
    """The share of the fleet's traffic one replica sees (what a canary trial must replay)."""
    n = max(1, replicas)
    return shape.model_copy(
        update={"arrival_rate_rps": shape.arrival_rate_rps / n, "concurrency": shape.concurrency / n}
    )


def scaled(shape: TrafficShape, factor: float) -> TrafficShape:
    return shape.model_copy(
        update={"arrival_rate_rps": shape.arrival_rate_rps * factor, "concurrency": shape.concurrency * factor}
    )


def round_trials(status: TargetStatus) -> list[TrialResult]:
    """Results of the current tuning round, in the order they ran."""
    if status.tuning is None:
        return []
    keys = set(status.tuning.trial_keys)
    shape = status.tuning.shape
    return [t for t in status.trials if t.shape == shape and t.config.key() in keys]


def _move(current: Phase, target: Phase) -> Phase:
    return current if current is target and target is not Phase.ROLLING_OUT else transition(current, target)


def plan(
    *,
    status: TargetStatus,
    observation: Observation | None,
    observe_error: str | None,
    proposals: Sequence[Proposal],
    rules: Rules,
    now: datetime,
    is_lossy: Callable[[EngineConfig], bool] = lambda _c: False,
    drifted: bool = False,
    candidate_ready_replicas: int | None = None,
    external_autoscaler: str | None = None,
    forecast: Mapping[str, TrafficShape] | None = None,
) -> Decision:
    """Decide this cycle. ``proposals`` have already passed the guardrails.

    ``drifted`` forces a re-tune (the built-in detector runs on every observing cycle anyway);
    ``external_autoscaler`` names an HPA/KEDA object that owns the replica count, if any;
    ``forecast`` maps window names to the fleet-level traffic shape expected in each window's busy hour.
    """
    window = window_at(rules.windows, now)
    planner = _Planner(status, observation, observe_error, proposals, rules, now, is_lossy, window)
    planner.external_autoscaler = external_autoscaler
    planner.forecast = dict(forecast or {})
    decision = planner.run(drifted=drifted, candidate_ready_replicas=candidate_ready_replicas)
    if status.phase not in (Phase.OBSERVING, Phase.FROZEN) and observation is not None:
        # replicas follow the load whatever the tuning or rollout is doing
        planner.status = decision.status
        scale_actions, scale_notes = planner._scale()
        rollout = planner.status.rollout
        if rollout is not None and rollout.weight > 0:
            for a in list(scale_actions):
                if isinstance(a, Scale) and a.variant == "stable":
                    need = rollouts.candidate_replicas_for(a.replicas, rollout.weight)
                    why = f"the fleet scales to {a.replicas}: the candidate keeps {rollout.weight}% of it"
                    scale_actions.append(Scale("candidate", need, why))
        decision = Decision(planner.status, (*decision.actions, *scale_actions), (*decision.notes, *scale_notes))
    decision = _with_digest(decision, rules, now)
    reasons = tuple(a.reason for a in decision.actions) + decision.notes
    rescaled = any(isinstance(a, Scale) and a.variant == "stable" for a in decision.actions)
    final = decision.status.model_copy(
        update={
            "updated_at": now,
            "window": window.name,
            "last_reasons": reasons or decision.status.last_reasons,
            "replicas_changed_at": now if rescaled else decision.status.replicas_changed_at,
        }
    )
    return Decision(final, decision.actions, decision.notes)


class _Planner:
    def __init__(
        self,
        status: TargetStatus,
        observation: Observation | None,
        observe_error: str | None,
        proposals: Sequence[Proposal],
        rules: Rules,
        now: datetime,
        is_lossy: Callable[[EngineConfig], bool],
        window: TimeWindow,
    ) -> None:
        self.status = status
        self.observation = observation
        self.observe_error = observe_error
        self.proposals = proposals
        self.rules = rules
        self.now = now
        self.is_lossy = is_lossy
        self.window = window
        self.external_autoscaler: str | None = None
        self.forecast: dict[str, TrafficShape] = {}

    # ----- entry -------------------------------------------------------------------------------
    def run(self, *, drifted: bool, candidate_ready_replicas: int | None) -> Decision:
        phase = self.status.phase
        if phase in (Phase.ROLLING_OUT, Phase.AWAITING_APPROVAL, Phase.PAUSED):
            return self._rollout(candidate_ready_replicas)
        if phase is Phase.ROLLED_BACK:
            return self._done(self.status.model_copy(update={"phase": _move(phase, Phase.OBSERVING), "rollout": None}))
        if self.observation is None:
            return self._freeze()
        if phase is Phase.FROZEN:
            status = self.status.model_copy(update={"phase": _move(phase, Phase.OBSERVING), "frozen_reason": None})
            return self._done(status, notes=("metrics are back; observing again",))
        if phase is Phase.TRIALLING:
            return self._trial()
        return self._observe(drifted)

    def _done(self, status: TargetStatus, actions: Sequence[Action] = (), notes: Sequence[str] = ()) -> Decision:
        return Decision(status, tuple(actions), tuple(notes))

    # ----- observing ---------------------------------------------------------------------------
    def _freeze(self) -> Decision:
        reason = f"frozen: {self.observe_error or 'no observation'}; taking no action on missing data"
        status = self.status.model_copy(
            update={"phase": _move(self.status.phase, Phase.FROZEN), "frozen_reason": reason, "tuning": None}
        )
        actions: tuple[Action, ...] = ()
        if self.status.phase is not Phase.FROZEN:
            actions = (Notify(Severity.WARNING, "Observation frozen", reason),)
        return self._done(status, actions, (reason,))

    def _observe(self, drifted: bool) -> Decision:
        assert self.observation is not None
        status = self.status
        entry = status.schedule_for(self.window.name)
        if entry is None:
            return self._start_tuning(f"no tuned config for window '{self.window.name}' yet", self.window)
        live = per_replica(self.observation.shape, status.replicas)
        if entry.shape.concurrency > live.concurrency:
            # a window tuned for its busy hour also serves its quieter minutes: only more load, or another
            # length mix, is drift
            live = live.model_copy(update={"concurrency": entry.shape.concurrency})
        previous = status.drift
        if status.window is not None and status.window != self.window.name:
            # the drift state measured distance to the last window's tuned shape: start afresh against this one's
            previous = drifts.DriftState()
        verdict, drift_state = drifts.assess(live, entry.shape, previous, now=self.now, params=self.rules.drift)
        status = status.model_copy(update={"drift": drift_state})
        self.status = status
        scale_actions, scale_notes = self._scale()
        if any(isinstance(a, Scale) and a.replicas > self.status.replicas for a in scale_actions):
            # more load than the replicas carry: add replicas first; a re-tune would not add capacity soon enough
            return self._done(self.status, scale_actions, scale_notes)
        breach = slo_breach(self.observation, self.rules.slo, self.rules.rollout.min_samples)
        if breach:
            corrected = self._correct_capacity(breach)
            if corrected is not None:
                return corrected
        if breach and not self._tuned_recently(entry, self.rules.schedule.retune_min_interval_s / 2):
            return self._start_tuning(f"window '{self.window.name}': {breach}", self.window, observed=True)
        quiet = self._quiet(entry)
        # drift counts while the traffic is away from the tuned shape; once back within `exit` it is only waiting
        # out the dwell before the state flips back
        away = verdict.drifted and verdict.distance > self.rules.drift.exit
        if drifted or (away and not quiet):
            tuned_at = entry.tuned_at
            age = (self.now - tuned_at).total_seconds() if tuned_at else float("inf")
            if drifted or age >= self.rules.schedule.retune_min_interval_s:
                why = verdict.reason if verdict.drifted else "traffic drifted from the tuned shape"
                return self._start_tuning(f"window '{self.window.name}': {why}", self.window, observed=True)
        switch = self._scheduled_switch()
        if switch is not None:
            return switch
        ahead = self._tune_ahead()
        if ahead is not None:
            return ahead
        drift_note = f"drift {verdict.reason}"
        if verdict.drifted and quiet:
            drift_note += f"; not re-tuning: {quiet}"
        scale_notes.append(f"observing: {self.observation.shape.describe()}; {drift_note}")
        return self._done(self.status, scale_actions, scale_notes)

    def _quiet(self, entry: ScheduledConfig) -> str:
        """Why the traffic is too light for drift to matter (empty when it is not): the replicas run at less than
        ``quiet_utilisation`` of the capacity probed for the window's config, with the SLO met. A window tuned for
        its busy hour serves its quiet stretches; re-tuning for them would pick a config that is fast at a light
        load and short of capacity when the busy hour returns."""
        assert self.observation is not None
        if self.rules.scaling is None or not entry.capacity_rps:
            return ""
        per_replica_load = self.observation.shape.arrival_rate_rps / max(1, self.status.replicas)
        utilisation = per_replica_load / entry.capacity_rps
        if utilisation >= self.rules.quiet_utilisation:
            return ""
        return (
            f"{per_replica_load:.2f} req/s per replica is {utilisation:.0%} of the "
            f"{entry.capacity_rps:.2f} req/s the window's config serves"
        )

    def _tuned_recently(self, entry: ScheduledConfig, within_s: float) -> bool:
        return entry.tuned_at is not None and (self.now - entry.tuned_at).total_seconds() < within_s

    def _scheduled_switch(self) -> Decision | None:
        """Move to the config scheduled for this window, or pre-warm the next window's ahead of its start."""
        lead = self.rules.schedule.prewarm_lead_s
        upcoming = window_at(self.rules.windows, self.now + timedelta(seconds=lead))
        ahead = upcoming.name != self.window.name
        for window in (upcoming,) if ahead else (self.window,):
            entry = self.status.schedule_for(window.name)
            if entry is None or entry.config.key() == self.status.active_config.key():
                return None
            if entry.config.key() in self.status.blocked_configs:
                return None
            if self._short_of_replicas(entry.capacity_rps):
                # the autoscaler's replicas cannot carry today's load on it, which a pre-warmed candidate meets
                # first: a rollout would only fail
                return None
            last = self.status.last_switch_at
            if last is not None and (self.now - last).total_seconds() < self.rules.schedule.min_dwell_s:
                return None
            base = next(
                (
                    t
                    for t in reversed(self.status.trials)
                    if t.config.key() == self.status.active_config.key() and t.shape == entry.shape and t.ok
                ),
                None,
            )
            base_goodput = base.objective() if base is not None else entry.stock_goodput_tokens_per_s
            gain = entry.goodput_tokens_per_s / base_goodput if base_goodput else float("inf")
            benefit_s = (gain - 1) * (window.hours * 3600 if ahead else self._remaining_s(window))
            if gain < self.rules.tuning.min_gain or benefit_s < self.rules.schedule.switch_cost_s:
                return None
            when = (
                f"window '{window.name}' starts at {window.start_hour:02g}:00" if ahead else f"window '{window.name}'"
            )
            why = (
                f"{when}: its scheduled config {entry.config.label()} measured {gain:.2f}x the active "
                f"{self.status.active_config.label()} on its traffic ({entry.reason})"
            )
            if ahead:
                why = f"pre-warming {lead / 60:.0f} min ahead: " + why
            return self._begin_rollout(entry.config, why, proposed_by="schedule", gain=gain)
        return None

    def _remaining_s(self, window: TimeWindow) -> float:
        """Seconds from now to the end of ``window`` (which contains now)."""
        hour = self.now.hour + self.now.minute / 60 + self.now.second / 3600
        return ((window.end_hour - hour) % 24 or 24) * 3600

    def _tune_ahead(self) -> Decision | None:
        """Tune the next window that has no config yet, on its forecast shape, before it starts."""
        if not self.forecast:
            return None
        step = 900.0
        for i in range(1, int(self.rules.schedule.tune_ahead_s // step) + 1):
            when = self.now + timedelta(seconds=i * step)
            window = window_at(self.rules.windows, when)
            if window.name == self.window.name or self.status.schedule_for(window.name) is not None:
                continue
            if window.name in self.forecast:
                why = f"tuning ahead: window '{window.name}' starts at {window.start_hour:02g}:00 and has no config"
                return self._start_tuning(why, window)
        return None

    def _scale(self) -> tuple[list[Action], list[str]]:
        """Replicas of the stable variant for the request rate observed now, at the capacity probed for the active
        config on the most similar length mix (see ``_capacity_entry``); with none known, an SLO breach adds
        replicas. Never fewer while a rollout runs."""
        rules = self.rules.scaling
        if rules is None or self.observation is None:
            return [], []
        entry = self.status.schedule_for(self.window.name)
        capacity, basis = self._active_capacity()
        decision = desired_replicas(
            forecast_rps=self.observation.shape.arrival_rate_rps,
            capacity_rps_per_replica=capacity or 0.0,
            current=self.status.replicas,
            rules=rules,
            now=self.now,
            below_since=self.status.scale_below_since,
            external_autoscaler=self.external_autoscaler,
        )
        if basis:
            decision = replace(decision, reason=f"{decision.reason} (capacity probed on {basis})")
        last = self.status.reactive_scale_at
        settled = last is None or (self.now - last).total_seconds() >= self.rules.reactive_scale_interval_s
        if capacity is None and not self.external_autoscaler and settled:
            breach = slo_breach(self.observation, self.rules.slo, self.rules.rollout.min_samples)
            if breach and self.status.replicas < rules.max_replicas:
                more = min(rules.max_replicas, self.status.replicas + max(1, math.ceil(self.status.replicas / 2)))
                decision = ScalingDecision(
                    more,
                    f"scale up {self.status.replicas} -> {more}: no probed capacity for this traffic and {breach}",
                    None,
                )
                self.status = self.status.model_copy(update={"reactive_scale_at": self.now})
        lead = self.rules.schedule.prewarm_lead_s
        upcoming_window = window_at(self.rules.windows, self.now + timedelta(seconds=lead))
        upcoming = self.status.schedule_for(upcoming_window.name)
        if (
            upcoming_window.name != self.window.name
            and upcoming is not None
            and upcoming.config.key() != self.status.active_config.key()
            and upcoming.capacity_rps
            and length_distance(upcoming.shape, self.observation.shape) <= self.rules.capacity_transfer_distance
        ):
            # today's load at the capacity of the config the next window switches to, so a smaller config does not
            # arrive short of replicas
            ahead = desired_replicas(
                forecast_rps=self.observation.shape.arrival_rate_rps,
                capacity_rps_per_replica=upcoming.capacity_rps,
                current=self.status.replicas,
                rules=rules,
                now=self.now,
                below_since=self.status.scale_below_since,
                external_autoscaler=self.external_autoscaler,
            )
            if ahead.replicas > decision.replicas:
                decision = replace(ahead, reason=f"ahead of window '{upcoming_window.name}': {ahead.reason}")
        if self.status.rollout is not None and decision.replicas < self.status.replicas:
            decision = ScalingDecision(
                self.status.replicas,
                f"keep {self.status.replicas} while rollout {self.status.rollout.id} runs (scale-down waits for it)",
                self.status.scale_below_since,
            )
        self.status = self.status.model_copy(update={"scale_below_since": decision.below_since})
        if decision.changes(self.status.replicas):
            if entry is not None:
                self.status = _with_schedule(self.status, entry.model_copy(update={"replicas": decision.replicas}))
            return [Scale("stable", decision.replicas, decision.reason)], []
        return [], [decision.reason]

    def _capacity_entry(self, config: EngineConfig | None = None) -> ScheduledConfig | None:
        """The schedule entry whose probed capacity applies to the active config on the traffic observed now: the
        active config's entries with a capacity, nearest in length mix (this window's first on a tie), and only
        when that mix is close; a capacity probed on another length mix says little about this one."""
        assert self.observation is not None
        key = (config or self.status.active_config).key()
        probed = [s for s in self.status.schedule if s.config.key() == key and s.capacity_rps]
        if not probed:
            return None
        observed = self.observation.shape
        nearest = min(probed, key=lambda s: (length_distance(s.shape, observed), s.window != self.window.name))
        if length_distance(nearest.shape, observed) > self.rules.capacity_transfer_distance:
            return None
        return nearest

    def _active_capacity(self) -> tuple[float | None, str]:
        """Requests/s one replica of the active config serves within the SLO, and where it was probed. During a
        rollout, the lower of the stable and the candidate config's (the candidate may end up carrying it all)."""
        entry = self._capacity_entry()
        rollout = self.status.rollout
        if rollout is not None and rollout.weight > 0:
            candidate = self._capacity_entry(rollout.to_config)
            if (
                candidate is not None
                and candidate.capacity_rps
                and (entry is None or entry.capacity_rps is None or candidate.capacity_rps < entry.capacity_rps)
            ):
                entry = candidate
        if entry is None:
            return None, ""
        return entry.capacity_rps, "" if entry.window == self.window.name else f"window '{entry.window}'"

    def _correct_capacity(self, breach: str) -> Decision | None:
        """Production evidence beats the canary's: when the stable variant breaches the SLO at a per-replica rate
        below the capacity its probe measured, that capacity was too optimistic. Lower it to what production
        just failed to carry (x ``breach_capacity_factor``) and size the replicas again, before any re-tune."""
        assert self.observation is not None
        if self.rules.scaling is None or self.external_autoscaler:
            return None
        changed = self.status.replicas_changed_at
        if changed is not None and self.observation.start < changed + timedelta(seconds=self.rules.replica_settle_s):
            return None  # the replicas were still settling: the breach says nothing about one replica's capacity
        entry = self._capacity_entry()
        if entry is None or entry.capacity_rps is None:
            return None
        per_replica_rate = self.observation.shape.arrival_rate_rps / max(1, self.status.replicas)
        if per_replica_rate >= entry.capacity_rps or per_replica_rate <= 0:
            return None
        lowered = per_replica_rate * self.rules.breach_capacity_factor
        note = (
            f"{breach}: one replica failed to carry {per_replica_rate:.2f} req/s, below the "
            f"{entry.capacity_rps:.2f} req/s the canary measured; sizing with {lowered:.2f} req/s from now on"
        )
        self.status = _with_schedule(self.status, entry.model_copy(update={"capacity_rps": lowered}))
        scale_actions, scale_notes = self._scale()
        if not any(isinstance(a, Scale) and a.replicas > self.status.replicas for a in scale_actions):
            return None
        return self._done(self.status, scale_actions, (note, *scale_notes))

    # ----- trialling ---------------------------------------------------------------------------
    def _start_tuning(self, reason: str, window: TimeWindow, *, observed: bool = False) -> Decision:
        """A tuning round for ``window``: on its forecast busy-hour shape when there is one (and the round is not a
        reaction to what is observed right now), else on the observed shape; per replica in both cases."""
        assert self.observation is not None
        paused = self.status.tuning_paused_until
        if paused is not None and self.now < paused:
            note = f"not tuning ({reason}): {self.status.tuning_paused_reason}"
            scale_actions, scale_notes = self._scale()
            return self._done(self.status, scale_actions, (*scale_notes, note))
        fleet_shape = self.observation.shape
        source = "observed"
        if not observed and window.name in self.forecast:
            fleet_shape, source = self.forecast[window.name], "forecast busy-hour"
        shape = per_replica(fleet_shape, self._design_replicas(window, fleet_shape)).model_copy(
            update={"window": window}
        )
        round_ = TuningRound(
            id=f"{window.name}-{self.now:%Y%m%d%H%M}",
            window=window.name,
            shape=shape,
            started_at=self.now,
            reason=reason,
            fleet_rate_rps=fleet_shape.arrival_rate_rps,
            fleet_concurrency=fleet_shape.concurrency,
        )
        status = self.status.model_copy(
            update={"phase": _move(self.status.phase, Phase.TRIALLING), "tuning": round_, "drift": DriftState()}
        )
        active = status.active_config
        actions: list[Action] = [
            RunTrial(active, shape, f"tuning ({reason}): baseline, the active config {active.label()}", "baseline")
        ]
        if self.rules.tuning.measure_stock and active.key() != STOCK.key():
            actions.append(RunTrial(STOCK, shape, "tuning: stock vLLM config as the reference", "baseline"))
        actions.append(_repeat(active, shape))
        return self._done(
            status, actions, (f"started tuning round {round_.id} on the {source} shape: {shape.describe()}",)
        )

    def _design_replicas(self, window: TimeWindow, fleet_shape: TrafficShape) -> int:
        """The replica count a round's per-replica shape assumes.

        Without managed replicas, the replicas there are. With them, the fewest replicas whose sequence slots hold
        the load: a load near what one replica can carry, where configs differ in capacity and not only in speed.
        Tuning at the current count instead would favour configs that are fast at a light per-replica load and
        then need more replicas (a loop that only ever adds GPUs)."""
        rules = self.rules.scaling
        if rules is None:
            return max(1, self.status.replicas)
        n = math.ceil(fleet_shape.concurrency / max(self.rules.design_slots, 1) - 1e-9)
        return min(max(n, rules.min_replicas, 1), max(rules.max_replicas, 1))

    def _trial(self) -> Decision:
        round_ = self.status.tuning
        if round_ is None:
            return self._done(self.status.model_copy(update={"phase": _move(self.status.phase, Phase.OBSERVING)}))
        self.status = _with_noise(self.status, round_, self.now)
        done = len(round_.trial_keys)
        remaining = self.rules.tuning.max_trials - done
        tried = set(round_.trial_keys)
        fresh: list[Proposal] = []
        for p in self.proposals:
            if p.config.key() not in tried and all(p.config.key() != f.config.key() for f in fresh):
                fresh.append(p)
        batch = fresh[: max(0, min(remaining, self.rules.tuning.trials_per_cycle))]
        if batch:
            actions = [
                RunTrial(
                    p.config,
                    round_.shape,
                    f"trial {done + i + 1}/{self.rules.tuning.max_trials}: {p.rationale}",
                    p.proposed_by,
                )
                for i, p in enumerate(batch)
            ]
            return self._done(self.status, actions)
        if self.rules.scaling is not None:
            probe = self._capacity_probe(round_)
            if probe is not None:
                return probe
        return self._select(round_)

    def _choice(self, round_: TuningRound) -> TrialResult | None:
        """The trial the round will settle on: the best one when it gains enough over the active config, else the
        active config's own (None when nothing met the SLO)."""
        trials = round_trials(self.status)
        best = self._best(trials)
        baseline = find(trials, self.status.active_config)
        if best is None or baseline is None or not baseline.objective():
            return best
        if best.objective() / baseline.objective() < self._min_gain():
            return baseline
        return best

    def _min_gain(self) -> float:
        """The gain a candidate needs: ``min_gain``, or more when the measured noise is larger (see
        ``noise.required_gain``)."""
        measured = self.status.noise.relative if self.status.noise is not None else None
        return noises.required_gain(self.rules.tuning.min_gain, measured)

    def _best(self, trials: Sequence[TrialResult]) -> TrialResult | None:
        """The round's best trial. With managed replicas the round runs near one replica's capacity, where every
        config may miss the SLO: then the highest goodput wins, and the capacity probe searches downwards."""
        allowed = [t for t in trials if t.config.key() not in set(self.status.blocked_configs)]
        best = best_trial(allowed, is_lossy=self.is_lossy)
        if best is None and self.rules.scaling is not None:
            partial = [t for t in allowed if t.ok and t.objective() > 0]
            best = max(partial, key=lambda t: t.objective(), default=None)
        return best

    def _probe_results(self, round_: TuningRound, key: str) -> list[tuple[float, TrialResult]]:
        out = []
        for factor in round_.probe_factors:
            shape = scaled(round_.shape, factor)
            found = next((t for t in reversed(self.status.trials) if t.config.key() == key and t.shape == shape), None)
            if found is not None:
                out.append((factor, found))
        return out

    def _probe_bracket(self, round_: TuningRound, key: str) -> tuple[float, float | None]:
        """(highest load multiple that held, lowest that did not) for ``key``: its round trial counts as 1x."""
        base = next((t for t in reversed(round_trials(self.status)) if t.config.key() == key), None)
        at_1 = [(1.0, base)] if base is not None else []
        closed = self.rules.capacity_probe_loop == "closed"
        return probe_bracket(
            [(f, holds(t, keeps_up=closed or f == 1.0)) for f, t in (*at_1, *self._probe_results(round_, key))]
        )

    def _capacity_probe(self, round_: TuningRound) -> Decision | None:
        """The next step of the capacity search for the config the round will choose: replay its shape at growing
        multiples of the per-replica load until the SLO breaks, then narrow the bracket. Its result (how far one
        replica stretches within the SLO) sizes the fleet."""
        chosen = self._choice(round_)
        if chosen is None:
            return None
        switching = chosen.config.key() != self.status.active_config.key()
        step = self._next_probe(round_, chosen)
        for finalist in self._finalists(chosen) if switching else ():
            if step is not None:
                break
            step = self._next_probe(round_, finalist)
        if step is None and switching:
            # the active config's capacity too: a switch must save replicas to be worth its rollout
            baseline = find(round_trials(self.status), self.status.active_config)
            if baseline is not None and baseline.ok and baseline.objective() > 0:
                step = self._next_probe(round_, baseline)
        return step

    def _finalists(self, leader: TrialResult) -> list[TrialResult]:
        """Runners-up whose capacity is worth probing beside the leader's (see ``Rules.capacity_finalists``):
        distinct configs that met the SLO within ``finalist_gap`` of its goodput, neither active nor blocked, and
        lossless when the leader is."""
        if self.rules.scaling is None or self.rules.capacity_finalists <= 0:
            return []
        skip = {leader.config.key(), self.status.active_config.key(), *self.status.blocked_configs}
        floor = (1 - self.rules.finalist_gap) * leader.objective()
        out: list[TrialResult] = []
        for t in sorted(round_trials(self.status), key=lambda t: -t.objective()):
            key = t.config.key()
            if key in skip or not (t.ok and t.meets_slo()) or t.objective() < floor:
                continue
            if self.is_lossy(t.config) and not self.is_lossy(leader.config):
                continue
            skip.add(key)
            out.append(t)
            if len(out) == self.rules.capacity_finalists:
                break
        return out

    def _replicas_needed(self, round_: TuningRound, trial: TrialResult) -> int | None:
        """Replicas ``trial``'s config needs for the round's fleet load at its probed capacity (None: unknown)."""
        rules, fleet_rate = self.rules.scaling, self._fleet_rate(round_)
        capacity = self._capacity(round_, trial)[0]
        if rules is None or fleet_rate is None or not capacity:
            return None
        return min(max(replicas_for(fleet_rate, capacity, rules), rules.min_replicas, 1), max(rules.max_replicas, 1))

    def _fewest_replicas(self, round_: TuningRound, leader: TrialResult) -> tuple[TrialResult, str]:
        """The finalist that needs fewer replicas than the leader for the window's load, and why (the leader and
        an empty reason when none does, or when capacities are unknown)."""
        lead_need = self._replicas_needed(round_, leader)
        if lead_need is None:
            return leader, ""
        better: list[tuple[int, TrialResult]] = []
        for finalist in self._finalists(leader):  # best goodput first: the first of equal need wins
            need = self._replicas_needed(round_, finalist)
            if need is not None and need < lead_need:
                better.append((need, finalist))
        if not better:
            return leader, ""
        need, winner = min(better, key=lambda r: r[0])
        why = (
            f"{winner.config.label()} needs {need} replica(s) for the window's load and {leader.config.label()}, "
            f"the best goodput at the design load, {lead_need}"
        )
        return winner, why

    def _next_probe(self, round_: TuningRound, chosen: TrialResult) -> Decision | None:
        key = chosen.config.key()
        done = self._probe_results(round_, key)
        low, high = self._probe_bracket(round_, key)
        factor = next_probe_factor(
            low, high, base_concurrency=round_.shape.concurrency, tried=len(done), rules=self.rules.capacity_probe
        )
        if factor is None or any(f == factor for f, _t in done):
            return None
        shape = scaled(round_.shape, factor)
        bracket = (f"met the SLO at {low:g}x" if low else "missed the SLO") + (
            f", not at {high:g}x" if high is not None else ""
        )
        why = (
            f"capacity probe: {chosen.config.label()} at {factor:g}x the per-replica load ({shape.describe()}); "
            f"{bracket}"
        )
        factors = round_.probe_factors if factor in round_.probe_factors else (*round_.probe_factors, factor)
        round_ = round_.model_copy(update={"probe_key": round_.probe_key or key, "probe_factors": factors})
        status = self.status.model_copy(update={"tuning": round_})
        loop = self.rules.capacity_probe_loop
        return self._done(status, (RunTrial(chosen.config, shape, why, "capacity-probe", loop=loop),))

    def _fleet_rate(self, round_: TuningRound) -> float | None:
        """The fleet-level rate the round was tuned for (what is observed now, for rounds that did not record it)."""
        if round_.fleet_rate_rps is not None:
            return round_.fleet_rate_rps
        return self.observation.shape.arrival_rate_rps if self.observation is not None else None

    def _capacity(self, round_: TuningRound, chosen: TrialResult) -> tuple[float | None, float | None]:
        """(requests/s, concurrent requests) one replica of the chosen config carries within the SLO: the highest
        probed load that met it. Without a probe nothing is known about the capacity (a trial that met the SLO
        at a light load only bounds it from below)."""
        key = chosen.config.key()
        if not self._probe_results(round_, key):
            return None, None
        low, _high = self._probe_bracket(round_, key)
        if low == 0.0:
            return None, None
        best = next((t for f, t in self._probe_results(round_, key) if f == low), chosen)
        return min(best.goodput_rps, best.shape.arrival_rate_rps), round_.shape.concurrency * low

    def _retry_lighter(self, round_: TuningRound) -> Decision:
        """No config met the SLO at the round's per-replica load (one replica's slots hold it, its cache or prefill
        do not): the same search at half the load per replica, i.e. twice the replicas."""
        shape = scaled(round_.shape, 0.5)
        why = (
            f"round {round_.id}: no config met the SLO at {round_.shape.concurrency:.0f} requests in flight per "
            f"replica; searching again at {shape.concurrency:.0f}"
        )
        lighter = round_.model_copy(
            update={
                "id": f"{round_.id}-{shape.concurrency:.0f}",
                "shape": shape,
                "reason": f"{round_.reason}; {why}",
                "trial_keys": (),
                "trial_proposers": (),
                "trial_reasons": (),
                "probe_key": None,
                "probe_factors": (),
            }
        )
        status = self.status.model_copy(update={"tuning": lighter})
        active = status.active_config
        actions: list[Action] = [RunTrial(active, shape, f"{why}: baseline, the active config", "baseline")]
        if self.rules.tuning.measure_stock and active.key() != STOCK.key():
            actions.append(RunTrial(STOCK, shape, "tuning: stock vLLM config as the reference", "baseline"))
        actions.append(_repeat(active, shape))
        return self._done(status, actions, (why,))

    def _replicas_saved(self, round_: TuningRound, best: TrialResult, baseline: TrialResult | None) -> str:
        """With managed replicas, why switching to ``best`` would not save replicas at the round's fleet load
        (empty when it would, or when the capacities to tell are unknown). A faster config on replicas that are
        needed anyway only trades latency, and pays for its rollout with nothing."""
        if baseline is None or not baseline.meets_slo():
            return ""
        need_best, need_base = self._replicas_needed(round_, best), self._replicas_needed(round_, baseline)
        if need_best is None or need_base is None or need_best < need_base:
            return ""
        return (
            f"one replica of {best.config.label()} serves {self._capacity(round_, best)[0]:.2f} req/s within the "
            f"SLO and of {baseline.config.label()} {self._capacity(round_, baseline)[0]:.2f} req/s; {need_best} vs "
            f"{need_base} replica(s) for {self._fleet_rate(round_):.2f} req/s with headroom, so a switch would save "
            f"no GPUs"
        )

    def _short_of_replicas(self, capacity_rps: float | None) -> str:
        """With an HPA or KEDA object owning the replicas: why the replicas it holds cannot carry the load observed
        now at ``capacity_rps`` per replica (empty when they can, or when either is unknown). A config rolled out
        onto them fails its SLO analysis whatever its flags and ends up blocked; the fix is the autoscaler's."""
        if not self.external_autoscaler or not capacity_rps or self.observation is None:
            return ""
        rate = self.observation.shape.arrival_rate_rps
        replicas = max(1, self.status.replicas)
        if rate <= capacity_rps * replicas:
            return ""
        need = math.ceil(rate / capacity_rps - 1e-9)
        return (
            f"{self.external_autoscaler} holds {replicas} replica(s) for {rate:.2f} req/s and one replica carries "
            f"{capacity_rps:.2f} req/s within the SLO: the load needs at least {need}; raise its target or "
            f"maxReplicas"
        )

    def _select(self, round_: TuningRound) -> Decision:
        trials = round_trials(self.status)
        active = self.status.active_config
        baseline = find(trials, active)
        stock = find(trials, STOCK) or baseline
        best = self._best(trials)
        status = self.status.model_copy(update={"tuning": None, "tuned_shape": round_.shape})
        stock_goodput = stock.objective() if stock else 0.0
        base_goodput = baseline.objective() if baseline else 0.0
        if best is None and self.rules.scaling is not None and trials and round_.shape.concurrency >= 2:
            measured_any = any(t.status.value != "failed" for t in trials)
            if measured_any:
                return self._retry_lighter(round_)
        if best is None:
            failed = [t for t in trials if t.status.value == "failed"]
            if trials and len(failed) == len(trials):
                cause = f"the canary could not measure anything ({failed[-1].reason})"
            else:
                cause = "no trial met the SLO"
            pause = self.rules.schedule.retune_min_interval_s
            why = f"round {round_.id}: {cause}; keeping {active.label()} and pausing trials for {pause / 60:.0f} min"
            status = status.model_copy(
                update={
                    "phase": _move(status.phase, Phase.OBSERVING),
                    "tuning_paused_until": self.now + timedelta(seconds=pause),
                    "tuning_paused_reason": why,
                }
            )
            return self._done(status, (Notify(Severity.WARNING, "Trials paused", why),), (why,))
        by_capacity = ""
        if self.rules.scaling is not None and best.config.key() != active.key():
            best, by_capacity = self._fewest_replicas(round_, best)
        gain = best.objective() / base_goodput if base_goodput else float("inf")
        evidence = _evidence(best, stock)
        no_saving = self._replicas_saved(round_, best, baseline)
        # a finalist chosen for its capacity saves replicas: the gain that matters when they are managed
        min_gain = self._min_gain()
        enough = gain >= min_gain or bool(by_capacity)
        if best.config.key() == active.key() or not enough or no_saving:
            why = (
                f"round {round_.id}: keeping {active.label()} (best candidate {best.config.label()} gains "
                f"{gain:.2f}x < {min_gain:.2f}x)"
            )
            if min_gain > self.rules.tuning.min_gain:
                why += f" (the measurement noise is {self.status.noise.relative if self.status.noise else 0:.1%})"
            if no_saving and gain >= min_gain:
                why = f"round {round_.id}: keeping {active.label()}: {no_saving}"
            capacity = self._capacity(round_, baseline) if baseline else (None, None)
            entry = ScheduledConfig(
                window=round_.window,
                config=active,
                shape=round_.shape,
                goodput_tokens_per_s=base_goodput,
                stock_goodput_tokens_per_s=stock_goodput,
                reason=why,
                tuned_at=self.now,
                capacity_rps=capacity[0],
                capacity_concurrency=capacity[1],
                fleet_rate_rps=self._fleet_rate(round_),
                replicas=max(1, self.status.replicas),
            )
            status = _with_schedule(status, entry).model_copy(update={"phase": _move(status.phase, Phase.OBSERVING)})
            return self._done(status, notes=(why,))
        proposer = round_.proposer_of(best.config.key())
        capacity = self._capacity(round_, best)
        why = (
            f"{best.config.label()} delivers {best.objective():,.0f} goodput tok/s vs {base_goodput:,.0f} for "
            f"{active.label()} ({gain:.2f}x) on {round_.shape.describe()}; proposed by {proposer}"
        )
        if by_capacity:
            why += f"; chosen for capacity: {by_capacity}"
        entry = ScheduledConfig(
            window=round_.window,
            config=best.config,
            shape=round_.shape,
            goodput_tokens_per_s=best.objective(),
            stock_goodput_tokens_per_s=stock_goodput,
            reason=why,
            tuned_at=self.now,
            capacity_rps=capacity[0],
            capacity_concurrency=capacity[1],
            fleet_rate_rps=self._fleet_rate(round_),
            replicas=max(1, self.status.replicas),
        )
        status = _with_schedule(status, entry)
        if round_.window != self.window.name:
            note = f"scheduled {best.config.label()} for window '{round_.window}' ({gain:.2f}x): {why}"
            status = status.model_copy(update={"phase": _move(status.phase, Phase.OBSERVING)})
            return self._done(
                status, (Notify(Severity.INFO, f"Config scheduled for '{round_.window}'", note, evidence),), (note,)
            )
        benefit_s = (gain - 1) * self._remaining_s(self.window)
        if benefit_s < self.rules.schedule.switch_cost_s:
            note = (
                f"scheduled {best.config.label()} for window '{round_.window}' but not switching now: "
                f"{gain:.2f}x over the {self._remaining_s(self.window) / 3600:.1f} h left in the window is worth "
                f"{benefit_s:.0f} s of traffic, less than a switch costs ({self.rules.schedule.switch_cost_s:.0f} s)"
            )
            status = status.model_copy(update={"phase": _move(status.phase, Phase.OBSERVING)})
            return self._done(status, notes=(note,))
        short = self._short_of_replicas(capacity[0])
        if short:
            note = f"scheduled {best.config.label()} for window '{round_.window}' but not rolling it out: {short}"
            status = status.model_copy(update={"phase": _move(status.phase, Phase.OBSERVING)})
            return self._done(status, (Notify(Severity.WARNING, "Too few replicas", note, evidence),), (note,))
        if self.rules.tuning.dry_run:
            note = f"dry-run: would roll out {best.config.label()}: {why}"
            status = status.model_copy(update={"phase": _move(status.phase, Phase.OBSERVING)})
            return self._done(status, (Notify(Severity.INFO, "Dry-run decision", note, evidence),), (note,))
        self.status = status
        decision = self._begin_rollout(best.config, why, proposed_by=proposer, gain=gain)
        actions = (Notify(Severity.INFO, "New config chosen", why, evidence), *decision.actions)
        return Decision(decision.status, actions, decision.notes)

    # ----- rollout -----------------------------------------------------------------------------
    def _begin_rollout(self, config: EngineConfig, why: str, *, proposed_by: str, gain: float | None) -> Decision:
        approval = self.rules.tuning.approval
        ttft_ratio, tpot_ratio = expected_ratios(self.status.trials, candidate=config, stable=self.status.active_config)
        needs_approval = approval == "manual" or (approval == "manual-for-lossy" and self.is_lossy(config))
        step = rollouts.start(
            rollout_id=f"{self.window.name}-{self.now:%Y%m%d%H%M%S}",
            from_config=self.status.active_config,
            to_config=config,
            rules=self.rules.rollout,
            now=self.now,
            reason=why,
            proposed_by=proposed_by,
            expected_gain=gain,
            needs_approval=needs_approval,
            candidate_replicas=self.status.replicas,
            expected_ttft_ratio=ttft_ratio,
            expected_tpot_ratio=tpot_ratio,
        )
        status = self.status.model_copy(
            update={"phase": _move(self.status.phase, step.phase), "rollout": step.rollout, "tuning": None}
        )
        return self._done(status, step.actions, step.notes)

    def _rollout(self, candidate_ready_replicas: int | None) -> Decision:
        state = self.status.rollout
        if state is None:
            note = f"phase {self.status.phase.value} without a rollout record; observing"
            return self._done(self.status.model_copy(update={"phase": Phase.OBSERVING}), notes=(note,))
        step = rollouts.advance(
            state=state,
            phase=self.status.phase,
            observation=self.observation,
            slo=self.rules.slo,
            rules=self.rules.rollout,
            now=self.now,
            candidate_ready_replicas=candidate_ready_replicas,
            fleet_replicas=self.status.replicas,
        )
        update: dict[str, object] = {"phase": _move(self.status.phase, step.phase), "rollout": step.rollout}
        if self.observation is None:
            update["frozen_reason"] = f"rollout held: {self.observe_error or 'no observation'}"
        else:
            update["frozen_reason"] = None
        history = self.status.history
        for action in step.actions:
            if isinstance(action, Promote):
                update.update(active_config=action.config, rollout=None, last_switch_at=self.now)
                history = (*history, f"{self.now:%Y-%m-%d %H:%M} promoted {action.config.label()}: {action.reason}")
            elif isinstance(action, Rollback):
                history = (*history, f"{self.now:%Y-%m-%d %H:%M} {action.reason}")
                if not state.abort_requested and not state.rejected():
                    update["blocked_configs"] = (*self.status.blocked_configs, state.to_config.key())[-50:]
                entry = self.status.schedule_for(self.window.name)
                if entry is not None and entry.config.key() == state.to_config.key():
                    restored = entry.model_copy(
                        update={
                            "config": state.from_config,
                            "reason": f"restored after rollback: {action.reason}",
                            # the probed capacity was the rolled-back config's
                            "capacity_rps": None,
                            "capacity_concurrency": None,
                        }
                    )
                    update["schedule"] = _with_schedule(self.status, restored).schedule
        if step.rollout is None and step.phase is Phase.OBSERVING:
            update["rollout"] = None
        update["history"] = history[-50:]
        return self._done(self.status.model_copy(update=update), step.actions, step.notes)


def _with_digest(decision: Decision, rules: Rules, now: datetime) -> Decision:
    """Add the daily digest once a day, at the configured hour."""
    digest = rules.digest
    status = decision.status
    if (
        digest is None
        or now.hour < digest.hour
        or (status.last_digest_on is not None and status.last_digest_on >= now.date())
    ):
        return decision
    lines = [
        (e.window, e.describe())
        for e in schedule_economics(
            status.schedule, windows=rules.windows, gpu_usd_per_hour=digest.gpu_usd_per_hour, api=digest.api
        )
    ]
    configs = [
        (f"config {s.window}", f"{s.config.label()} ({s.gain:.2f}x stock, {s.replicas} replicas)")
        for s in status.schedule
    ]
    summary = (
        f"active {status.active_config.label()}, phase {status.phase.value}; {len(status.schedule)} windows scheduled; "
        f"{len(status.history)} rollouts/rollbacks on record"
    )
    note = Notify(Severity.INFO, "Daily digest", summary, tuple(configs + lines))
    return Decision(status.model_copy(update={"last_digest_on": now.date()}), (*decision.actions, note), decision.notes)


def slo_breach(observation: Observation, slo: SLO, min_samples: int) -> str:
    """Why the stable variant is breaching the SLO right now (empty when it is not, or too few requests to say)."""
    stable = observation.variants.get("stable")
    if stable is None or stable.requests < min_samples:
        return ""
    problems = []
    if stable.ttft_p95_s is not None and stable.ttft_p95_s > slo.ttft_seconds:
        problems.append(f"TTFT p95 {stable.ttft_p95_s:.2f} s > {slo.ttft_seconds:g} s")
    if stable.tpot_p95_s is not None and stable.tpot_p95_s > slo.tpot_seconds:
        problems.append(f"TPOT p95 {stable.tpot_p95_s * 1000:.0f} ms > {slo.tpot_seconds * 1000:.0f} ms")
    if stable.error_rate > slo.max_error_rate:
        problems.append(f"error rate {stable.error_rate:.1%} > {slo.max_error_rate:.1%}")
    if not problems:
        return ""
    return f"SLO breach on the active config over {stable.requests} requests: " + "; ".join(problems)


def expected_ratios(
    trials: Sequence[TrialResult], *, candidate: EngineConfig, stable: EngineConfig
) -> tuple[float | None, float | None]:
    """Candidate/stable p95 TTFT and TPOT as the latest canary trials of both measured them on the same shape
    (a capacity probe of one config at a load the other was not probed at says nothing about the trade-off)."""
    for cand in reversed(trials):
        if cand.config.key() != candidate.key() or not cand.ok or cand.ttft_s is None or cand.tpot_s is None:
            continue
        base = next(
            (t for t in reversed(trials) if t.config.key() == stable.key() and t.shape == cand.shape and t.ok), None
        )
        if base is None or base.ttft_s is None or base.tpot_s is None or not base.ttft_s.p95 or not base.tpot_s.p95:
            continue
        return cand.ttft_s.p95 / base.ttft_s.p95, cand.tpot_s.p95 / base.tpot_s.p95
    return None, None


def _repeat(config: EngineConfig, shape: TrafficShape) -> RunTrial:
    """The round's second measurement of its baseline: the two differ only by the noise of the measurement."""
    why = f"tuning: {config.label()} again, to measure the noise of the measurement"
    return RunTrial(config, shape, why, "repeat", repeat=True)


def _with_noise(status: TargetStatus, round_: TuningRound, now: datetime) -> TargetStatus:
    """Status with the noise the round's repeats measured (unchanged while the round holds no repeat)."""
    found = noises.measured(round_trials(status))
    if found is None:
        return status
    relative, repeats = found
    noise = MeasuredNoise(relative=relative, repeats=repeats, round_id=round_.id, measured_at=now)
    if status.noise is not None and status.noise.model_copy(update={"measured_at": now}) == noise:
        return status
    return status.model_copy(update={"noise": noise})


def _with_schedule(status: TargetStatus, entry: ScheduledConfig) -> TargetStatus:
    others = tuple(s for s in status.schedule if s.window != entry.window)
    return status.model_copy(update={"schedule": (*others, entry)})


def _evidence(best: TrialResult, stock: TrialResult | None) -> tuple[tuple[str, str], ...]:
    def row(t: TrialResult | None) -> str:
        if t is None or t.ttft_s is None or t.tpot_s is None:
            return "n/a"
        return (
            f"{t.output_tokens_per_s:,.0f} tok/s, goodput {t.goodput_tokens_per_s:,.0f}, "
            f"TTFT p95 {t.ttft_s.p95 * 1000:.0f} ms, TPOT p95 {t.tpot_s.p95 * 1000:.1f} ms"
        )

    return (("stock", row(stock)), ("chosen", row(best)), ("config", best.config.label()))
