"""The policy document: target, space overrides, constraints between knobs, quality gate, SLO, trial budget,
rollout, approval and LLM settings, and the checks a :class:`Policy` answers (in policy, lossy, needs approval)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from controller.domain import rollout_defaults, trial_defaults, tuning_defaults
from controller.domain.approval import ApprovalMode, needs_approval
from controller.domain.config import (
    STOCK,
    EngineConfig,
)
from controller.domain.slo import SLO
from controller.errors import InvalidInput
from controller.policy.llm import LlmSettings
from controller.policy.scaling import ScalingPolicy
from controller.policy.space import _STRICT, MAMBA_KNOBS, Feasibility, SearchSpace
from controller.policy.targeting import Override, Target


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


def lossy_reasons(rules: Sequence[LossyRule], config: EngineConfig) -> list[str]:
    """Why ``config`` is lossy under ``rules`` (empty: it is not)."""
    return [r.reason or f"{r.knob}={getattr(config, r.knob)!r}" for r in rules if r.matches(config)]


class QualityGate(BaseModel):
    model_config = _STRICT

    lossy: list[LossyRule] = Field(default_factory=lambda: list(DEFAULT_LOSSY))
    min_exact_match: float = Field(default=0.9, ge=0, le=1)
    max_logprob_divergence: float = Field(default=0.05, ge=0)
    prompts: int = Field(default=64, ge=1)


class TrialBudgetPolicy(BaseModel):
    model_config = _STRICT

    max_trials: int = Field(default=trial_defaults.MAX_TRIALS, ge=1, le=1000, description="trials per re-tune")
    canary_gpu_minutes: float = Field(
        default=trial_defaults.CANARY_GPU_MINUTES, gt=0, description="canary GPU-minutes per re-tune"
    )
    trial_duration_s: float = Field(default=trial_defaults.DURATION_S, gt=0)
    warmup_s: float = Field(default=trial_defaults.WARMUP_S, ge=0)
    startup_timeout_s: float = Field(default=trial_defaults.STARTUP_TIMEOUT_S, gt=0)


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
    slo_headroom: float = Field(
        default=rollout_defaults.SLO_HEADROOM,
        ge=0,
        lt=1,
        description="a candidate whose latency at the SLO's percentile is at most this fraction of the SLO bound is "
        "not rolled back for its TTFT/TPOT ratio to stable alone (0: never); SLO breaches, errors, goodput and "
        "missing data still count",
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
    rejection_memory_seconds: float = Field(
        default=rollout_defaults.REJECTION_MEMORY_SECONDS,
        ge=0,
        le=366 * 86400,
        description="how long a config a human rejected (shiftctl reject) is not proposed again for the same window, "
        "unless the window's traffic drifts from the shape it had when rejected (0: proposed again at once)",
    )

    @model_validator(mode="after")
    def _increasing(self) -> RolloutPolicy:
        if not self.steps:
            raise ValueError("steps must not be empty")
        if any(b <= a for a, b in itertools.pairwise(self.steps)):
            raise ValueError(f"steps must strictly increase, got {self.steps}")
        if self.steps[-1] != 100:
            raise ValueError(f"steps must end at 100, got {self.steps}")
        return self


#: What a policy may be called: letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit. The name
#: is shown in Events, conditions, logs and the CLI, so it holds nothing a terminal or a reader could take for
#: anything but a name (no controls, no invisible or bidi characters, no spaces).
POLICY_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Policy(BaseModel):
    """One tuning policy."""

    model_config = _STRICT

    version: Literal[1] = 1
    name: str = Field(default="default", min_length=1, max_length=63, pattern=POLICY_NAME)
    description: str = ""
    target: Target = Field(default_factory=Target)
    space: SearchSpace = Field(default_factory=SearchSpace)
    overrides: list[Override] = Field(default_factory=list)
    constraints: Constraints = Field(default_factory=Constraints)
    quality_gate: QualityGate = Field(default_factory=QualityGate)
    slo: SLO = Field(default_factory=SLO)
    trial_budget: TrialBudgetPolicy = Field(default_factory=TrialBudgetPolicy)
    min_gain: float = Field(
        default=tuning_defaults.MIN_GAIN, ge=0, description="relative goodput gain a candidate needs to roll out"
    )
    rollout: RolloutPolicy = Field(default_factory=RolloutPolicy)
    scaling: ScalingPolicy = Field(default_factory=ScalingPolicy)
    approval: ApprovalMode = tuning_defaults.APPROVAL
    llm: LlmSettings = Field(default_factory=LlmSettings)
    dry_run: bool = Field(default=tuning_defaults.DRY_RUN, description="compute and report decisions, roll out nothing")

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
        return lossy_reasons(self.quality_gate.lossy, config)

    def is_lossy(self, config: EngineConfig) -> bool:
        """True when ``config`` can change model output and must pass the quality gate."""
        return bool(self.lossy_reasons(config))

    def needs_approval(self, config: EngineConfig) -> bool:
        return needs_approval(self.approval, lossy=self.approval == "manual-for-lossy" and self.is_lossy(config))


# ----- loading -------------------------------------------------------------------------------------
