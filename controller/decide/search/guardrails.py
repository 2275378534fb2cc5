"""Guardrails: every proposal (agent or optimizer) is checked against the policy before anything runs.

Pure: no I/O, no clock. :func:`check_proposals` splits proposals into accepted ones and rejections, each
rejection with a kind and the reasons; :class:`ProposalRecord` keeps who proposed what, why, and the verdict.

Rejection kinds, checked in this order (the first that applies wins; all reasons are kept), each with its code:

- ``duplicate``     (``rejected-duplicate``) already trialled (any status), the active config, or proposed twice
  in one batch
- ``out_of_policy`` (``rejected-out-of-policy``) a knob value the policy's search space does not allow
- ``infeasible``    (``rejected-infeasible``) breaks a constraint between knobs, a target trait, or does not fit in
  memory
- ``over_budget``   (``rejected-over-budget``) the re-tune's trial count or canary GPU-minutes would be exceeded

The kind's name is what the advisor and the proposal records show; its code is what machines read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from controller.decide.rules import TuningRules
from controller.domain.codes import Code
from controller.domain.config import EngineConfig
from controller.domain.proposal import Proposal
from controller.domain.trial import TrialResult
from controller.policy.space import SearchSpace


class RejectKind(StrEnum):
    DUPLICATE = "duplicate"
    OUT_OF_POLICY = "out_of_policy"
    INFEASIBLE = "infeasible"
    OVER_BUDGET = "over_budget"

    @property
    def code(self) -> Code:
        """The rejection kind's own code (``rejected-out-of-policy``)."""
        return _CODES[self]


_CODES: dict[RejectKind, Code] = {
    RejectKind.DUPLICATE: Code.REJECTED_DUPLICATE,
    RejectKind.OUT_OF_POLICY: Code.REJECTED_OUT_OF_POLICY,
    RejectKind.INFEASIBLE: Code.REJECTED_INFEASIBLE,
    RejectKind.OVER_BUDGET: Code.REJECTED_OVER_BUDGET,
}


@dataclass(frozen=True)
class Rejection:
    proposal: Proposal
    kind: RejectKind
    reasons: tuple[str, ...]

    @property
    def code(self) -> Code:
        return self.kind.code

    def describe(self) -> str:
        return f"{self.proposal.config.label()} ({self.proposal.proposed_by}): {self.kind.value}: " + "; ".join(
            self.reasons
        )


@dataclass(frozen=True)
class ProposalRecord:
    """One proposal and its verdict, as shown in status, Events and ``shiftctl explain``."""

    config_key: str
    label: str
    proposed_by: str
    rationale: str
    accepted: bool
    kind: str = "accepted"
    reasons: tuple[str, ...] = ()
    code: Code | None = None  # a rejected proposal's: its kind's code


@dataclass(frozen=True)
class Verdict:
    accepted: tuple[Proposal, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    records: tuple[ProposalRecord, ...] = field(default=())

    def feedback(self) -> str:
        """Plain-text list of rejections, suitable to feed back to the proposer once."""
        return "\n".join(f"- {r.describe()}" for r in self.rejected)


def trial_gpu_minutes(result: TrialResult) -> float:
    """Canary GPU-minutes one finished trial used."""
    return (result.duration_s + result.startup_s) / 60.0 * result.config.tensor_parallel_size


def check_proposals(
    proposals: Iterable[Proposal],
    *,
    space: SearchSpace,
    budget: TuningRules,
    active: EngineConfig,
    history: Sequence[TrialResult] = (),
    feasibility: Callable[[EngineConfig], str | None] | None = None,
    max_accept: int | None = None,
) -> Verdict:
    """Validate ``proposals`` in order against the policy's search space (and the constraints and memory fit bound
    to it) and the round's trial budget (``budget.max_trials``, ``canary_gpu_minutes`` and one trial's minutes).
    ``history`` is this re-tune's trials (for duplicates and budget); ``feasibility`` adds a memory-fit oracle on
    top of the one the policy may carry."""
    tried = {r.config.key() for r in history}
    used_trials = len(history)
    used_minutes = sum(trial_gpu_minutes(r) for r in history)
    per_trial = budget.trial_minutes
    accepted: list[Proposal] = []
    rejected: list[Rejection] = []
    records: list[ProposalRecord] = []
    seen: set[str] = set()
    for proposal in proposals:
        cfg = proposal.config
        key = cfg.key()
        kind: RejectKind | None = None
        reasons: list[str] = []
        if key in tried:
            kind, reasons = RejectKind.DUPLICATE, ["already trialled in this re-tune"]
        elif key == active.key():
            kind, reasons = RejectKind.DUPLICATE, ["is the active config"]
        elif key in seen:
            kind, reasons = RejectKind.DUPLICATE, ["proposed twice in one batch"]
        if kind is None:
            out = space.contains(cfg, fixed_ok=active)
            if out:
                kind, reasons = RejectKind.OUT_OF_POLICY, out
        if kind is None:
            bad = space.violations(cfg)
            if feasibility is not None and (why := feasibility(cfg)):
                bad.append(f"infeasible: {why}")
            if bad:
                kind, reasons = RejectKind.INFEASIBLE, bad
        if kind is None:
            n = used_trials + len(accepted) + 1
            minutes = used_minutes + (len(accepted) + 1) * per_trial * cfg.tensor_parallel_size
            if n > budget.max_trials:
                kind, reasons = RejectKind.OVER_BUDGET, [f"trial {n} exceeds max_trials {budget.max_trials}"]
            elif minutes > budget.canary_gpu_minutes:
                kind = RejectKind.OVER_BUDGET
                reasons = [f"{minutes:.1f} canary GPU-minutes exceed the budget of {budget.canary_gpu_minutes:g}"]
            elif max_accept is not None and len(accepted) >= max_accept:
                kind, reasons = RejectKind.OVER_BUDGET, [f"more than {max_accept} proposals this round"]
        seen.add(key)
        if kind is None:
            accepted.append(proposal)
            records.append(ProposalRecord(key, cfg.label(), proposal.proposed_by, proposal.rationale, accepted=True))
        else:
            rejected.append(Rejection(proposal, kind, tuple(reasons)))
            records.append(
                ProposalRecord(
                    key,
                    cfg.label(),
                    proposal.proposed_by,
                    proposal.rationale,
                    accepted=False,
                    kind=kind.value,
                    reasons=tuple(reasons),
                    code=kind.code,
                )
            )
    return Verdict(tuple(accepted), tuple(rejected), tuple(records))


def budget_left(budget: TuningRules, history: Sequence[TrialResult]) -> int:
    """How many more trials the budget allows (trial count and GPU-minutes, at tensor-parallel 1)."""
    per_trial = budget.trial_minutes
    minutes_left = budget.canary_gpu_minutes - sum(trial_gpu_minutes(r) for r in history)
    return max(0, min(budget.max_trials - len(history), int(minutes_left // per_trial)))


__all__ = ["ProposalRecord", "RejectKind", "Rejection", "Verdict", "budget_left", "check_proposals"]
