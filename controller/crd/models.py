"""Pydantic models of Shiftlight's custom resources (group ``shiftlight.dev``, version ``v1alpha1``).

These models are the single source of the CRD schemas (``controller.crd.schema`` generates the
OpenAPI v3 from them) and the boundary where CR bodies are validated.

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

from __future__ import annotations

import itertools
import json
import typing
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from controller.domain.config import CPU_DRAFTERS, EngineConfig
from controller.domain.slo import SLO
from controller.domain.status import AnalysisRecord, Approval, RolloutState, TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult
from controller.errors import InvalidInput

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
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_NAME = Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN)
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN)]
#: A policy preset's name: a file name under the operator's policy directory, never a path.
PRESET_NAME = r"^[a-z0-9][a-z0-9-]*$"

_M = TypeVar("_M", bound=BaseModel)


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
    service: str = Field(min_length=1, max_length=63, pattern=_DNS_SUBDOMAIN, description="Service in front of them")
    http_route: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="Gateway API HTTPRoute whose backendRef weights split stable/candidate traffic; "
        "without one, traffic is split by replica ratio",
    )
    container: str = Field(default="vllm", min_length=1, max_length=63, description="the vLLM container's name")
    port: int = Field(default=8000, ge=1, le=65535, description="the engine's HTTP port")

    @field_validator("deployments")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("deployment names must be unique")
        return value


class ModelSpec(WireModel):
    """What the engine serves."""

    name: str = Field(min_length=1, max_length=512, description="model path or Hugging Face id given to vLLM")
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
    gpu_type: str = Field(min_length=1, max_length=128, description="accelerator type, e.g. H100-80GB")
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
_K8S_STATUS_KEYS = ("conditions", "observedGeneration", "summary")


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

    target: str = Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN, description="TunedService name")
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

    target: str = Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN, description="TunedService name")
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


# ----- CEL rules ----------------------------------------------------------------------------------------
#
# The cross-field checks of the validators above (and of the domain models a spec embeds) as Kubernetes CEL
# rules, so the apiserver refuses what the parser refuses. ``controller.crd.schema`` puts each model's rules
# under ``x-kubernetes-validations`` where the model's schema sits. In Kubernetes CEL a field set to null is
# absent for ``has()``, and a defaulted field is always present; the rules read the model's default when a
# field is absent, so they hold with or without the apiserver's defaulting.


def _or(path: str, default: str) -> str:
    """``path``'s value, or ``default`` when the field is absent (``path`` is ``self.a.b``)."""
    return f"(has({path}) ? {path} : {default})"


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _engine_config_rules(at: str) -> list[dict[str, str]]:
    """EngineConfig's ``_consistent`` checks for the config at ``at`` (e.g. ``self.config``)."""
    method = _or(f"{at}.speculative_method", "'none'")
    k = _or(f"{at}.num_speculative_tokens", "0")
    rounding = _or(f"{at}.mamba_cache_stochastic_rounding", "false")
    dtype = _or(f"{at}.mamba_ssm_cache_dtype", "'auto'")
    async_on = _or(f"{at}.async_scheduling", "false")
    cpu = ", ".join(f"'{m}'" for m in sorted(CPU_DRAFTERS))
    name = at.removeprefix("self.")
    return [
        _rule(
            f"{method} != 'none' || {k} == 0",
            f"{name}: num_speculative_tokens must be 0 when speculative_method is 'none'",
        ),
        _rule(
            f"{method} == 'none' || {k} >= 1", f"{name}: num_speculative_tokens must be >= 1 with a speculative method"
        ),
        _rule(
            f"!has({at}.prompt_lookup_max) || {method} == 'ngram'",
            f"{name}: prompt_lookup_max only applies to speculative_method 'ngram'",
        ),
        _rule(
            f"!{rounding} || {dtype} == 'float16'",
            f"{name}: mamba_cache_stochastic_rounding requires mamba_ssm_cache_dtype 'float16'",
        ),
        _rule(
            f"!has({at}.mamba_cache_philox_rounds) || {rounding}",
            f"{name}: mamba_cache_philox_rounds requires mamba_cache_stochastic_rounding",
        ),
        _rule(
            f"!{async_on} || !({method} in [{cpu}])",
            f"{name}: async_scheduling cannot be enabled with a CPU drafter ({cpu})",
        ),
    ]


def _length_rules(at: str) -> list[dict[str, str]]:
    """LengthDistribution's ``_cap_above_mean`` for the distribution at ``at``."""
    return [
        _rule(
            f"!has({at}.maximum) || double({at}.maximum) >= double({at}.mean)",
            f"{at.removeprefix('self.')}: maximum must be >= mean",
        )
    ]


def _unique(path: str, item: str = "") -> str:
    """Every member of the list at ``path`` (or its ``item`` field) occurs once."""
    a, b = (f"x.{item}", f"y.{item}") if item else ("x", "y")
    return f"{path}.all(x, {path}.exists_one(y, {b} == {a}))"


#: model -> the CEL rules its schema carries (``self`` is that model's object).
CEL_RULES: dict[type[BaseModel], list[dict[str, str]]] = {
    Toleration: [
        _rule(
            _or("self.operator", "'Equal'") + " != 'Exists' || !has(self.value) || self.value == ''",
            "a toleration with operator 'Exists' must not set a value",
        )
    ],
    WorkloadRef: [_rule(_unique("self.deployments"), "deployment names must be unique")],
    PolicyRef: [_rule("!(has(self.preset) && has(self.configMapRef))", "set either preset or configMapRef, not both")],
    ReplicaBounds: [
        _rule(f"{_or('self.minReplicas', '1')} <= {_or('self.maxReplicas', '8')}", "minReplicas must be <= maxReplicas")
    ],
    TunedServiceSpec: [
        _rule(f"!has(self.schedule) || {_unique('self.schedule', 'name')}", "schedule window names must be unique")
    ],
    TrialSpec: [
        *_engine_config_rules("self.config"),
        *_length_rules("self.shape.prompt_tokens"),
        *_length_rules("self.shape.output_tokens"),
    ],
    ConfigRolloutSpec: [
        _rule("self.steps.all(w, w >= 1 && w <= 100)", "every step weight must be in 1..100"),
        _rule(f"self.steps.isSorted() && {_unique('self.steps')}", "step weights must rise strictly"),
        _rule("self.steps[self.steps.size() - 1] == 100", "the last step weight must be 100"),
        *_engine_config_rules("self.fromConfig"),
        *_engine_config_rules("self.toConfig"),
    ],
}


def config_rollout_from_state(state: RolloutState, *, target: str) -> tuple[ConfigRolloutSpec, ConfigRolloutStatus]:
    """The ConfigRollout spec and status that mirror a domain :class:`RolloutState`."""
    spec = ConfigRolloutSpec(
        target=target,
        rollout_id=state.id,
        from_config=state.from_config,
        to_config=state.to_config,
        steps=state.steps,
        reason=state.reason,
        proposed_by=state.proposed_by,
        expected_gain=state.expected_gain,
    )
    status = ConfigRolloutStatus(
        phase="Paused" if state.paused else "Progressing",
        from_label=state.from_config.label(),
        to_label=state.to_config.label(),
        step_index=state.step_index,
        weight=state.weight,
        started_at=state.started_at,
        step_started_at=state.step_started_at,
        analyses=state.analyses,
        approvals=state.approvals,
    )
    return spec, status


# ----- parsing and rendering ------------------------------------------------------------------------


def _loc(prefix: str, loc: Sequence[int | str]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _wire_loc(model: type[BaseModel], loc: Sequence[int | str]) -> list[int | str]:
    """``loc`` with each field named as on the wire (the camelCase alias of CR fields; domain models keep their
    own names), whichever spelling the input used."""
    models: list[type[BaseModel]] = [model]
    out: list[int | str] = []
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            continue
        match = next(
            ((name, info) for m in models for name, info in m.model_fields.items() if part in (name, info.alias)),
            None,
        )
        if match is None:
            out.append(part)
            continue
        name, info = match
        out.append(info.alias or name)
        models = _models_in(info.annotation) or models
    return out


def _message(error: Any) -> str:
    if error.get("type") == "string_pattern_mismatch":
        pattern = (error.get("ctx") or {}).get("pattern")
        if pattern == _DNS_SUBDOMAIN:
            return f"{error.get('input')!r} is not a valid Kubernetes name (lowercase a-z, 0-9, '-' and '.')"
        if pattern == PRESET_NAME:
            return f"{error.get('input')!r} is not a preset name (lowercase a-z, 0-9 and '-', first not '-')"
    return str(error["msg"])


def _invalid(exc: ValidationError, *, model: type[BaseModel], source: str, prefix: str) -> InvalidInput:
    errors = exc.errors(include_url=False)
    lines = [f"{_loc(prefix, _wire_loc(model, e['loc']))}: {_message(e)}" for e in errors]
    first = _loc(prefix, _wire_loc(model, errors[0]["loc"])) if errors else prefix
    return InvalidInput("; ".join(lines), source=source, field=first)


def _plain(value: Any) -> Any:
    """JSON form of what ``json`` cannot write itself: mapping views, and dates a YAML loader made."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _validate_strict(model: type[_M], data: Any, *, source: str, prefix: str) -> _M:
    """Validate ``data`` as the apiserver would: strict JSON types (no ``"2"`` for 2.0, no ``"yes"`` for true, no
    number for a string), RFC 3339 strings for times. Errors name the wire path (``spec.replicas.minReplicas``)."""
    try:
        payload = json.dumps(data, default=_plain, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not a JSON object: {exc}", source=source, field=prefix) from None
    try:
        return model.model_validate_json(payload, strict=True)
    except ValidationError as exc:
        raise _invalid(exc, model=model, source=source, prefix=prefix) from None


def _source(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return ""
    return "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)


def parse_spec(model: type[_M], body: Mapping[str, Any], *, kind: str) -> _M:
    """Validate ``body["spec"]`` as ``model``; errors become :class:`InvalidInput` naming ``spec.<field>``."""
    source = _source(body)
    if body.get("kind") not in (None, kind):
        raise InvalidInput(f"expected kind {kind}, got {body.get('kind')!r}", source=source, field="kind")
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidInput("spec is missing or not an object", source=source, field="spec")
    return _validate_strict(model, spec, source=source, prefix="spec")


def parse_tuned_service(body: Mapping[str, Any]) -> tuple[TunedServiceSpec, TargetStatus]:
    """Validate a TunedService body into its spec and its domain status.

    A missing or empty status is a fresh :class:`TargetStatus`. The Kubernetes bookkeeping keys of the status
    (``conditions``, ``observedGeneration``, ``summary``) are not part of the domain status and are ignored here.
    Raises :class:`InvalidInput` with ``source="<ns>/<name>"`` and ``field="spec.x.y"`` / ``"status.x.y"``.
    """
    spec = parse_spec(TunedServiceSpec, body, kind=KIND_TUNED_SERVICE)
    raw_status = body.get("status") or {}
    source = _source(body)
    if not isinstance(raw_status, Mapping):
        raise InvalidInput("status is not an object", source=source, field="status")
    domain = {k: v for k, v in raw_status.items() if k not in _K8S_STATUS_KEYS}
    return spec, _validate_strict(TargetStatus, domain, source=source, prefix="status")


def _status(model: type[_M], body: Mapping[str, Any]) -> _M:
    raw = body.get("status") or {}
    if not isinstance(raw, Mapping):
        raise InvalidInput("status is not an object", source=_source(body), field="status")
    return _validate_strict(model, raw, source=_source(body), prefix="status")


def parse_trial(body: Mapping[str, Any]) -> tuple[TrialSpec, TrialStatus]:
    return parse_spec(TrialSpec, body, kind=KIND_TRIAL), _status(TrialStatus, body)


def parse_config_rollout(body: Mapping[str, Any]) -> tuple[ConfigRolloutSpec, ConfigRolloutStatus]:
    return parse_spec(ConfigRolloutSpec, body, kind=KIND_CONFIG_ROLLOUT), _status(ConfigRolloutStatus, body)


def summarize(status: TargetStatus) -> StatusSummary:
    """Printer-column values: active config label, candidate label and weight, and the goodput gain vs stock.

    The gain is the candidate's expected gain while a rollout runs, else the schedule entry of the active
    config (its goodput over stock goodput), else unknown.
    """
    active = status.active_config
    rollout = status.rollout
    ratio: float | None = None
    if rollout is not None and rollout.expected_gain is not None:
        ratio = rollout.expected_gain
    else:
        for entry in status.schedule:
            if entry.config == active and entry.stock_goodput_tokens_per_s > 0:
                ratio = entry.gain
                break
    return StatusSummary(
        active_config=active.label(),
        active_config_key=active.key(),
        candidate_config=rollout.to_config.label() if rollout is not None else None,
        canary_weight=rollout.weight if rollout is not None else 0,
        gain=f"{ratio:.2f}x" if ratio is not None else "",
        gain_ratio=round(ratio, 4) if ratio is not None else None,
    )


def status_to_wire(
    status: TargetStatus,
    *,
    conditions: Sequence[Condition] = (),
    observed_generation: int | None = None,
) -> dict[str, Any]:
    """The TunedService ``status`` as written to the API: the domain fields (snake_case, explicit nulls) plus
    ``conditions``, ``observedGeneration`` and the derived ``summary`` (camelCase)."""
    wire: dict[str, Any] = status.model_dump(mode="json")
    wire["conditions"] = [c.to_wire() for c in conditions]
    wire["observedGeneration"] = observed_generation
    wire["summary"] = summarize(status).to_wire()
    return wire
