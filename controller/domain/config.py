"""Engine configuration: the vLLM knobs Shiftlight tunes, and their exact `vllm serve` rendering."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SpeculativeMethod = Literal["none", "mtp", "ngram", "ngram_gpu", "eagle", "eagle3", "draft_model", "suffix", "dflash"]
MambaDtype = Literal["auto", "float32", "float16", "bfloat16"]
MambaBackend = Literal["triton", "flashinfer", "cpu"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"]

#: Tuned flags whose vLLM default has a command-line spelling (``--kv-cache-dtype auto``, ``--no-...``).
EXPLICIT_DEFAULT_FLAGS: frozenset[str] = frozenset(
    {
        "--mamba-ssm-cache-dtype",
        "--enable-mamba-cache-stochastic-rounding",
        "--kv-cache-dtype",
        "--tensor-parallel-size",
    }
)

#: Methods whose drafter runs on the CPU; vLLM refuses them together with explicit async scheduling.
CPU_DRAFTERS: frozenset[str] = frozenset({"ngram", "suffix"})


class EngineConfig(BaseModel):
    """One vLLM engine configuration. ``None`` means "leave vLLM's default"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    speculative_method: SpeculativeMethod = "none"
    num_speculative_tokens: int = Field(default=0, ge=0, le=32)
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=64)
    async_scheduling: bool | None = None
    mamba_ssm_cache_dtype: MambaDtype = "auto"
    mamba_cache_stochastic_rounding: bool = False
    mamba_cache_philox_rounds: int | None = Field(default=None, ge=0, le=64)
    mamba_backend: MambaBackend | None = None
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536)
    max_num_batched_tokens: int | None = Field(default=None, ge=16, le=1_048_576)
    kv_cache_dtype: KvCacheDtype = "auto"
    enable_prefix_caching: bool | None = None
    max_cudagraph_capture_size: int | None = Field(default=None, ge=1, le=65536)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    omp_num_threads: int | None = Field(default=None, ge=1, le=1024)

    @model_validator(mode="after")
    def _consistent(self) -> EngineConfig:
        if self.speculative_method == "none" and self.num_speculative_tokens:
            raise ValueError("num_speculative_tokens must be 0 when speculative_method is 'none'")
        if self.speculative_method != "none" and self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1 for speculative_method '{self.speculative_method}'")
        if self.prompt_lookup_max is not None and self.speculative_method != "ngram":
            raise ValueError("prompt_lookup_max only applies to speculative_method 'ngram'")
        if self.mamba_cache_stochastic_rounding and self.mamba_ssm_cache_dtype != "float16":
            raise ValueError("mamba_cache_stochastic_rounding requires mamba_ssm_cache_dtype 'float16'")
        if self.mamba_cache_philox_rounds is not None and not self.mamba_cache_stochastic_rounding:
            raise ValueError("mamba_cache_philox_rounds requires mamba_cache_stochastic_rounding")
        if self.async_scheduling is True and self.speculative_method in CPU_DRAFTERS:
            raise ValueError(
                f"async_scheduling cannot be enabled with the CPU drafter '{self.speculative_method}' "
                "(vLLM raises ValueError)"
            )
        return self

    # ----- identity -------------------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    def key(self) -> str:
        """Stable short identity of this config (same knobs, same key)."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def label(self) -> str:
        """Short human-readable name, e.g. ``mtp1+async+ssm-fp16-sr+fi+seqs256``."""
        parts: list[str] = []
        if self.speculative_method != "none":
            parts.append(f"{self.speculative_method}{self.num_speculative_tokens}")
        if self.async_scheduling is True:
            parts.append("async")
        elif self.async_scheduling is False:
            parts.append("sync")
        if self.mamba_ssm_cache_dtype != "auto":
            short = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[self.mamba_ssm_cache_dtype]
            parts.append(f"ssm-{short}" + ("-sr" if self.mamba_cache_stochastic_rounding else ""))
        if self.mamba_backend is not None:
            parts.append({"flashinfer": "fi", "triton": "triton", "cpu": "cpu"}[self.mamba_backend])
        if self.max_num_seqs is not None:
            parts.append(f"seqs{self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"mbt{self.max_num_batched_tokens}")
        if self.kv_cache_dtype != "auto":
            parts.append(f"kv-{self.kv_cache_dtype}")
        if self.enable_prefix_caching is not None:
            parts.append("pc" if self.enable_prefix_caching else "no-pc")
        if self.max_cudagraph_capture_size is not None:
            parts.append(f"cg{self.max_cudagraph_capture_size}")
        if self.gpu_memory_utilization is not None:
            parts.append(f"mem{self.gpu_memory_utilization:g}")
        if self.tensor_parallel_size != 1:
            parts.append(f"tp{self.tensor_parallel_size}")
        if self.omp_num_threads is not None:
            parts.append(f"omp{self.omp_num_threads}")
        return "+".join(parts) or "stock"

    def changed_knobs(self, other: EngineConfig) -> dict[str, tuple[object, object]]:
        """Knobs whose values differ, as ``{name: (self_value, other_value)}``."""
        mine, theirs = self.model_dump(), other.model_dump()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}

    # ----- rendering --------------------------------------------------------------------------
    def speculative_config(self) -> dict[str, object] | None:
        if self.speculative_method == "none":
            return None
        spec: dict[str, object] = {
            "method": self.speculative_method,
            "num_speculative_tokens": self.num_speculative_tokens,
        }
        if self.prompt_lookup_max is not None:
            spec["prompt_lookup_max"] = self.prompt_lookup_max
            spec["prompt_lookup_min"] = min(self.prompt_lookup_max, 2)
        return spec

    def vllm_args(self, *, explicit_defaults: Collection[str] = ()) -> list[str]:
        """Exact `vllm serve` engine arguments for this config (model and networking flags excluded): the one place
        Shiftlight renders the flags it tunes.

        A knob at vLLM's default is left out, except the flags named in ``explicit_defaults`` (those of
        :data:`EXPLICIT_DEFAULT_FLAGS`), which are spelled out at their default: that is how a command line
        overrides a value a ``--config`` file sets."""
        explicit = frozenset(explicit_defaults)
        unknown = explicit - EXPLICIT_DEFAULT_FLAGS
        if unknown:
            raise ValueError(f"no command-line spelling of vLLM's default for {', '.join(sorted(unknown))}")
        args: list[str] = []
        spec = self.speculative_config()
        if spec is not None:
            args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if self.async_scheduling is not None:
            args.append("--async-scheduling" if self.async_scheduling else "--no-async-scheduling")
        args += self._mamba_args(explicit)
        if self.max_num_seqs is not None:
            args += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.kv_cache_dtype != "auto" or "--kv-cache-dtype" in explicit:
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.enable_prefix_caching is not None:
            args.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        if self.max_cudagraph_capture_size is not None:
            args += ["--max-cudagraph-capture-size", str(self.max_cudagraph_capture_size)]
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.tensor_parallel_size != 1 or "--tensor-parallel-size" in explicit:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        return args

    def _mamba_args(self, explicit: frozenset[str]) -> list[str]:
        """The Mamba state cache's flags (``vllm_args``)."""
        args: list[str] = []
        if self.mamba_ssm_cache_dtype != "auto" or "--mamba-ssm-cache-dtype" in explicit:
            args += ["--mamba-ssm-cache-dtype", self.mamba_ssm_cache_dtype]
        if self.mamba_cache_stochastic_rounding:
            args.append("--enable-mamba-cache-stochastic-rounding")
        elif "--enable-mamba-cache-stochastic-rounding" in explicit:
            args.append("--no-enable-mamba-cache-stochastic-rounding")
        if self.mamba_cache_philox_rounds is not None:
            args += ["--mamba-cache-philox-rounds", str(self.mamba_cache_philox_rounds)]
        if self.mamba_backend is not None:
            args += ["--mamba-backend", self.mamba_backend]
        return args

    def serve_command(self, model: str, *, served_model_name: str | None = None, port: int = 8000) -> list[str]:
        """The full `vllm serve` command line for this config."""
        cmd = ["vllm", "serve", model, "--port", str(port)]
        if served_model_name:
            cmd += ["--served-model-name", served_model_name]
        return cmd + self.vllm_args()

    def env(self) -> dict[str, str]:
        """Environment variables this config sets on the engine process."""
        return {"OMP_NUM_THREADS": str(self.omp_num_threads)} if self.omp_num_threads is not None else {}


#: The configuration a user gets from `vllm serve MODEL` with no tuning flags.
STOCK = EngineConfig()
