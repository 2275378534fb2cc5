"""Folding a cycle's effects into the decided status: pure, applied once per cycle."""

from __future__ import annotations

from collections.abc import Sequence

from controller.act.effects import Effect, Promoted, Scaled, TrialRecorded, Withheld
from controller.domain.codes import Code
from controller.domain.status import Reason, TargetStatus


def fold(status: TargetStatus, effects: Sequence[Effect], *, keep_trials: int) -> TargetStatus:
    """The status after ``effects``: each recorded trial joins ``trials`` (the last ``keep_trials`` are kept) and the
    tuning round's bookkeeping (key, proposer, reason, in order); scaling the stable variant sets ``replicas``; a
    withheld production change adds its reason (what it would have done) to ``last_reasons``. Every other effect
    leaves status as decided."""
    for effect in effects:
        if isinstance(effect, TrialRecorded):
            status = _record_trial(status, effect, keep=keep_trials)
        elif isinstance(effect, Promoted) and effect.running is not None and effect.running != effect.config:
            # status says what runs: the config the promoted Deployment runs, not the one the status asked for
            said = Reason(
                code=Code.PROMOTED_CONFIG_DIFFERS,
                message=f"promoted {effect.running.label()}: the candidate ran it, not {effect.config.label()}",
            )
            status = status.model_copy(
                update={"active_config": effect.running, "last_reasons": (*status.last_reasons, said)}
            )
        elif isinstance(effect, Scaled) and effect.variant == "stable":
            status = status.model_copy(update={"replicas": effect.replicas})
        elif isinstance(effect, Withheld):
            said = Reason(code=effect.code, message=effect.would)
            status = status.model_copy(update={"last_reasons": (*status.last_reasons, said)})
    return status


def _record_trial(status: TargetStatus, effect: TrialRecorded, *, keep: int) -> TargetStatus:
    action = effect.action
    update: dict[str, object] = {"trials": (*status.trials, effect.result)[-keep:]}
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
