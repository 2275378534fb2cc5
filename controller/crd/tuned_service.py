"""The TunedService custom resource: its spec (the workload, the model, the SLO, the policy, the canary pool, the
schedule, approvals, notifications and replica bounds) and its status (the domain :class:`TargetStatus` plus the
Kubernetes bookkeeping)."""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator, model_validator

from controller.crd.shared import (
    DNS_SUBDOMAIN,
    GPU_TYPE,
    LABEL_VALUE,
    MODEL_NAME,
    PRESET_MAX_LENGTH,
    PRESET_NAME,
    Condition,
    ConfigMapKeyRef,
    ObjectName,
    Toleration,
    WireModel,
    label_key_valid,
)
from controller.domain import tuning_defaults
from controller.domain.approval import ApprovalMode
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow


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
    served_model_name: str | None = Field(
        default=None, min_length=1, max_length=512, pattern=MODEL_NAME, description="--served-model-name"
    )
    profile: str = Field(
        default="generic", min_length=1, max_length=128, description="model profile (architecture family)"
    )


class PolicyRef(WireModel):
    """Which tuning policy applies: a preset shipped with the operator, or a key of a ConfigMap."""

    preset: str | None = Field(
        default=None,
        min_length=1,
        max_length=PRESET_MAX_LENGTH,
        pattern=PRESET_NAME,
        description="preset name (not a path)",
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
    approval_mode: ApprovalMode = tuning_defaults.APPROVAL
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


class TrialCacheStatus(WireModel):
    """What the operator keeps about the TunedService's trial cache ConfigMap, out of the tenant's reach."""

    sequence: int = Field(default=0, ge=0, description="the sequence number of the cache's last save")


class TunedServiceStatus(TargetStatus):
    """The TunedService status as stored: the domain :class:`TargetStatus` plus Kubernetes bookkeeping.

    Only used for schema generation and full-status reads; the operator works with ``TargetStatus``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, ge=0, alias="observedGeneration")
    summary: StatusSummary = Field(default_factory=StatusSummary)
    trial_cache: TrialCacheStatus | None = Field(default=None, alias="trialCache")


#: Status keys that are Kubernetes bookkeeping, not part of :class:`TargetStatus`.
K8S_STATUS_KEYS = ("conditions", "observedGeneration", "summary", "trialCache")
