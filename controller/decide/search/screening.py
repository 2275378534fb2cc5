"""Which proposals reach a trial this cycle: ask the advisor (the fallback when it fails or every proposal is
refused), then screen them through the guardrails. No I/O of its own beyond the advisors it is given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from controller.decide.context import round_trials
from controller.decide.rules import Rules
from controller.decide.search import guardrails
from controller.domain.observation import TargetRef
from controller.domain.phases import Phase
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult
from controller.errors import ShiftlightError
from controller.policy.models import Policy


class Advisor(Protocol):
    """What proposes configs for a trial (the agent, the optimizer): ``controller.ports.Advisor``."""

    def propose(self, context: AdvisorContext) -> Sequence[Proposal]: ...


def screen(
    proposals: Sequence[Proposal], status: TargetStatus, *, policy: Policy, max_accept: int
) -> tuple[list[Proposal], list[str]]:
    """Guardrails: only in-policy, feasible, new, in-budget configs reach a trial.

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
        policy=policy,
        active=status.active_config,
        history=this_rounds_trials(status),
        max_accept=max_accept,
    )
    return list(verdict.accepted), refused + [f"rejected {r.describe()}" for r in verdict.rejected]


def screened_proposals(
    target: TargetRef,
    status: TargetStatus,
    *,
    rules: Rules,
    policy: Policy,
    advisor: Advisor,
    fallback: Advisor | None,
) -> tuple[list[Proposal], list[str]]:
    """The accepted proposals for a trialling round, and the notes (advisor failures, fallbacks, rejections)."""
    if status.phase is not Phase.TRIALLING or status.tuning is None:
        return [], []
    round_ = status.tuning
    remaining = rules.tuning.max_trials - len(round_.trial_keys)
    if remaining <= 0:
        return [], []
    per_cycle = rules.tuning.trials_per_cycle
    ctx = AdvisorContext(
        target=target,
        shape=round_.shape,
        slo=rules.slo,
        active=status.active_config,
        history=tuple(round_trials(status)),
        max_proposals=min(remaining, per_cycle),
    )
    notes: list[str] = []
    try:
        raw = list(advisor.propose(ctx))
    except ShiftlightError as exc:
        if fallback is None:
            return [], [f"advisor failed ({exc}); no fallback configured"]
        notes.append(f"advisor failed ({exc}); the optimizer proposes instead")
        raw = list(fallback.propose(ctx))
    accepted, rejected = screen(raw, status, policy=policy, max_accept=per_cycle)
    if not accepted and rejected and fallback is not None:
        notes.append("every proposal was rejected; the optimizer proposes instead")
        more, more_rejected = screen(list(fallback.propose(ctx)), status, policy=policy, max_accept=per_cycle)
        accepted, rejected = more, rejected + more_rejected
    return accepted, notes + rejected


def this_rounds_trials(status: TargetStatus) -> list[TrialResult]:
    """The trials the current round ran itself, which its budget counts: the latest one per entry of its trial
    keys. A round interrupted earlier on the same shape left trials of the same configs in status; they still teach
    the optimizer, but they are not this round's spending."""
    trials = round_trials(status)
    ran = len(status.tuning.trial_keys) if status.tuning is not None else 0
    return trials[-ran:] if ran else []
