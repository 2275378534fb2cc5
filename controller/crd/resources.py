"""The custom resources' pydantic models: TunedService, Trial and ConfigRollout specs and statuses, and the
Kubernetes pieces they share (group ``shiftlight.dev``, version ``v1alpha1``). The wire form is described in
:mod:`controller.crd.models`, which re-exports every name here."""

from __future__ import annotations

import itertools
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import AnalysisRecord, Approval, TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult

GROUP = "shiftlight.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

KIND_TUNED_SERVICE = "TunedService"
KIND_TRIAL = "Trial"
KIND_CONFIG_ROLLOUT = "ConfigRollout"
PLURAL_TUNED_SERVICE = "tunedservices"
PLURAL_TRIAL = "trials"
PLURAL_CONFIG_ROLLOUT = "configrollouts"

ApprovalMode = Literal["auto", "manual", "manual-for-lossy"]
"""``auto``: roll out without a human; ``manual``: every rollout waits for ``shiftctl approve``;
``manual-for-lossy``: only configs that may change outputs (e.g. lower-precision caches) wait."""

#: Kubernetes object names (RFC 1123 subdomain, as for Deployments, Services, ConfigMaps, Secrets).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_NAME = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
#: A policy preset's name: a file name under the operator's policy directory, never a path.
PRESET_NAME = r"^[a-z0-9][a-z0-9-]*$"
#: A model as vLLM is given it: a Hugging Face id (``org/name``, ``name@revision``) or a path or URI (``/models/x``,
#: ``s3://bucket/x``). No spaces, quotes, brackets or control characters: it is shown in terminals and in Slack.
MODEL_NAME = r"^[A-Za-z0-9._/:@+-]+$"
#: An accelerator type (``H100-80GB``, ``gb300-dgx-station``): letters, digits, ``.``, ``_`` and ``-``.
GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: A label value, or the name part of a label key (at most 63 characters; a value may be empty).
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")


def label_key_valid(key: str) -> bool:
    """A Kubernetes label key: ``[prefix/]name``, the prefix a DNS subdomain of at most 253 characters."""
    prefix, _, name = key.rpartition("/")
    if not name or not LABEL_VALUE.fullmatch(name):
        return False
    return not prefix or (len(prefix) <= 253 and re.fullmatch(DNS_SUBDOMAIN, prefix) is not None)


class WireModel(BaseModel):
    """Base of the CR-specific models: camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
    )

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict in the Kubernetes wire form (camelCase, explicit nulls)."""
        return self.model_dump(mode="json", by_alias=True)


# ----- shared Kubernetes pieces -----------------------------------------------------------------------


class Condition(WireModel):
    """A standard Kubernetes condition (``metav1.Condition``)."""

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class SecretKeyRef(WireModel):
    """One key of a Secret in the CR's namespace."""

    name: str = _NAME
    key: str = Field(min_length=1, max_length=253)


class ConfigMapKeyRef(WireModel):
    """One key of a ConfigMap in the CR's namespace."""

    name: str = _NAME
    key: str = Field(min_length=1, max_length=253)


class Toleration(WireModel):
    """A pod toleration (``core/v1 Toleration``)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator 'Exists' must not set a value")
        return self


# ----- TunedService -----------------------------------------------------------------------------------


class WorkloadRef(WireModel):
    """The production objects a TunedService governs (all in its own namespace)."""

    deployments: tuple[ObjectName, ...] = Field(
        min_length=1, max_length=32, description="production vLLM Deployment names"
    )
    service: str = Field(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN, description="Service in front of them")
    http_route: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Gateway API HTTPRoute whose backendRef weights split stable/candidate traffic; "
        "without one, traffic is split by replica ratio",
    )
    container: str = Field(default="vllm", min_length=1, max_length=63, description="the vLLM container's name")
    port: int = Field(default=8000, ge=1, le=65535, description="the engine's HTTP port")
    router_selectors: tuple[dict[str, str], ...] = Field(
        default=(),
        max_length=8,
        description="label sets that a router discovers engine pods by on its own (production-stack's "
        "--k8s-label-selector, say): candidate and trial pods get these labels' values suffixed, so the router "
        "does not send them traffic",
    )

    @field_validator("deployments")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("deployment names must be unique")
        return value

    @field_validator("router_selectors")
    @classmethod
    def _label_sets(cls, value: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
        for i, labels in enumerate(value):
            if not 1 <= len(labels) <= 16:
                raise ValueError(f"routerSelectors[{i}] must have 1 to 16 labels")
            for key, val in labels.items():
                if not label_key_valid(key):
                    raise ValueError(f"routerSelectors[{i}]: {key!r} is not a label key")
                if not LABEL_VALUE.fullmatch(val):
                    raise ValueError(f"routerSelectors[{i}].{key}: {val!r} is not a label value")
        return value


class ModelSpec(WireModel):
    """What the engine serves."""

    name: str = Field(
        min_length=1, max_length=512, pattern=MODEL_NAME, description="model path or Hugging Face id given to vLLM"
    )
    served_model_name: str | None = Field(default=None, max_length=512, description="--served-model-name")
    profile: str = Field(
        default="generic", min_length=1, max_length=128, description="model profile (architecture family)"
    )


class PolicyRef(WireModel):
    """Which tuning policy applies: a preset shipped with the operator, or a key of a ConfigMap."""

    preset: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=PRESET_NAME, description="preset name (not a path)"
    )
    config_map_ref: ConfigMapKeyRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PolicyRef:
        if self.preset is not None and self.config_map_ref is not None:
            raise ValueError("set either preset or configMapRef, not both")
        return self


class CanaryPool(WireModel):
    """Where canary trial Pods run."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    gpu_resource: str = Field(default="nvidia.com/gpu", min_length=1, max_length=253)
    gpu_count: int = Field(default=1, ge=0, le=64)
    image: str | None = Field(default=None, max_length=1024, description="engine image; default: production's")


class SlackSettings(WireModel):
    """Slack messages about this TunedService. The webhook itself is the operator's setting: a tenant names none."""

    channel: str = Field(default="", max_length=128, description="label shown in messages (the webhook fixes it)")
    digest_hour: int | None = Field(default=9, ge=0, le=23, description="UTC hour of the daily digest; null: none")


class NotificationSettings(WireModel):
    slack: SlackSettings | None = None


class ReplicaBounds(WireModel):
    min_replicas: int = Field(default=1, ge=0, le=1000)
    max_replicas: int = Field(default=8, ge=1, le=1000)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaBounds:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})")
        return self


class TunedServiceSpec(WireModel):
    """Desired behaviour for one production vLLM model."""

    workload: WorkloadRef
    model: ModelSpec
    gpu_type: str = Field(
        min_length=1, max_length=128, pattern=GPU_TYPE, description="accelerator type, e.g. H100-80GB"
    )
    slo: SLO = Field(default_factory=SLO, description="latency/error objectives (domain field names)")
    policy: PolicyRef = Field(default_factory=PolicyRef)
    canary_pool: CanaryPool = Field(default_factory=CanaryPool)
    schedule: tuple[TimeWindow, ...] = Field(
        default=(), max_length=24, description="time-of-day windows (domain field names)"
    )
    approval_mode: ApprovalMode = "manual-for-lossy"
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    dry_run: bool = Field(default=False, description="decide and report, never change production")
    paused: bool = Field(default=False, description="stop starting trials and rollouts")
    replicas: ReplicaBounds = Field(default_factory=ReplicaBounds)

    @field_validator("schedule")
    @classmethod
    def _unique_windows(cls, value: tuple[TimeWindow, ...]) -> tuple[TimeWindow, ...]:
        names = [w.name for w in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"schedule window names must be unique, repeated: {', '.join(dupes)}")
        return value


class StatusSummary(WireModel):
    """Display-only values derived from the status (printer columns). Never read back by the operator."""

    active_config: str = "stock"
    active_config_key: str = ""
    candidate_config: str | None = None
    canary_weight: int = Field(default=0, ge=0, le=100)
    gain: str = Field(default="", description="active (or candidate) goodput vs stock, e.g. '1.32x'")
    gain_ratio: float | None = None


class TunedServiceStatus(TargetStatus):
    """The TunedService status as stored: the domain :class:`TargetStatus` plus Kubernetes bookkeeping.

    Only used for schema generation and full-status reads; the operator works with ``TargetStatus``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, ge=0, alias="observedGeneration")
    summary: StatusSummary = Field(default_factory=StatusSummary)


#: Status keys that are Kubernetes bookkeeping, not part of :class:`TargetStatus`.
K8S_STATUS_KEYS = ("conditions", "observedGeneration", "summary")


# ----- Trial -------------------------------------------------------------------------------------------


class TrialBudgetSpec(WireModel):
    """How much canary time one trial may use (mirrors ``controller.ports.TrialBudget``)."""

    duration_seconds: float = Field(default=120.0, gt=0, le=86400)
    warmup_seconds: float = Field(default=10.0, ge=0, le=3600)
    max_requests: int = Field(default=2000, ge=1, le=10_000_000)
    startup_timeout_seconds: float = Field(default=900.0, gt=0, le=86400)


TrialPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class TrialSpec(WireModel):
    """One canary measurement of ``config`` under ``shape`` for a TunedService."""

    target: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="TunedService name")
    config: EngineConfig
    shape: TrafficShape
    slo: SLO = Field(default_factory=SLO)
    budget: TrialBudgetSpec = Field(default_factory=TrialBudgetSpec)
    seed: int = Field(default=0, ge=0)
    reason: str = Field(default="", max_length=4096)
    proposed_by: str = Field(default="optimizer", max_length=253)


class TrialProgress(WireModel):
    """How far a running trial is: its stage, requests done of planned, time since it started, live throughput."""

    stage: str = Field(default="", max_length=32, description="launch, warmup, replay, quality, teardown or done")
    requests_done: int = Field(default=0, ge=0)
    requests_planned: int = Field(default=0, ge=0)
    elapsed_seconds: float = Field(default=0.0, ge=0)
    output_tokens_per_s: float | None = Field(
        default=None, ge=0, description="output tokens per second of the replay so far (absent before it starts)"
    )
    updated_at: datetime | None = None


class TrialStatus(WireModel):
    phase: TrialPhase = "Pending"
    config_label: str = ""
    progress: TrialProgress | None = None
    pod_name: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""
    result: TrialResult | None = Field(default=None, description="the measurement (domain field names)")
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, ge=0)


# ----- ConfigRollout -----------------------------------------------------------------------------------

RolloutPhase = Literal["Pending", "Progressing", "AwaitingApproval", "Paused", "Succeeded", "RolledBack", "Rejected"]


class ConfigRolloutSpec(WireModel):
    """A move of one TunedService from config A to config B in weighted steps."""

    target: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="TunedService name")
    rollout_id: str = Field(min_length=1, max_length=253)
    from_config: EngineConfig
    to_config: EngineConfig
    steps: tuple[int, ...] = Field(
        min_length=1, max_length=100, description="candidate weights in percent, rising, ending at 100"
    )
    reason: str = Field(default="", max_length=4096)
    proposed_by: str = Field(default="optimizer", max_length=253)
    expected_gain: float | None = Field(default=None, ge=0)

    @field_validator("steps")
    @classmethod
    def _rising_to_100(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 0 < w <= 100 for w in value):
            raise ValueError("every step weight must be in 1..100")
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError(f"step weights must rise strictly, got {list(value)}")
        if value[-1] != 100:
            raise ValueError(f"the last step weight must be 100, got {value[-1]}")
        return value


class RolloutHistoryEntry(WireModel):
    at: datetime
    step: int = Field(ge=0)
    weight: int = Field(ge=0, le=100)
    event: str = Field(min_length=1, max_length=64, description="e.g. StepReached, Approved, RolledBack")
    reason: str = ""


class ConfigRolloutStatus(WireModel):
    phase: RolloutPhase = "Pending"
    from_label: str = ""
    to_label: str = ""
    step_index: int = Field(default=0, ge=0)
    weight: int = Field(default=0, ge=0, le=100)
    started_at: datetime | None = None
    step_started_at: datetime | None = None
    finished_at: datetime | None = None
    analyses: tuple[AnalysisRecord, ...] = Field(default=(), description="analysis per step (domain field names)")
    approvals: tuple[Approval, ...] = Field(default=(), description="who approved/rejected when (domain field names)")
    history: tuple[RolloutHistoryEntry, ...] = ()
    message: str = ""
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, ge=0)


__all__ = [
    "API_VERSION",
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
    "TrialPhase",
    "TrialProgress",
    "TrialSpec",
    "TrialStatus",
    "TunedServiceSpec",
    "TunedServiceStatus",
    "WireModel",
    "WorkloadRef",
]
