"""GPU and model profiles for the performance model, loaded from the YAML data files in ``profiles/``.

Each file is validated with pydantic (unknown or missing fields are errors naming the file and the field), then
converted to a frozen dataclass. File names: ``profiles/gpu-<name>.yaml`` and ``profiles/model-<name>.yaml``.
Every number in those files carries its source in a ``sources`` mapping next to it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controller.errors import InvalidInput

PROFILE_DIR = Path(__file__).parent / "profiles"

GpuFamily = Literal["ampere", "ada", "hopper", "blackwell"]
MambaDtypeName = Literal["float32", "float16", "bfloat16"]
ComputeDtype = Literal["bf16", "fp8", "fp4", "int4"]


@dataclass(frozen=True)
class GpuProfile:
    """One GPU (per-device numbers; ``max_gpus`` of them share a fast interconnect for tensor parallelism)."""

    name: str
    memory_gib: float
    hbm_bandwidth_gbs: float
    dense_bf16_tflops: float
    dense_fp8_tflops: float
    family: str
    cost_per_hour_usd: float
    cost_source: str
    dense_fp4_tflops: float = 0.0  # 0 = no FP4 tensor cores
    max_gpus: int = 1
    interconnect_gbs: float = 0.0  # per-GPU all-reduce bandwidth (NVLink); 0 when max_gpus == 1
    description: str = ""

    @property
    def sm100_family(self) -> bool:
        """Blackwell data-centre parts (B200/B300/GB300): vLLM's 1024 capture ceiling and Triton SR apply."""
        return self.family == "blackwell"


@dataclass(frozen=True)
class ModelProfile:
    """Architecture numbers of one served checkpoint (parameters in billions, sizes in elements)."""

    name: str
    total_params_b: float
    active_params_b: float
    weight_bytes_per_param: float  # layer weights (all of them for dense models; non-expert ones for MoE)
    has_mamba: bool
    has_mtp: bool
    compute_dtype: str  # dtype the weight GEMMs run in: bf16 | fp8 | fp4 | int4 (weight-only, bf16 math)
    num_layers: int
    hidden_size: int
    vocab_size: int
    embedding_params_b: float  # input embedding table: stored, but only one row is read per token
    attention_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    mamba_layers: int = 0
    mamba_kind: str = "mamba2"  # mamba2 (SSU kernel, --mamba-backend applies) | gdn (Gated DeltaNet, it does not)
    ssm_state_elems_per_layer: int = 0  # heads * head_dim * state size (Mamba2) or heads * k_dim * v_dim (GDN)
    conv_state_elems_per_layer: int = 0  # conv channels * (kernel - 1)
    default_ssm_dtype: str = "float32"  # what --mamba-ssm-cache-dtype auto resolves to for this model
    conv_state_bytes: float = 2.0  # conv state follows the model dtype (bf16)
    num_experts: int = 0
    experts_per_token: int = 0
    routed_expert_params_b: float = 0.0  # all routed experts of all MoE layers
    mtp_layers: int = 0  # n_predict of the built-in MTP head
    mtp_params_b: float = 0.0  # MTP head parameters (stored)
    mtp_routed_params_b: float = 0.0  # routed-expert part of the MTP head
    mtp_weight_bytes_per_param: float = 2.0
    lm_head_params_b: float = 0.0  # re-read by every draft position of an MTP / EAGLE drafter
    mtp_acceptance: tuple[float, ...] = ()  # conditional acceptance per draft position (measured)
    drafter_params_b: float = 0.0  # separate EAGLE / draft-model / DFlash drafter, 0 = none published
    drafter_methods: tuple[str, ...] = ()  # speculative methods with a published drafter for this model
    drafter_acceptance: tuple[float, ...] = ()  # conditional acceptance per draft position of that drafter
    expert_weight_bytes_per_param: float = 0.0  # routed experts' dtype; 0 = same as weight_bytes_per_param
    embedding_bytes_per_param: float = 2.0  # embedding table and lm_head (usually left in BF16)
    activation_mb_per_token: float = 0.0  # intermediate activations written + read per token per forward pass
    mtp_activation_mb_per_token: float = 0.0  # the same for one pass of the MTP head
    drafter_activation_mb_per_token: float = 0.0  # the same for one pass of the separate drafter
    description: str = ""

    @property
    def kv_bytes_per_token_bf16(self) -> float:
        """KV-cache bytes per token of context at 16-bit (K and V of every attention layer)."""
        return float(2 * self.attention_layers * self.num_kv_heads * self.head_dim * 2)

    @property
    def expert_bytes_per_param(self) -> float:
        return self.expert_weight_bytes_per_param or self.weight_bytes_per_param

    @property
    def dense_params_b(self) -> float:
        """Layer parameters every token reads: everything but routed experts, embedding table and lm_head."""
        return self.total_params_b - self.routed_expert_params_b - self.embedding_params_b - self.lm_head_params_b

    @property
    def weight_bytes(self) -> float:
        """Bytes the target model's weights occupy in GPU memory (MTP head excluded)."""
        return 1e9 * (
            self.dense_params_b * self.weight_bytes_per_param
            + self.routed_expert_params_b * self.expert_bytes_per_param
            + (self.embedding_params_b + self.lm_head_params_b) * self.embedding_bytes_per_param
        )


# ----- file schemas (validation only) ---------------------------------------------------------------------------
class _GpuFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    family: GpuFamily
    memory_gib: float = Field(gt=0, le=4096)
    hbm_bandwidth_gbs: float = Field(gt=0, le=100_000)
    dense_bf16_tflops: float = Field(gt=0, le=100_000)
    dense_fp8_tflops: float = Field(ge=0, le=100_000)
    dense_fp4_tflops: float = Field(default=0.0, ge=0, le=100_000)
    max_gpus: int = Field(default=1, ge=1, le=64)
    interconnect_gbs: float = Field(default=0.0, ge=0)
    cost_per_hour_usd: float = Field(gt=0)
    cost_source: str = Field(min_length=1)
    sources: dict[str, str] = Field(min_length=1)

    @model_validator(mode="after")
    def _tp_needs_interconnect(self) -> _GpuFile:
        if self.max_gpus > 1 and self.interconnect_gbs <= 0:
            raise ValueError("interconnect_gbs must be > 0 when max_gpus > 1")
        return self


class _ModelFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    total_params_b: float = Field(gt=0, le=10_000)
    active_params_b: float = Field(gt=0, le=10_000)
    weight_bytes_per_param: float = Field(gt=0, le=4)
    compute_dtype: ComputeDtype
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    embedding_params_b: float = Field(ge=0)
    attention_layers: int = Field(ge=0)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    has_mamba: bool = False
    mamba_layers: int = Field(default=0, ge=0)
    mamba_kind: Literal["mamba2", "gdn"] = "mamba2"
    ssm_state_elems_per_layer: int = Field(default=0, ge=0)
    conv_state_elems_per_layer: int = Field(default=0, ge=0)
    default_ssm_dtype: MambaDtypeName = "float32"
    conv_state_bytes: float = Field(default=2.0, gt=0, le=4)
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    routed_expert_params_b: float = Field(default=0.0, ge=0)
    has_mtp: bool = False
    mtp_layers: int = Field(default=0, ge=0)
    mtp_params_b: float = Field(default=0.0, ge=0)
    mtp_routed_params_b: float = Field(default=0.0, ge=0)
    mtp_weight_bytes_per_param: float = Field(default=2.0, gt=0, le=4)
    lm_head_params_b: float = Field(default=0.0, ge=0)
    mtp_acceptance: tuple[float, ...] = ()
    drafter_params_b: float = Field(default=0.0, ge=0)
    drafter_methods: tuple[Literal["eagle", "eagle3", "draft_model", "dflash"], ...] = ()
    drafter_acceptance: tuple[float, ...] = ()
    expert_weight_bytes_per_param: float = Field(default=0.0, ge=0, le=4)
    embedding_bytes_per_param: float = Field(default=2.0, gt=0, le=4)
    activation_mb_per_token: float = Field(ge=0, le=10_000)
    mtp_activation_mb_per_token: float = Field(default=0.0, ge=0, le=10_000)
    drafter_activation_mb_per_token: float = Field(default=0.0, ge=0, le=10_000)
    sources: dict[str, str] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> _ModelFile:
        if self.active_params_b > self.total_params_b:
            raise ValueError("active_params_b must be <= total_params_b")
        if self.has_mamba != (self.mamba_layers > 0):
            raise ValueError("has_mamba must be true exactly when mamba_layers > 0")
        if self.has_mamba and self.ssm_state_elems_per_layer <= 0:
            raise ValueError("a Mamba model needs ssm_state_elems_per_layer > 0")
        if self.attention_layers + self.mamba_layers > self.num_layers:
            raise ValueError("attention_layers + mamba_layers must be <= num_layers")
        if (self.num_experts > 0) != (self.experts_per_token > 0) or self.experts_per_token > self.num_experts:
            raise ValueError(
                "num_experts and experts_per_token must both be set, with experts_per_token <= num_experts"
            )
        if self.num_experts and self.routed_expert_params_b <= 0:
            raise ValueError("an MoE model needs routed_expert_params_b > 0")
        rest = self.total_params_b - self.routed_expert_params_b - self.embedding_params_b - self.lm_head_params_b
        if rest <= 0:
            raise ValueError("total_params_b must exceed routed experts + embedding + lm_head parameters")
        if self.has_mtp != (self.mtp_layers > 0):
            raise ValueError("has_mtp must be true exactly when mtp_layers > 0")
        if self.has_mtp and (self.mtp_params_b <= 0 or not self.mtp_acceptance):
            raise ValueError("a model with an MTP head needs mtp_params_b > 0 and mtp_acceptance")
        if any(not 0 < a <= 1 for a in self.mtp_acceptance):
            raise ValueError("mtp_acceptance values must be in (0, 1]")
        if self.drafter_methods and (self.drafter_params_b <= 0 or not self.drafter_acceptance):
            raise ValueError("drafter_methods need drafter_params_b > 0 and drafter_acceptance")
        if any(not 0 < a <= 1 for a in self.drafter_acceptance):
            raise ValueError("drafter_acceptance values must be in (0, 1]")
        return self


def _names(prefix: str) -> list[str]:
    return sorted(p.name[len(prefix) : -len(".yaml")] for p in PROFILE_DIR.glob(f"{prefix}*.yaml"))


def gpu_names() -> list[str]:
    """Names of the shipped GPU profiles."""
    return _names("gpu-")


def model_names() -> list[str]:
    """Names of the shipped model profiles."""
    return _names("model-")


def _read(kind: str, name: str, allowed: list[str]) -> tuple[str, dict[str, object]]:
    path = PROFILE_DIR / f"{kind}-{name}.yaml"
    source = str(path)
    if name not in allowed:
        raise InvalidInput(f"unknown {kind} profile {name!r}; allowed: {', '.join(allowed)}", source=source)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InvalidInput(f"not valid YAML: {exc}", source=source) from exc
    if not isinstance(raw, dict):
        raise InvalidInput("expected a mapping at the top level", source=source)
    if raw.get("name") != name:
        raise InvalidInput(f"name must match the file name ({name!r})", source=source, field="name")
    return source, raw


def _invalid(exc: ValidationError, source: str) -> InvalidInput:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    return InvalidInput(first["msg"], source=source, field=where)


@functools.cache
def load_gpu(name: str) -> GpuProfile:
    """The GPU profile ``name``; :class:`InvalidInput` for an unknown name or a malformed file."""
    source, raw = _read("gpu", name, gpu_names())
    try:
        f = _GpuFile.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc, source) from exc
    return GpuProfile(
        name=f.name,
        memory_gib=f.memory_gib,
        hbm_bandwidth_gbs=f.hbm_bandwidth_gbs,
        dense_bf16_tflops=f.dense_bf16_tflops,
        dense_fp8_tflops=f.dense_fp8_tflops,
        family=f.family,
        cost_per_hour_usd=f.cost_per_hour_usd,
        cost_source=f.cost_source,
        dense_fp4_tflops=f.dense_fp4_tflops,
        max_gpus=f.max_gpus,
        interconnect_gbs=f.interconnect_gbs,
        description=f.description,
    )


@functools.cache
def load_model(name: str) -> ModelProfile:
    """The model profile ``name``; :class:`InvalidInput` for an unknown name or a malformed file."""
    source, raw = _read("model", name, model_names())
    try:
        f = _ModelFile.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc, source) from exc
    data = f.model_dump(exclude={"sources"})
    return ModelProfile(**data)
