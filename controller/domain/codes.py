"""Every reason code the control loop gives: one machine-readable name per decision, next to the sentence people
read. Status (``last_reasons``), Kubernetes Events (as the CamelCase ``reason``), the operator's decision metric,
Slack, Grafana annotation tags and ``shiftctl explain`` all carry these. Pure."""

from __future__ import annotations

from enum import StrEnum


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

    @property
    def event_reason(self) -> str:
        """The Kubernetes Event ``reason``: the code in CamelCase, as Kubernetes Event reasons are written
        (``slo-breach`` -> ``SloBreach``)."""
        return "".join(part[:1].upper() + part[1:] for part in self.value.split("-") if part)


__all__ = ["Code"]
