"""Which proposals reach a trial this cycle: what to ask the advisor for (:func:`advisor_context`), and the
screening of what it proposed through the guardrails (:func:`screen`). Pure: the cycle (:mod:`controller.reconcile`)
asks the advisor, and the fallback when it fails or every proposal is refused, and hands the proposals here."""

from __future__ import annotations

from collections.abc import Sequence

from controller.decide.context import round_trials
from controller.decide.rules import Rules
from controller.decide.search import guardrails
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult


def advisor_context(target: TargetRef, status: TargetStatus, *, rules: Rules) -> AdvisorContext | None:
    """What the advisor is asked for this cycle: the round's shape, the SLO, the active config, the round's trials
    and how many proposals it may make (the round's budget left, at most ``trials_per_cycle``). None when no
    proposal is wanted: the target is not trialling, or the round's trial budget is spent."""
    if status.phase is not Phase.TRIALLING or status.tuning is None:
        return None
    round_ = status.tuning
    remaining = rules.tuning.max_trials - len(round_.trial_keys)
    if remaining <= 0:
        return None
    return AdvisorContext(
        target=target,
        shape=round_.shape,
        slo=rules.slo,
        active=status.active_config,
        history=tuple(round_trials(status)),
        max_proposals=min(remaining, rules.tuning.trials_per_cycle),
    )


def screen(
    proposals: Sequence[Proposal], status: TargetStatus, *, rules: Rules, max_accept: int
) -> tuple[list[Proposal], list[str]]:
    """Guardrails: only in-policy (``rules.space``), feasible, new, in-budget (``rules.tuning``) configs reach a
    trial.

    Returns the accepted proposals and one line per rejection (who proposed it and why it was refused).
    """
    blocked = status.blocked_for_tuning(status.window)
    refused = [
        f"rejected {p.config.label()} ({p.proposed_by}): rolled back in production earlier"
        for p in proposals
        if p.config.key() in blocked
    ]
    verdict = guardrails.check_proposals(
        [p for p in proposals if p.config.key() not in blocked],
        space=rules.space,
        budget=rules.tuning,
        active=status.active_config,
        history=this_rounds_trials(status),
        max_accept=max_accept,
    )
    return list(verdict.accepted), refused + [f"rejected {r.describe()}" for r in verdict.rejected]


def this_rounds_trials(status: TargetStatus) -> list[TrialResult]:
    """The trials the current round ran itself, which its budget counts: the latest one per entry of its trial
    keys. A round interrupted earlier on the same shape left trials of the same configs in status; they still teach
    the optimizer, but they are not this round's spending."""
    trials = round_trials(status)
    ran = len(status.tuning.trial_keys) if status.tuning is not None else 0
    return trials[-ran:] if ran else []
