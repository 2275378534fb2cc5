"""One control cycle for one target: observe -> decide -> act.

The observe and act halves do the I/O through ports; the decide half (:mod:`controller.decide.planner`) is pure.
The caller (the Kubernetes reactor, the demo, a test) persists the returned status: one status write per cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from controller.decide import guardrails, planner
from controller.decide.capacity import ScalingRules
from controller.decide.rollout import RolloutRules
from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Plan,
    Promote,
    RequestApproval,
    Rollback,
    RunTrial,
    Scale,
    SetWeights,
)
from controller.domain.observation import Observation, TargetRef
from controller.domain.phases import Phase
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import MetricsUnavailable, NotFound, ShiftlightError, TemporaryError
from controller.policy import Policy
from controller.ports import (
    Advisor,
    Clock,
    Cluster,
    Forecaster,
    LoadTester,
    MetricsSource,
    Notifier,
    TrafficRouter,
    TrialBudget,
    TrialRequest,
)

log = logging.getLogger(__name__)

#: The longest window a rollout step's analysis looks back over.
MAX_ANALYSIS_WINDOW_S = 3 * 3600.0


@dataclass(frozen=True)
class Ports:
    metrics: MetricsSource
    load_tester: LoadTester
    router: TrafficRouter
    advisor: Advisor
    notifier: Notifier
    cluster: Cluster
    clock: Clock
    fallback_advisor: Advisor | None = None
    """Used when ``advisor`` fails (e.g. the LLM endpoint is down)."""
    forecaster: Forecaster | None = None
    """Expected busy-hour shape per window; lets windows be tuned ahead and pre-warmed."""


@dataclass(frozen=True)
class CycleResult:
    status: TargetStatus
    plan: Plan
    requeue_after_s: float
    trials: tuple[TrialResult, ...] = ()
    rejected: tuple[str, ...] = field(default=())


def rules_from_policy(
    policy: Policy,
    windows: Sequence[TimeWindow] = (),
    *,
    scaling: ScalingRules | None = None,
    digest: planner.DigestRules | None = None,
) -> planner.Rules:
    """Translate the user's policy (and the target's replica bounds) into the decide layer's rules."""
    thresholds = policy.rollout.thresholds
    return planner.Rules(
        slo=policy.slo,
        tuning=planner.TuningRules(
            max_trials=policy.trial_budget.max_trials,
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
            analysis_interval_s=policy.rollout.analysis_interval_seconds,
            on_missing_data=policy.rollout.on_missing_data,
        ),
        windows=tuple(windows) or planner.DEFAULT_WINDOWS,
        scaling=scaling,
        digest=digest,
        design_slots=policy.largest_max_num_seqs(),
    )


class Reconciler:
    """Runs observe -> decide -> act for one target per call. Holds no state between calls."""

    def __init__(
        self,
        ports: Ports,
        policy: Policy,
        *,
        windows: Sequence[TimeWindow] = (),
        observe_window_s: float = 300.0,
        trial_seed: int = 0,
        rules: planner.Rules | None = None,
        on_trial: Callable[[TrialResult], None] | None = None,
    ) -> None:
        self.ports = ports
        self.policy = policy
        self.rules = rules or rules_from_policy(policy, windows)
        self.observe_window_s = observe_window_s
        self.trial_seed = trial_seed
        self.on_trial = on_trial

    # ----- observe -----------------------------------------------------------------------------
    def _observe(self, target: TargetRef, status: TargetStatus) -> tuple[Observation | None, str | None]:
        """The last observe window; during a rollout step, everything since the step began (bounded), so the
        analysis accumulates samples across cycles."""
        now = self.ports.clock.now()
        start = now - timedelta(seconds=self.observe_window_s)
        step_start = status.rollout.step_started_at if status.rollout is not None else None
        if step_start is not None and status.rollout is not None and status.rollout.weight > 0:
            start = max(min(start, step_start), now - timedelta(seconds=MAX_ANALYSIS_WINDOW_S))
        try:
            obs = self.ports.metrics.observe(target, start=start, end=now)
        except MetricsUnavailable as exc:
            return None, f"metrics unavailable: {exc}"
        return obs, None

    def _proposals(self, target: TargetRef, status: TargetStatus) -> tuple[list[Proposal], list[str]]:
        if status.phase is not Phase.TRIALLING or status.tuning is None:
            return [], []
        round_ = status.tuning
        history = tuple(planner.round_trials(status))
        remaining = self.rules.tuning.max_trials - len(round_.trial_keys)
        if remaining <= 0:
            return [], []
        ctx = AdvisorContext(
            target=target,
            shape=round_.shape,
            slo=self.rules.slo,
            active=status.active_config,
            history=history,
            max_proposals=min(remaining, self.rules.tuning.trials_per_cycle),
        )
        notes: list[str] = []
        try:
            raw = list(self.ports.advisor.propose(ctx))
        except ShiftlightError as exc:
            if self.ports.fallback_advisor is None:
                return [], [f"advisor failed ({exc}); no fallback configured"]
            notes.append(f"advisor failed ({exc}); the optimizer proposes instead")
            raw = list(self.ports.fallback_advisor.propose(ctx))
        accepted, rejected = self.screen(raw, status)
        if not accepted and rejected and self.ports.fallback_advisor is not None:
            notes.append("every proposal was rejected; the optimizer proposes instead")
            more, more_rejected = self.screen(list(self.ports.fallback_advisor.propose(ctx)), status)
            accepted, rejected = more, rejected + more_rejected
        return accepted, notes + rejected

    def screen(self, proposals: Sequence[Proposal], status: TargetStatus) -> tuple[list[Proposal], list[str]]:
        """Guardrails: only in-policy, feasible, new, in-budget configs reach a trial.

        Returns the accepted proposals and one line per rejection (who proposed it and why it was refused).
        """
        blocked = set(status.blocked_configs)
        refused = [
            f"rejected {p.config.label()} ({p.proposed_by}): rolled back in production earlier"
            for p in proposals
            if p.config.key() in blocked
        ]
        verdict = guardrails.check_proposals(
            [p for p in proposals if p.config.key() not in blocked],
            policy=self.policy,
            active=status.active_config,
            history=planner.round_trials(status),
            max_accept=self.rules.tuning.trials_per_cycle,
        )
        return list(verdict.accepted), refused + [f"rejected {r.describe()}" for r in verdict.rejected]

    # ----- cycle -------------------------------------------------------------------------------
    def reconcile(self, target: TargetRef, status: TargetStatus) -> CycleResult:
        observation, error = self._observe(target, status)
        forecast, status = self._forecast(target, status)
        proposals, screen_notes = self._proposals(target, status)
        candidate_ready = self.ports.cluster.ready_replicas(target, "candidate") if status.rollout is not None else None
        decision = planner.plan(
            status=status,
            observation=observation,
            observe_error=error,
            proposals=proposals,
            rules=self.rules,
            now=self.ports.clock.now(),
            is_lossy=self.policy.is_lossy,
            candidate_ready_replicas=candidate_ready,
            external_autoscaler=self._external_autoscaler(target),
            forecast=forecast,
        )
        try:
            new_status, trials = self.act(target, decision.status, decision.actions)
        except TemporaryError as exc:
            why = f"could not act ({type(exc).__name__}: {exc}); keeping the previous state, retry in {exc.delay_s:g} s"
            log.warning("%s: %s", target, why)
            kept = status.model_copy(update={"last_reasons": (why,), "updated_at": self.ports.clock.now()})
            plan = Plan(actions=decision.actions, requeue_after_s=exc.delay_s, notes=(why,))
            return CycleResult(kept, plan, exc.delay_s, (), tuple(screen_notes))
        if screen_notes:
            new_status = new_status.model_copy(update={"last_reasons": (*new_status.last_reasons, *screen_notes)})
        requeue = (
            self.rules.rollout.analysis_interval_s
            if new_status.phase is Phase.ROLLING_OUT
            else 30.0
            if new_status.phase is Phase.TRIALLING
            else 60.0
        )
        plan = Plan(actions=decision.actions, requeue_after_s=requeue, notes=decision.notes + tuple(screen_notes))
        return CycleResult(new_status, plan, requeue, tuple(trials), tuple(screen_notes))

    def _forecast(self, target: TargetRef, status: TargetStatus) -> tuple[dict[str, TrafficShape], TargetStatus]:
        """Busy-hour shapes per window; the forecaster's profile is restored from and kept in status."""
        forecaster = self.ports.forecaster
        if forecaster is None:
            return {}, status
        if status.profile is not None:
            forecaster.restore(status.profile)
        try:
            shapes = dict(forecaster.window_shapes(target, windows=self.rules.windows, now=self.ports.clock.now()))
        except ShiftlightError as exc:
            log.warning("%s: no forecast this cycle (%s)", target, exc)
            return {}, status
        profile = forecaster.profile_state()
        if profile is not None and profile != status.profile:
            status = status.model_copy(update={"profile": profile})
        return shapes, status

    def _external_autoscaler(self, target: TargetRef) -> str | None:
        if self.rules.scaling is None:
            return None
        try:
            return self.ports.cluster.external_autoscaler(target)
        except ShiftlightError as exc:
            log.warning("%s: could not look for an HPA/KEDA object (%s); not scaling this cycle", target, exc)
            return "an unknown autoscaler (lookup failed)"

    # ----- act ---------------------------------------------------------------------------------
    def act(
        self, target: TargetRef, status: TargetStatus, actions: Sequence[Action]
    ) -> tuple[TargetStatus, list[TrialResult]]:
        """Apply the actions in order, each exactly as decided (no argument is second-guessed here). A failed
        effect raises (a :class:`TemporaryError` from the adapter) and the caller keeps the previous status, so the
        decision is re-made next cycle; Events are best effort."""
        trials: list[TrialResult] = []
        for action in actions:
            log.info("%s: %s: %s", target, type(action).__name__, action.reason)
            if isinstance(action, RunTrial):
                result = self._run_trial(target, action)
                trials.append(result)
                status = _record_trial(status, action, result, keep=self.rules.tuning.keep_trials)
                if self.on_trial is not None:
                    self.on_trial(result)
            elif isinstance(action, SetWeights):
                self.ports.router.set_weight(target, action.candidate_weight)
            elif isinstance(action, DeployCandidate):
                self.ports.cluster.deploy(target, "candidate", action.config, action.replicas)
            elif isinstance(action, Promote):
                try:
                    self.ports.cluster.promote(target)
                except NotFound:
                    # a promote applied before a lost status write: the candidate is already the stable variant
                    log.info("%s: candidate already promoted; treating Promote as done", target)
            elif isinstance(action, Rollback):
                self.ports.router.set_weight(target, 0)
                self.ports.cluster.retire(target, "candidate")
            elif isinstance(action, Scale):
                self.ports.cluster.scale(target, action.variant, action.replicas)
                if action.variant == "stable":
                    status = status.model_copy(update={"replicas": action.replicas})
            elif isinstance(action, Notify):
                self.ports.notifier.post(target, action)
            elif isinstance(action, RequestApproval):
                pass  # the Notify that accompanies it tells people; the phase records the wait
            warning = isinstance(action, Rollback) or (isinstance(action, Notify) and action.severity != "info")
            try:
                self.ports.cluster.record_event(target, type(action).__name__, action.reason, warning=warning)
            except ShiftlightError as exc:
                log.warning("%s: could not record an Event (%s)", target, exc)
        return status, trials

    def _run_trial(self, target: TargetRef, action: RunTrial) -> TrialResult:
        budget = self.policy.trial_budget
        request = TrialRequest(
            target=target,
            config=action.config,
            shape=action.shape,
            slo=self.rules.slo,
            budget=TrialBudget(
                duration_s=budget.trial_duration_s,
                warmup_s=budget.warmup_s,
                startup_timeout_s=budget.startup_timeout_s,
            ).for_shape(action.shape),
            seed=self.trial_seed,
            loop=action.loop,
        )
        try:
            return self.ports.load_tester.run(request)
        except ShiftlightError as exc:  # a load tester must not raise; if one does, the failure is data
            return TrialResult(
                config=action.config,
                shape=action.shape,
                slo=self.rules.slo,
                status=TrialStatus.FAILED,
                reason=f"load tester error: {exc}",
            )


def _record_trial(status: TargetStatus, action: RunTrial, result: TrialResult, *, keep: int) -> TargetStatus:
    trials = (*status.trials, result)[-keep:]
    update: dict[str, object] = {"trials": trials}
    if status.tuning is not None:
        t = status.tuning
        update["tuning"] = t.model_copy(
            update={
                "trial_keys": (*t.trial_keys, action.config.key()),
                "trial_proposers": (*t.trial_proposers, action.proposed_by),
                "trial_reasons": (*t.trial_reasons, action.reason),
            }
        )
    return status.model_copy(update=update)


__all__ = ["CycleResult", "Ports", "Reconciler", "rules_from_policy"]
