"""One control cycle for one target: observe -> screen -> decide -> act -> one status.

Observe and act do the I/O through ports; decide (:mod:`controller.decide`) is pure. Act
(:mod:`controller.act`) returns effects, which the cycle folds into the decided status once. The caller (the
Kubernetes reactor, the demo, a test) persists the returned status: one status write per cycle.

Trials do not block the cycle. A cycle whose trials a background load tester is still running keeps its decision
here and returns at once with a short requeue; the next cycles poll, and the one that finds every trial finished
folds the whole decision. Nothing else is kept between calls; an operator restarted while a trial runs decides
again from the status it last wrote and runs the trial again (a trial is idempotent: it only measures a canary).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from controller import decide
from controller.act import ActInterrupted, ActPorts, Executor, Promises, TrialSettings, fold, running
from controller.act.effects import Effect, TrialRecorded
from controller.decide import TRIAL_POLL_S, Rules, advisor_context, observe_window, requeue_after, screen
from controller.domain import evidence
from controller.domain.actions import Action, Plan
from controller.domain.codes import Code
from controller.domain.observation import Observation, TargetRef
from controller.domain.proposal import Proposal
from controller.domain.status import Reason, TargetStatus
from controller.domain.trial import TrialResult
from controller.errors import MetricsUnavailable, ShiftlightError, TemporaryError
from controller.observe.window_forecasts import window_forecasts
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
)

log = logging.getLogger(__name__)


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
    effects: tuple[Effect, ...] = ()
    """What acting on the decision did, once it is folded (none while its trials run or a retry is due)."""


#: Cycles in a row a decision whose acting was interrupted is resumed before it is given up and decided afresh.
MAX_RESUMES = 10


def screened_proposals(
    target: TargetRef,
    status: TargetStatus,
    *,
    rules: Rules,
    advisor: Advisor,
    fallback: Advisor | None,
) -> tuple[list[Proposal], list[str]]:
    """The accepted proposals for a trialling round, and the notes (advisor failures, fallbacks, rejections).

    Asks the advisor (the fallback when it fails, or when every proposal it made is refused) for what
    :func:`~controller.decide.advisor_context` says is wanted; decide screens the proposals
    (:func:`~controller.decide.screen`)."""
    ctx = advisor_context(target, status, rules=rules)
    if ctx is None:
        return [], []
    per_cycle = rules.tuning.trials_per_cycle
    notes: list[str] = []
    try:
        raw = list(advisor.propose(ctx))
    except ShiftlightError as exc:
        if fallback is None:
            return [], [f"advisor failed ({exc}); no fallback configured"]
        notes.append(f"advisor failed ({exc}); the optimizer proposes instead")
        raw = list(fallback.propose(ctx))
    accepted, rejected = screen(raw, status, rules=rules, max_accept=per_cycle)
    if not accepted and rejected and fallback is not None:
        notes.append("every proposal was rejected; the optimizer proposes instead")
        more, more_rejected = screen(list(fallback.propose(ctx)), status, rules=rules, max_accept=per_cycle)
        accepted, rejected = more, rejected + more_rejected
    return accepted, notes + rejected


@dataclass(frozen=True)
class _Acted:
    """A decision and what acting on it did so far (trials may still be running; ``remaining`` actions were not
    done yet because a port call failed, and are retried next cycle)."""

    decided: TargetStatus
    plan: Plan
    effects: tuple[Effect, ...]
    screen_notes: tuple[str, ...]
    remaining: tuple[Action, ...] = ()
    resumes: int = 0


class Reconciler:
    """Runs observe -> screen -> decide -> act for one target per call. Keeps only decisions whose trials still run.

    Everything it knows of the policy is in ``rules`` (:meth:`Rules.from_policy`); the operator, the demo and the
    benches build it through :func:`controller.cycle.cycle_for`."""

    def __init__(
        self,
        ports: Ports,
        rules: Rules,
        *,
        observe_window_s: float = 300.0,
        trial_seed: int = 0,
        on_trial: Callable[[TrialResult], None] | None = None,
        gpu_price: evidence.GpuPrice | None = None,
    ) -> None:
        """``gpu_price``: what a GPU-hour costs, for a decision's cost in its notice (None: GPU-hours only)."""
        self.ports = ports
        self.gpu_price = gpu_price
        self.rules = rules
        self.observe_window_s = observe_window_s
        self.on_trial = on_trial
        tuning = rules.tuning
        self.executor = Executor(
            ActPorts(
                router=ports.router, cluster=ports.cluster, notifier=ports.notifier, load_tester=ports.load_tester
            ),
            TrialSettings(
                slo=self.rules.slo,
                budget=TrialBudget(
                    duration_s=tuning.trial_duration_s,
                    warmup_s=tuning.trial_warmup_s,
                    startup_timeout_s=tuning.trial_startup_timeout_s,
                ),
                seed=trial_seed,
            ),
        )
        self._in_flight: dict[str, _Acted] = {}
        self.last_decide_s: float | None = None
        """Wall time of the last call to the pure decide step (None until one ran); read by the operator's metrics."""
        self.last_decide_cpu_s: float | None = None
        """CPU time the calling thread spent in that call: its wall time less any wait for the interpreter lock
        (held by the operator's other threads) or for the machine's cores."""

    def reconcile(self, target: TargetRef, status: TargetStatus) -> CycleResult:
        held = self._in_flight.pop(str(target), None)
        if held is not None:
            polled = replace(held, effects=self.executor.poll(held.effects), remaining=())
            if held.remaining:  # a port call failed last cycle: the actions done stay done, the rest is retried
                promises = self.promises(status, held.decided)
                try:
                    done = self.executor.execute(target, held.remaining, promises)
                    polled = replace(polled, effects=polled.effects + done)
                except ActInterrupted as exc:
                    interrupted = replace(
                        polled, effects=polled.effects + exc.effects, remaining=exc.remaining, resumes=held.resumes + 1
                    )
                    return self._interrupted(target, status, interrupted, exc, now=self.ports.clock.now())
            return self._finish(target, status, polled)
        now = self.ports.clock.now()
        observation, error = self._observe(target, status)
        forecast, status = window_forecasts(self.ports.forecaster, target, status, windows=self.rules.windows, now=now)
        proposals, screen_notes = screened_proposals(
            target,
            status,
            rules=self.rules,
            advisor=self.ports.advisor,
            fallback=self.ports.fallback_advisor,
        )
        candidate_ready = self.ports.cluster.ready_replicas(target, "candidate") if status.rollout is not None else None
        began, began_cpu = time.perf_counter(), time.thread_time()
        decision = decide.plan(
            status=status,
            observation=observation,
            observe_error=error,
            proposals=proposals,
            rules=self.rules,
            now=now,
            is_lossy=self.rules.is_lossy,
            candidate_ready_replicas=candidate_ready,
            external_autoscaler=self._external_autoscaler(target),
            forecast=forecast,
        )
        self.last_decide_s = time.perf_counter() - began
        self.last_decide_cpu_s = time.thread_time() - began_cpu
        shown = evidence.annotate(  # the approver's evidence on the approval request, GPU-hours on a decision
            decision.actions,
            service=target.name,
            status=decision.status,
            lossy_reasons=self.rules.lossy_reasons,
            windows=self.rules.windows,
            gpu_price=self.gpu_price,
        )
        decision = replace(decision, actions=shown)
        plan = Plan(actions=decision.actions, notes=decision.notes + tuple(screen_notes), codes=decision.codes)
        try:
            effects = self.executor.execute(target, decision.actions, self.promises(status, decision.status))
        except ActInterrupted as exc:
            acted = _Acted(decision.status, plan, exc.effects, tuple(screen_notes), remaining=exc.remaining)
            return self._interrupted(target, status, acted, exc, now=now)
        except TemporaryError as exc:  # raised outside the actions (the executor wraps theirs)
            return self._kept(target, status, decision.actions, exc, "keeping the previous state", screen_notes, now)
        return self._finish(target, status, _Acted(decision.status, plan, effects, tuple(screen_notes)))

    def promises(self, before: TargetStatus, decided: TargetStatus) -> Promises:
        """What production may not do this cycle (:mod:`controller.act.guard`): dry run from the rules, the pause,
        rejection and approvals users left on the rollout in ``before`` (the status read at the cycle's start)."""
        return Promises.of(
            before,
            decided,
            dry_run=self.rules.tuning.dry_run,
            approval=self.rules.tuning.approval,
            is_lossy=self.rules.is_lossy,
        )

    def _interrupted(
        self, target: TargetRef, status: TargetStatus, acted: _Acted, exc: ActInterrupted, *, now: datetime
    ) -> CycleResult:
        """A port call failed mid-plan. Nothing done yet: the previous status is kept and the next cycle decides
        again. Some actions done (a trial started, a candidate deployed, a notification posted): the decision and
        their effects are kept here and the next cycle retries only the rest, so none is done twice; after
        :data:`MAX_RESUMES` failed retries the decision is given up and made afresh."""
        done = len(acted.plan.actions) - len(acted.remaining)
        if done == 0 or acted.resumes >= MAX_RESUMES:
            return self._kept(target, status, acted.plan.actions, exc.cause, "keeping the previous state", (), now)
        self._in_flight[str(target)] = acted
        what = f"{done} action(s) done are kept, the other {len(acted.remaining)} retried"
        return self._kept(target, status, acted.plan.actions, exc.cause, what, acted.screen_notes, now)

    def _kept(
        self,
        target: TargetRef,
        status: TargetStatus,
        actions: tuple[Action, ...],
        exc: TemporaryError,
        what: str,
        screen_notes: Sequence[str],
        now: datetime,
    ) -> CycleResult:
        why = f"could not act ({type(exc).__name__}: {exc}); {what}, retry in {exc.delay_s:g} s"
        log.warning("%s: %s", target, why)
        kept = stamped(
            status, status.model_copy(update={"last_reasons": (Reason(code=Code.ACT_RETRY, message=why),)}), now
        )
        plan = Plan(actions=actions, requeue_after_s=exc.delay_s, notes=(why,), codes=(Code.ACT_RETRY,))
        return CycleResult(kept, plan, exc.delay_s, (), tuple(screen_notes))

    def _observe(self, target: TargetRef, status: TargetStatus) -> tuple[Observation | None, str | None]:
        start, end = observe_window(self.ports.clock.now(), status, self.observe_window_s)
        try:
            return self.ports.metrics.observe(target, start=start, end=end), None
        except MetricsUnavailable as exc:
            return None, f"metrics unavailable: {exc}"

    def _external_autoscaler(self, target: TargetRef) -> str | None:
        if self.rules.scaling is None:
            return None
        try:
            return self.ports.cluster.external_autoscaler(target)
        except ShiftlightError as exc:
            log.warning("%s: could not look for an HPA/KEDA object (%s); not scaling this cycle", target, exc)
            return "an unknown autoscaler (lookup failed)"

    def _finish(self, target: TargetRef, status: TargetStatus, acted: _Acted) -> CycleResult:
        """Fold a decision whose trials have all finished; while one still runs, keep it and look again soon."""
        waiting = running(acted.effects)
        if waiting:
            self._in_flight[str(target)] = acted
            note = f"waiting for {len(waiting)} trial(s): " + ", ".join(t.action.config.label() for t in waiting)
            kept = status.model_copy(update={"last_reasons": (Reason(code=Code.TRIALS_RUNNING, message=note),)})
            plan = Plan(requeue_after_s=TRIAL_POLL_S, notes=(note,), codes=(Code.TRIALS_RUNNING,))
            return CycleResult(kept, plan, TRIAL_POLL_S)
        new_status = fold(acted.decided, acted.effects, keep_trials=self.rules.tuning.keep_trials)
        trials = tuple(e.result for e in acted.effects if isinstance(e, TrialRecorded))
        if self.on_trial is not None:
            for result in trials:
                self.on_trial(result)
        if acted.screen_notes:
            screened = tuple(Reason(code=Code.PROPOSALS_SCREENED, message=n) for n in acted.screen_notes)
            new_status = new_status.model_copy(update={"last_reasons": (*new_status.last_reasons, *screened)})
        new_status = stamped(status, new_status, acted.decided.updated_at)
        requeue = requeue_after(new_status.phase, analysis_interval_s=self.rules.rollout.analysis_interval_s)
        plan = replace(acted.plan, requeue_after_s=requeue)
        return CycleResult(new_status, plan, requeue, trials, acted.screen_notes, acted.effects)


#: Reason codes whose sentence describes the traffic of the moment (``observing: 0.07 req/s, ...``, and why the
#: replicas stay as they are while observing: ``keep 2: load 0.07 req/s x 1.25 headroom ...``): a cycle whose only
#: change is such a sentence changed nothing, or every idle TunedService would write its status whenever its traffic
#: moved. The sentence is refreshed with the next real change.
LIVE_REASONS = frozenset({Code.OBSERVING.value, Code.REPLICAS_KEPT_OBSERVING.value})


def stamped(before: TargetStatus, after: TargetStatus, now: datetime | None) -> TargetStatus:
    """``after`` with ``updated_at`` at ``now`` when it differs from ``before`` in anything else (the sentences of
    :data:`LIVE_REASONS` aside), else ``before``: a cycle that changed nothing leaves the status as it was, so it
    need not be written."""
    if after.model_copy(update={"updated_at": before.updated_at}) == before:
        return before
    old, new = before.last_reasons, after.last_reasons
    live_only = len(old) == len(new) and all(
        a == b or (a.code == b.code and a.code in LIVE_REASONS) for a, b in zip(old, new, strict=True)
    )
    if live_only and after.model_copy(update={"updated_at": before.updated_at, "last_reasons": old}) == before:
        return before
    return after.model_copy(update={"updated_at": now})


__all__ = ["CycleResult", "Ports", "Reconciler", "stamped"]
