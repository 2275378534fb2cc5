"""Pydantic models of Shiftlight's custom resources (group ``shiftlight.dev``, version ``v1alpha1``).

These models are the single source of the CRD schemas (``controller.crd.schema`` generates the
OpenAPI v3 from them) and the boundary where CR bodies are validated. The models live in one module per resource,
:mod:`controller.crd.tuned_service`, :mod:`controller.crd.trial` and :mod:`controller.crd.config_rollout` (what they
share in :mod:`controller.crd.shared`), their CEL rules in :mod:`controller.crd.cel`, parsing and rendering in
:mod:`controller.crd.wire`; this module gathers them all.

Wire form (what ``kubectl`` shows):

* Fields defined here are camelCase on the wire (``dryRun``, ``canaryPool.nodeSelector``). In Python they are
  snake_case; both spellings are accepted on input (``populate_by_name``).
* Domain models embedded in a CR keep their own (snake_case) field names: ``spec.slo`` is a
  :class:`controller.domain.slo.SLO` (``ttft_seconds``), ``spec.schedule[]`` are
  :class:`controller.domain.traffic.TimeWindow` (``start_hour``), a Trial's ``spec.config`` is an
  :class:`controller.domain.config.EngineConfig`, its ``status.result`` a
  :class:`controller.domain.trial.TrialResult`. The TunedService status *is* a
  :class:`controller.domain.status.TargetStatus` (snake_case) plus the Kubernetes fields ``conditions``,
  ``observedGeneration`` and a derived, display-only ``summary`` (see :func:`status_to_wire`).
* ``None`` is written as an explicit ``null`` (the schema marks such fields ``nullable``) so that a status merge
  patch clears a field that went away (e.g. a finished ``rollout``).
"""

from controller.crd.cel import CEL_RULES
from controller.crd.config_rollout import (
    ConfigRolloutSpec,
    ConfigRolloutStatus,
    RolloutHistoryEntry,
    RolloutPhase,
)
from controller.crd.shared import (
    API_VERSION,
    DNS_SUBDOMAIN,
    GROUP,
    KIND_CONFIG_ROLLOUT,
    KIND_TRIAL,
    KIND_TUNED_SERVICE,
    PLURAL_CONFIG_ROLLOUT,
    PLURAL_TRIAL,
    PLURAL_TUNED_SERVICE,
    PRESET_NAME,
    VERSION,
    Condition,
    ConfigMapKeyRef,
    ObjectName,
    SecretKeyRef,
    Toleration,
    WireModel,
)
from controller.crd.trial import (
    TrialBudgetSpec,
    TrialCRStatus,
    TrialPhase,
    TrialProgress,
    TrialSpec,
)
from controller.crd.tuned_service import (
    K8S_STATUS_KEYS,
    CanaryPool,
    ModelSpec,
    NotificationSettings,
    PolicyRef,
    ReplicaBounds,
    SlackSettings,
    StatusSummary,
    TunedServiceSpec,
    TunedServiceStatus,
    WorkloadRef,
)
from controller.crd.wire import (
    config_rollout_from_state,
    parse_config_rollout,
    parse_spec,
    parse_trial,
    parse_tuned_service,
    status_to_wire,
    summarize,
)
from controller.domain.approval import ApprovalMode

__all__ = [
    "API_VERSION",
    "CEL_RULES",
    "DNS_SUBDOMAIN",
    "GROUP",
    "K8S_STATUS_KEYS",
    "KIND_CONFIG_ROLLOUT",
    "KIND_TRIAL",
    "KIND_TUNED_SERVICE",
    "PLURAL_CONFIG_ROLLOUT",
    "PLURAL_TRIAL",
    "PLURAL_TUNED_SERVICE",
    "PRESET_NAME",
    "VERSION",
    "ApprovalMode",
    "CanaryPool",
    "Condition",
    "ConfigMapKeyRef",
    "ConfigRolloutSpec",
    "ConfigRolloutStatus",
    "ModelSpec",
    "NotificationSettings",
    "ObjectName",
    "PolicyRef",
    "ReplicaBounds",
    "RolloutHistoryEntry",
    "RolloutPhase",
    "SecretKeyRef",
    "SlackSettings",
    "StatusSummary",
    "Toleration",
    "TrialBudgetSpec",
    "TrialCRStatus",
    "TrialPhase",
    "TrialProgress",
    "TrialSpec",
    "TunedServiceSpec",
    "TunedServiceStatus",
    "WireModel",
    "WorkloadRef",
    "config_rollout_from_state",
    "parse_config_rollout",
    "parse_spec",
    "parse_trial",
    "parse_tuned_service",
    "status_to_wire",
    "summarize",
]
