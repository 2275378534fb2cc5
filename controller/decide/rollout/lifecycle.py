"""Rollout bookkeeping: start a rollout of a chosen config, and record what each step of it did in status
(promotion, rollback, the blocked configs, the schedule entry a rollback restores). The step logic itself is
:mod:`controller.decide.rollout.steps`. Pure."""

from __future__ import annotations

from controller.decide import rejections
from controller.decide.context import Intent, PlanContext, move, observing, with_schedule
from controller.decide.rollout import steps as rollouts
from controller.decide.rollout.sizing import Swap
from controller.decide.tuning.selection import expected_ratios, stable_missed_slo
from controller.domain.actions import Action, Notify, Promote, Rollback, Severity
from controller.domain.approval import needs_approval
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.phases import Phase
from controller.domain.rollout import RolloutState
from controller.domain.status import BlockedConfig, Rejection, ServedConfig


def begin(
    ctx: PlanContext,
    config: EngineConfig,
    why: str,
    *,
    proposed_by: str,
    gain: float | None,
    window: str | None = None,
    swap: Swap | None = None,
) -> Intent:
    """Start rolling ``config`` out for ``window`` (the current one when None; code ``rollout-started``, or
    ``approval-required`` when it waits for one); a pre-validated ``swap`` in its own steps, bake and surge.

    Every rollout starts here, whoever chose it (a round's outcome, the schedule's switch or pre-warm, the static
    fallback), so the promises hold for all of them: in dry run nothing starts and the decision says what would
    have (code ``dry-run``, :func:`dry_run`); a config a human rejected for the window is not proposed again while
    the rejection stands (code ``rejection-kept``, :mod:`controller.decide.rejections`)."""
    status = ctx.status
    for_window = window or ctx.window.name
    entry = status.schedule_for(for_window)
    shape = entry.shape if entry is not None else status.tuned_shape
    rejected = rejections.standing(ctx, config.key(), for_window, shape)
    if rejected is not None:
        memory_s = ctx.rules.rollout.rejection_memory_s
        note = f"not rolling out {config.label()}: {rejections.describe(rejected, memory_s)}"
        return Intent(Code.REJECTION_KEPT, observing(status.model_copy(update={"tuning": None})), notes=(note,))
    if ctx.rules.tuning.dry_run:
        return dry_run(ctx, config, why, window=for_window)
    approval = ctx.rules.tuning.approval
    ttft_ratio, tpot_ratio = expected_ratios(status.trials, candidate=config, stable=status.active_config)
    stable_missed = stable_missed_slo(status.trials, candidate=config, stable=status.active_config)
    waits = needs_approval(approval, lossy=ctx.is_lossy(config))
    step = rollouts.start(
        rollout_id=f"{ctx.window.name}-{ctx.now:%Y%m%d%H%M%S}",
        from_config=status.active_config,
        to_config=config,
        rules=ctx.rules.rollout,
        now=ctx.now,
        reason=why,
        proposed_by=proposed_by,
        expected_gain=gain,
        needs_approval=waits,
        candidate_replicas=status.replicas,
        expected_ttft_ratio=ttft_ratio,
        expected_tpot_ratio=tpot_ratio,
        latency_vs_stable=not stable_missed,
        window=window or ctx.window.name,
        swap=swap,
    )
    new = status.model_copy(update={"phase": move(status.phase, step.phase), "rollout": step.rollout, "tuning": None})
    code = Code.APPROVAL_REQUIRED if waits else Code.ROLLOUT_STARTED
    return Intent(code, new, step.actions, step.notes)


def dry_run(
    ctx: PlanContext, config: EngineConfig, why: str, *, window: str, fields: tuple[tuple[str, str], ...] = ()
) -> Intent:
    """Dry run: the rollout of ``config`` for ``window`` that would start, said and not done (code ``dry-run``):
    the phase stays Observing, nothing is deployed, no traffic moves. The notification goes out once per decision:
    not again while the last cycle's reasons already say the same (the schedule would otherwise repeat it each
    cycle of the window)."""
    head = f"dry-run: would roll out {config.label()} for window '{window}'"
    note = f"{head}: {why}"
    status = observing(ctx.status.model_copy(update={"tuning": None}))
    said = any(r.code == Code.DRY_RUN and r.message.startswith(head) for r in ctx.status.last_reasons)
    actions: tuple[Action, ...] = () if said else (Notify(Severity.INFO, "Dry-run decision", note, fields),)
    return Intent(Code.DRY_RUN, status, actions, (note,))


def advance(ctx: PlanContext, *, fleet_replicas: int | None = None) -> Intent:
    """One cycle of a running, paused or approval-waiting rollout, its candidate sized on a stable fleet of
    ``fleet_replicas`` (the one this cycle scales to; None: the current one). Its code is the rollout step's own (the
    first notification's: ``step``, ``rollback``, ``slo-breach``, ...; ``rollout-step`` when it notifies nothing), and
    ``no-rollout-record`` when the phase says rollout and status holds none."""
    status = ctx.status
    state = status.rollout
    if state is None:
        note = f"phase {status.phase.value} without a rollout record; observing"
        return Intent(Code.NO_ROLLOUT_RECORD, status.model_copy(update={"phase": Phase.OBSERVING}), notes=(note,))
    step = rollouts.advance(
        state=state,
        phase=status.phase,
        observation=ctx.observation,
        slo=ctx.rules.slo,
        rules=ctx.rules.rollout,
        now=ctx.now,
        candidate_ready_replicas=ctx.candidate_ready_replicas,
        fleet_replicas=status.replicas if fleet_replicas is None else fleet_replicas,
    )
    update: dict[str, object] = {"phase": move(status.phase, step.phase), "rollout": step.rollout}
    if ctx.observation is None:
        update["frozen_reason"] = f"rollout held: {ctx.observe_error or 'no observation'}"
    else:
        update["frozen_reason"] = None
    history = status.history
    if step.code == Code.REJECTED:
        verdict = next(a for a in state.approvals if a.decision == "rejected" and state.binds(a))
        rejection = rejections.record(status, state, verdict, window=state.window or ctx.window.name)
        update["rejections"] = rejections.remembered(status, rejection)
        history = (*history, f"{verdict.at:%Y-%m-%d %H:%M} {rejected_line(rejection)}")
    for action in step.actions:
        if isinstance(action, Promote):
            update.update(active_config=action.config, rollout=None, last_switch_at=ctx.now)
            history = (*history, f"{ctx.now:%Y-%m-%d %H:%M} promoted {action.config.label()}: {action.reason}")
            finished = step.rollout or state
            served = served_record(ctx, finished, state.window or ctx.window.name)
            if served is not None:
                same = (served.window, served.config.key())
                kept = tuple(s for s in status.served if (s.window, s.config.key()) != same)
                update["served"] = (*kept, served)[-20:]
            if state.surge_replicas is not None:
                # the surge, sized for the window's forecast, is the promoted fleet
                update["replicas"] = state.surge_replicas
        elif isinstance(action, Rollback):
            if state.weight > 0 or step.code != Code.REJECTED:  # a rejection before any traffic moved: its line
                history = (*history, f"{ctx.now:%Y-%m-%d %H:%M} {action.reason}")
            if not state.abort_requested and not state.rejected():
                failed_on = BlockedConfig(key=state.to_config.key(), window=ctx.window.name)
                update["blocked_in_windows"] = (*status.blocked_in_windows, failed_on)[-50:]
                # what production served before is no evidence once it failed there
                gone, there = state.to_config.key(), (state.window, ctx.window.name)
                update["served"] = tuple(s for s in status.served if not (s.config.key() == gone and s.window in there))
            entry = status.schedule_for(ctx.window.name)
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
                update["schedule"] = with_schedule(status, restored).schedule
    if step.rollout is None and step.phase is Phase.OBSERVING:
        update["rollout"] = None
    update["history"] = history[-50:]
    return Intent(step.code, status.model_copy(update=update), step.actions, step.notes)


def rejected_line(rejection: Rejection) -> str:
    """A rejection as a history line: ``rejected CONFIG for window 'W' by WHO (rollout ID): COMMENT``."""
    line = (
        f"rejected {rejection.config_label or rejection.config_key} for window '{rejection.window}' by {rejection.by}"
    )
    line += f" (rollout {rejection.rollout_id})" if rejection.rollout_id else ""
    return line + (f": {rejection.comment}" if rejection.comment else "")


def served_record(ctx: PlanContext, finished: RolloutState, window: str) -> ServedConfig | None:
    """The evidence a promotion leaves that production served ``finished``'s config in ``window``: its analysed
    steps that passed and its canary trial (the best of the config's trials that met the SLO; its cold start when
    one was reported). None without a canary trial or a step that passed: a config that was never measured before
    production is not pre-validated."""
    config = finished.to_config
    passed = sum(1 for a in finished.analyses if a.outcome == "Successful")
    trials = [t for t in ctx.status.trials if t.config.key() == config.key() and t.ok and t.objective() > 0]
    entry = ctx.status.schedule_for(window)
    if entry is not None:  # on the window's own mix, when the canary measured it there
        mix = (entry.shape.prompt_tokens.mean, entry.shape.output_tokens.mean, entry.shape.repetitiveness)
        trials = [
            t for t in trials if (t.shape.prompt_tokens.mean, t.shape.output_tokens.mean, t.shape.repetitiveness) == mix
        ] or trials
    if not trials or passed == 0:
        return None
    cold = max((t.startup_s for t in trials), default=0.0)
    return ServedConfig(
        window=window,
        config=config,
        promoted_at=ctx.now,
        rollout_id=finished.id,
        analysed_steps=passed,
        canary_goodput_tokens_per_s=max(t.objective() for t in trials),
        cold_start_s=cold if cold > 0 else None,
    )


__all__ = ["advance", "begin", "dry_run", "rejected_line", "served_record"]
