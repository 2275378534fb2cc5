"""The search space of a policy: knob -> allowed values (a list or a range), bounded as vLLM bounds them
(:mod:`controller.policy.knob_ranges`), and the configs the lists combine into."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from typing import Any, Literal

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

from controller.domain.config import (
    STOCK,
    EngineConfig,
    KvCacheDtype,
    MambaBackend,
    MambaDtype,
    SpeculativeMethod,
)
from controller.domain.knobs import normalised
from controller.errors import InvalidInput
from controller.policy.knob_ranges import (
    KNOB_BOUNDS,
    RANGE_KNOBS,
    Capture,
    FloatRange,
    IntRange,
    Lookup,
    MemUtil,
    Philox,
    Seqs,
    SpecTokens,
    Threads,
    Tokens,
    TpSize,
)

#: ``EngineConfig -> None`` when the config fits the GPU, else the reason it does not.
Feasibility = Callable[[EngineConfig], str | None]

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

#: Most configs a sampled pool holds (:meth:`SearchSpace.sampled_configs`). A space of at most this many raw
#: combinations is walked whole, as before; a larger one gives a pool of this many configs at most, drawn evenly from
#: it, so what the optimizer holds per policy does not grow with the space. The largest shipped preset has 2,592.
MAX_POOL_CONFIGS = 4_096

#: Most combinations one sampled pool builds and checks (constraints and memory fit), so a mostly invalid space costs
#: a bounded walk, not 100,000 checks.
MAX_POOL_EVALUATIONS = 4 * MAX_POOL_CONFIGS


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

    @field_validator(*RANGE_KNOBS, mode="after")
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

    def value_at(self, knob: str, index: int) -> Any:
        """The ``index``-th of :meth:`allowed` for ``knob``, without listing a range."""
        raw = getattr(self, knob, None)
        if raw is None:
            return getattr(self.base, knob)
        if isinstance(raw, IntRange):
            return raw.min << index if raw.scale == "log2" else raw.min + index * raw.step
        if isinstance(raw, FloatRange):
            return round(raw.min + index * raw.step, 4)
        return list(dict.fromkeys(raw))[index]

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

    def sampled_configs(
        self,
        feasibility: Feasibility | None = None,
        *,
        limit: int = MAX_POOL_CONFIGS,
        evaluations: int = MAX_POOL_EVALUATIONS,
        seed: int = 0,
    ) -> list[EngineConfig]:
        """At most ``limit`` valid configs of the space (what :meth:`configs` yields), in the order of the
        combinations they came from.

        A space of at most ``limit`` raw combinations gives every valid config, exactly as :meth:`configs` does.
        A larger one gives a pool: raw combinations drawn without replacement (deterministically for ``seed``) and
        decoded one at a time, never listing the space, until the pool holds ``limit`` configs or ``evaluations``
        combinations were built. Memory is ``O(limit)`` and work ``O(evaluations)`` whatever the space's size."""
        self.check_size()
        size = self.product_size()
        if size <= limit:
            return list(self.configs(feasibility))
        knobs = self.knob_names()
        counts = [self.value_count(k) for k in knobs]
        base = self.base.model_dump()
        picked: dict[str, tuple[int, EngineConfig]] = {}
        for index in random.Random(seed).sample(range(size), min(size, evaluations)):
            values = dict(base)
            rest = index
            for knob, count in zip(reversed(knobs), reversed(counts), strict=True):  # the last knob varies fastest
                rest, at = divmod(rest, count)
                values[knob] = self.value_at(knob, at)
            cfg = _normalise(values)
            if cfg is None:
                continue
            key = cfg.key()
            if key in picked:
                if index < picked[key][0]:  # a config's place is its first combination, as in enumeration
                    picked[key] = (index, cfg)
                continue
            if (self._checker is not None and self._checker(cfg)) or (
                feasibility is not None and feasibility(cfg) is not None
            ):
                continue
            picked[key] = (index, cfg)
            if len(picked) >= limit:
                break
        return [cfg for _, cfg in sorted(picked.values(), key=lambda p: p[0])]

    def violations(self, config: EngineConfig) -> list[str]:
        """Reasons ``config`` breaks a constraint between knobs or a target trait of the policy this space belongs
        to (memory fit included when the policy carries a feasibility oracle); empty for a space of no policy."""
        return self._checker(config) if self._checker is not None else []

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
    """The config of one combination of the space (None when it is not a config: a speculative method without
    draft tokens is dropped, not given some)."""
    try:
        return normalised(values)
    except ValidationError:
        return None
