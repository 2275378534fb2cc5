"""Every reason code the control loop gives: one machine-readable name per decision, next to the sentence people
read. Status (``last_reasons``), Kubernetes Events (as the CamelCase ``reason``), the operator's decision metric,
Slack, Grafana annotation tags and ``shiftctl explain`` all carry these. :data:`INFO` says, for each code, its
kind, its severity, the layout of a Slack message that carries it and the phase of its Grafana annotation. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated

from pydantic import WithJsonSchema


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Code(StrEnum):
    # acting
    ACT_RETRY = "act-retry"
    # a production change the act layer withheld, whatever decided it (the Event says what it would have done)
    DRY_RUN_WITHHELD = "dry-run-withheld"
    PAUSED_WITHHELD = "paused-withheld"
    REJECTED_WITHHELD = "rejected-withheld"
    APPROVAL_WITHHELD = "approval-withheld"
    # observing production
    OBSERVING = "observing"
    FROZEN = "frozen"
    METRICS_BACK = "metrics-back"
    METRICS_UNAVAILABLE = "metrics-unavailable"
    OBSERVING_AFTER_ROLLBACK = "observing-after-rollback"
    DIGEST = "digest"
    # replicas
    SCALE = "scale"
    REPLICAS_KEPT = "replicas-kept"
    REPLICAS_KEPT_OBSERVING = "replicas-kept-observing"  # why, while observing: its sentence follows the traffic
    REPLICAS_UNMANAGED = "replicas-unmanaged"
    CAPACITY_CORRECTED = "capacity-corrected"
    CAPACITY_LOWERED = "capacity-lowered"
    CAPACITY_RAISED = "capacity-raised"
    # starting a tuning round
    TUNE_NO_CONFIG = "tune-no-config"
    TUNE_SLO_BREACH = "tune-slo-breach"
    TUNE_DRIFT = "tune-drift"
    TUNE_AHEAD = "tune-ahead"
    SEARCH_REUSED = "search-reused"
    TUNING_PAUSED = "tuning-paused"
    # a tuning round's cycles
    TRIALS = "trials"
    PROPOSALS_SCREENED = "proposals-screened"
    TRIALS_RUNNING = "trials-running"
    NO_ROUND = "no-round"
    RETRY_LIGHTER = "retry-lighter"
    CAPACITY_PROBE = "capacity-probe"
    TRIAL_PAYS = "trial-pays"
    TRIAL_GAIN_UNKNOWN = "trial-gain-unknown"
    TRIAL_NOT_WORTH_IT = "trial-not-worth-it"
    SEARCH_NO_GAIN = "search-no-gain"
    SEARCH_BELOW_THRESHOLD = "search-below-threshold"
    SEARCH_BUDGET_SPENT = "search-budget-spent"
    SEARCH_NO_PROPOSALS = "search-no-proposals"
    SEARCH_STOPPED = "search-stopped"
    SEARCH_ENDED = "search-ended"
    # what a round leads to
    KEEP_ACTIVE = "keep-active"
    NO_REPLICAS_SAVED = "no-replicas-saved"
    TRIALS_PAUSED = "trials-paused"
    DRY_RUN = "dry-run"
    SCHEDULED_FOR_WINDOW = "scheduled-for-window"
    TOO_FEW_REPLICAS = "too-few-replicas"
    NOT_WORTH_SWITCHING = "not-worth-switching"
    # the time-of-day schedule
    SCHEDULED_SWITCH = "scheduled-switch"
    PREWARM = "prewarm"
    PRE_VALIDATED_SWAP = "pre-validated-swap"
    SWITCH_CHECK = "switch-check"
    SWITCH_PAYS = "switch-pays"
    SWITCH_NOT_PAYING = "switch-not-paying"
    SWITCH_OTHER_TRAFFIC = "switch-other-traffic"
    SCHEDULE_ACCOUNT = "schedule-account"
    SCHEDULE_NOT_PAYING = "schedule-not-paying"
    # a rollout
    ROLLOUT_STARTED = "rollout-started"
    APPROVAL_REQUIRED = "approval-required"
    STARTED = "started"
    CANDIDATE_READY = "candidate-ready"
    STEP = "step"
    ROLLOUT_STEP = "rollout-step"
    MANUAL_GATE = "manual-gate"
    APPROVED = "approved"
    REJECTED = "rejected"
    REJECTION_KEPT = "rejection-kept"  # a config a human rejected for a window is not proposed for it again
    ABORTED = "aborted"
    ROLLBACK = "rollback"
    PROMOTED = "promoted"  # the rollout's last step passed: the candidate is the new stable config
    CANDIDATE_SHORT = "candidate-short"
    NO_ROLLOUT_RECORD = "no-rollout-record"
    PROMOTED_CONFIG_DIFFERS = "promoted-config-differs"  # status records what the promoted Deployment runs
    # a rollout step's analysis
    WITHIN_SLO = "within-slo"
    LOW_TRAFFIC = "low-traffic"
    TOO_FEW_SAMPLES = "too-few-samples"
    SLO_BREACH = "slo-breach"
    BEYOND_TOP_BUCKET = "beyond-top-bucket"
    REGRESSION = "regression"
    ERROR_RATE = "error-rate"
    GOODPUT_RATIO = "goodput-ratio"
    STABLE_BREACH = "stable-breach"
    MISSING_DATA = "missing-data"
    NON_FINITE = "non-finite"
    NO_CANDIDATE_SAMPLES = "no-candidate-samples"
    NO_CANDIDATE_SERIES = "no-candidate-series"
    # the operator, around a cycle (the condition and Event reason is the code in CamelCase)
    INVALID_SPEC = "invalid-spec"  # the TunedService's spec was refused
    INVALID_POLICY = "invalid-policy"  # its policy (a preset, a ConfigMap, an advisor) was refused
    SIMULATOR_UNSUPPORTED = "simulator-unsupported"  # the simulator cannot play what it runs
    SIMULATOR_UNKNOWN_MODEL = "simulator-unknown-model"
    SIMULATOR_UNKNOWN_GPU = "simulator-unknown-gpu"
    SIMULATOR_MODEL_MISMATCH = "simulator-model-mismatch"
    SIMULATOR_GPU_MISMATCH = "simulator-gpu-mismatch"
    APPROVAL_REFUSED = "approval-refused"  # an approval or rejection the gate ignored
    MIRROR_FAILED = "mirror-failed"  # the Rollout CR mirror could not be written
    NO_APPROVAL_PENDING = "no-approval-pending"  # the AwaitingApproval condition when nothing waits
    VALID = "valid"  # the Accepted condition: the spec and its policy passed validation
    # a proposal the guardrails refused, one code per kind of refusal
    REJECTED_DUPLICATE = "rejected-duplicate"  # already trialled, the active config, or proposed twice
    REJECTED_OUT_OF_POLICY = "rejected-out-of-policy"  # a knob value the policy's search space does not allow
    REJECTED_INFEASIBLE = "rejected-infeasible"  # breaks a constraint, a target trait, or does not fit
    REJECTED_OVER_BUDGET = "rejected-over-budget"  # the round's trials or canary GPU-minutes would be exceeded
    # a trial whose load generator did not keep its plan (an ``invalid`` trial), one code per miss
    IN_FLIGHT_LOW = "in-flight-low"  # closed loop: too few requests in flight
    RATE_MISSED = "rate-missed"  # open loop: the send rate missed the planned one
    SEND_LAG = "send-lag"  # open loop: requests went out late
    LOOP_STALLED = "loop-stalled"  # the client's event loop stopped

    @property
    def event_reason(self) -> str:
        """The Kubernetes Event and condition ``reason``: :func:`camel_case` of the code."""
        return camel_case(self)


def camel_case(code: Code) -> str:
    """The code in CamelCase, as Kubernetes Event and condition reasons are written (``slo-breach`` ->
    ``SloBreach``). Every code's CamelCase is its own: :func:`from_camel_case` reads it back."""
    return "".join(part[:1].upper() + part[1:] for part in code.value.split("-") if part)


def from_camel_case(reason: str) -> Code | None:
    """The code whose :func:`camel_case` is ``reason``; None for a reason no code is written as."""
    return _BY_CAMEL_CASE.get(reason)


def code_or_none(value: str) -> Code | None:
    """The code spelled ``value``; None for the empty string or a spelling no code has (a code stored by another
    version of the operator)."""
    try:
        return Code(value)
    except ValueError:
        return None


#: A code as stored (status, a trial's result): kebab-case, or empty (statuses written before codes were optional
#: stored ``""``).
CODE_PATTERN = r"^([a-z0-9]+(-[a-z0-9]+)*)?$"

#: A :class:`Code` field of a stored model. Its schema (and the CRD's) is a string of :data:`CODE_PATTERN`, not the
#: list of codes, so a status written by an operator that knows codes this one does not is still stored; the
#: model reads a spelling no code has as none (:func:`code_or_none`).
StoredCode = Annotated[Code, WithJsonSchema({"type": "string", "pattern": CODE_PATTERN})]


class Layout(StrEnum):
    """The layout of a Slack message."""

    DECISION = "decision"  # a config was chosen (or would be, in dry run), with its evidence table
    STEP = "step"  # a rollout started, reached a weight step, completed or was rejected
    ROLLBACK = "rollback"  # traffic went back to stable, with its cause
    APPROVAL = "approval"  # a rollout waits for a human, with the exact ``shiftctl approve`` line
    DIGEST = "digest"  # a target's daily summary
    GENERIC = "generic"  # anything else


class Mark(StrEnum):
    """The ``phase:`` tag of a Grafana annotation: what kind of decision it marks."""

    FREEZE = "freeze"
    ROLLBACK = "rollback"
    APPROVAL = "approval"
    PROMOTION = "promotion"
    ROLLOUT_STEP = "rollout-step"
    CONFIG_SWITCH = "config-switch"
    NOTE = "note"


#: The mark of a notification whose code leaves it to the layout.
MARK_OF_LAYOUT: MappingProxyType[Layout, Mark | None] = MappingProxyType(
    {
        Layout.DECISION: Mark.CONFIG_SWITCH,
        Layout.STEP: Mark.ROLLOUT_STEP,
        Layout.ROLLBACK: Mark.ROLLBACK,
        Layout.APPROVAL: Mark.APPROVAL,
        Layout.DIGEST: None,  # a digest is not a decision: not annotated
        Layout.GENERIC: Mark.NOTE,
    }
)


@dataclass(frozen=True)
class CodeInfo:
    """What a code is: its ``kind`` (the part of the loop that gives it), its ``severity`` and, for a notification
    that carries it, the Slack ``layout`` and the Grafana ``mark``. ``layout`` None: several notifications carry the
    code (a rollout step's analysis, a rollout's start), and the notification's severity and evidence choose (see
    :func:`layout_of`); ``mark`` None: the layout's (:data:`MARK_OF_LAYOUT`)."""

    kind: str
    severity: Severity = Severity.INFO
    layout: Layout | None = Layout.GENERIC
    mark: Mark | None = None


def layout_of(info: CodeInfo, severity: Severity, evidence: bool) -> Layout:
    """The Slack layout of a notification under a code whose ``info`` is ``info``, of ``severity``, with (or without)
    an evidence table: the code's layout; where several notifications carry the code, a critical one is a rollback,
    a warning one asks for approval, one with evidence reports a decision and any other a rollout step."""
    if info.layout is not None:
        return info.layout
    if severity is Severity.CRITICAL:
        return Layout.ROLLBACK
    if severity is Severity.WARNING:
        return Layout.APPROVAL
    return Layout.DECISION if evidence else Layout.STEP


def mark_of(info: CodeInfo, layout: Layout) -> Mark | None:
    """The Grafana mark of a notification under a code whose ``info`` is ``info`` and with Slack layout ``layout``."""
    return info.mark if info.mark is not None else MARK_OF_LAYOUT[layout]


def _info(kind: str, codes: tuple[Code, ...]) -> dict[Code, CodeInfo]:
    """Codes of ``kind`` that no notification carries (info, generic, their layout's mark)."""
    return {code: CodeInfo(kind) for code in codes}


_W, _C = Severity.WARNING, Severity.CRITICAL
_WITHHELD = CodeInfo("acting", layout=Layout.GENERIC, mark=Mark.NOTE)
_VERDICT = CodeInfo("analysis", layout=None)  # a step's analysis: its step, its promotion, its approval or rollback
_VERDICT_BAD = CodeInfo("analysis", _W, layout=None)

_BY_CAMEL_CASE: MappingProxyType[str, Code] = MappingProxyType({camel_case(code): code for code in Code})

#: Every code's :class:`CodeInfo`.
INFO: MappingProxyType[Code, CodeInfo] = MappingProxyType(
    {
        Code.ACT_RETRY: CodeInfo("acting", _W),
        Code.DRY_RUN_WITHHELD: _WITHHELD,
        Code.PAUSED_WITHHELD: _WITHHELD,
        Code.REJECTED_WITHHELD: _WITHHELD,
        Code.APPROVAL_WITHHELD: _WITHHELD,
        Code.OBSERVING: CodeInfo("observing"),
        Code.FROZEN: CodeInfo("observing", _W, mark=Mark.FREEZE),
        Code.METRICS_BACK: CodeInfo("observing"),
        Code.METRICS_UNAVAILABLE: CodeInfo("observing", _W, mark=Mark.FREEZE),
        Code.OBSERVING_AFTER_ROLLBACK: CodeInfo("observing"),
        Code.DIGEST: CodeInfo("observing", layout=Layout.DIGEST),
        **_info("replicas", (Code.SCALE, Code.REPLICAS_KEPT, Code.REPLICAS_KEPT_OBSERVING, Code.REPLICAS_UNMANAGED)),
        **_info("replicas", (Code.CAPACITY_CORRECTED, Code.CAPACITY_LOWERED, Code.CAPACITY_RAISED)),
        **_info("tuning", (Code.TUNE_NO_CONFIG, Code.TUNE_SLO_BREACH, Code.TUNE_DRIFT, Code.TUNE_AHEAD)),
        **_info("tuning", (Code.SEARCH_REUSED, Code.TUNING_PAUSED)),
        **_info("round", (Code.TRIALS, Code.PROPOSALS_SCREENED, Code.TRIALS_RUNNING, Code.NO_ROUND)),
        **_info("round", (Code.RETRY_LIGHTER, Code.CAPACITY_PROBE, Code.TRIAL_PAYS, Code.TRIAL_GAIN_UNKNOWN)),
        **_info("round", (Code.TRIAL_NOT_WORTH_IT, Code.SEARCH_NO_GAIN, Code.SEARCH_BELOW_THRESHOLD)),
        **_info("round", (Code.SEARCH_BUDGET_SPENT, Code.SEARCH_NO_PROPOSALS, Code.SEARCH_STOPPED, Code.SEARCH_ENDED)),
        **_info("outcome", (Code.KEEP_ACTIVE, Code.NO_REPLICAS_SAVED, Code.NOT_WORTH_SWITCHING)),
        Code.TRIALS_PAUSED: CodeInfo("outcome", _W),
        Code.DRY_RUN: CodeInfo("outcome", layout=Layout.DECISION),
        Code.SCHEDULED_FOR_WINDOW: CodeInfo("outcome", layout=Layout.DECISION),
        Code.TOO_FEW_REPLICAS: CodeInfo("outcome", _W, layout=Layout.DECISION),
        **_info("schedule", (Code.SCHEDULED_SWITCH, Code.PREWARM, Code.PRE_VALIDATED_SWAP, Code.SWITCH_CHECK)),
        **_info("schedule", (Code.SWITCH_PAYS, Code.SWITCH_NOT_PAYING, Code.SWITCH_OTHER_TRAFFIC)),
        Code.SCHEDULE_ACCOUNT: CodeInfo("schedule"),
        Code.SCHEDULE_NOT_PAYING: CodeInfo("schedule", _W),
        Code.ROLLOUT_STARTED: CodeInfo("rollout", layout=Layout.STEP),
        # a rollout that waits for approval, or starts: the chosen config's decision, then its first step
        Code.APPROVAL_REQUIRED: CodeInfo("rollout", _W, layout=None),
        Code.STARTED: CodeInfo("rollout", layout=None),
        Code.CANDIDATE_READY: CodeInfo("rollout", layout=Layout.STEP),
        Code.STEP: CodeInfo("rollout", layout=Layout.STEP),
        Code.ROLLOUT_STEP: CodeInfo("rollout", layout=Layout.STEP),
        Code.MANUAL_GATE: CodeInfo("rollout", _W, layout=Layout.APPROVAL),
        Code.APPROVED: CodeInfo("rollout", layout=Layout.STEP),
        Code.REJECTED: CodeInfo("rollout", layout=None),  # retired at once, or rolled back
        Code.REJECTION_KEPT: CodeInfo("rollout"),
        Code.ABORTED: CodeInfo("rollout", _C, layout=Layout.ROLLBACK),
        Code.ROLLBACK: CodeInfo("rollout", _C, layout=Layout.ROLLBACK),
        Code.PROMOTED: CodeInfo("rollout", layout=Layout.STEP, mark=Mark.PROMOTION),
        Code.CANDIDATE_SHORT: CodeInfo("rollout", _W),
        Code.NO_ROLLOUT_RECORD: CodeInfo("rollout", _W),
        Code.PROMOTED_CONFIG_DIFFERS: CodeInfo("rollout", _W),
        Code.WITHIN_SLO: _VERDICT,
        Code.LOW_TRAFFIC: _VERDICT,
        Code.TOO_FEW_SAMPLES: _VERDICT,
        **{code: _VERDICT_BAD for code in (Code.SLO_BREACH, Code.BEYOND_TOP_BUCKET, Code.REGRESSION)},
        **{code: _VERDICT_BAD for code in (Code.ERROR_RATE, Code.GOODPUT_RATIO, Code.STABLE_BREACH)},
        **{code: _VERDICT_BAD for code in (Code.MISSING_DATA, Code.NON_FINITE)},
        **{code: _VERDICT_BAD for code in (Code.NO_CANDIDATE_SAMPLES, Code.NO_CANDIDATE_SERIES)},
        **{code: CodeInfo("operator", _W) for code in (Code.INVALID_SPEC, Code.INVALID_POLICY)},
        Code.SIMULATOR_UNSUPPORTED: CodeInfo("operator", _W),
        **{code: CodeInfo("operator", _W) for code in (Code.SIMULATOR_UNKNOWN_MODEL, Code.SIMULATOR_UNKNOWN_GPU)},
        **{code: CodeInfo("operator", _W) for code in (Code.SIMULATOR_MODEL_MISMATCH, Code.SIMULATOR_GPU_MISMATCH)},
        **{code: CodeInfo("operator", _W) for code in (Code.APPROVAL_REFUSED, Code.MIRROR_FAILED)},
        **_info("operator", (Code.NO_APPROVAL_PENDING, Code.VALID)),
        **_info("guardrails", (Code.REJECTED_DUPLICATE, Code.REJECTED_OUT_OF_POLICY)),
        **_info("guardrails", (Code.REJECTED_INFEASIBLE, Code.REJECTED_OVER_BUDGET)),
        **_info("trial-validity", (Code.IN_FLIGHT_LOW, Code.RATE_MISSED, Code.SEND_LAG, Code.LOOP_STALLED)),
    }
)


__all__ = [
    "CODE_PATTERN",
    "INFO",
    "MARK_OF_LAYOUT",
    "Code",
    "CodeInfo",
    "Layout",
    "Mark",
    "Severity",
    "StoredCode",
    "camel_case",
    "code_or_none",
    "from_camel_case",
    "layout_of",
    "mark_of",
]
