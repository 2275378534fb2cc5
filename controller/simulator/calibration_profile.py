"""The calibration profile: what ``shiftlight calibrate`` measured on one GPU type, and the fit the model runs on.

It lives next to the GPU profile as ``controller/simulator/profiles/calibration-<gpu>.yaml``. Every efficiency is
a fraction of the GPU profile's datasheet numbers (``hbm_bandwidth_gbs``, ``dense_bf16_tflops``), so the same
formulas hold for any GPU; curves are piecewise linear in ``log(x)`` and flat beyond their ends.

The performance model reads it, and ``controller.calibrate`` writes it, so it sits with the simulator, below both.
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controller.errors import InvalidInput
from controller.simulator.profiles import PROFILE_DIR

CALIBRATION_SCHEMA_VERSION = 1


class Curve(BaseModel):
    """Efficiency against a size (tokens, sequences, FLOPs), linear in ``log(x)`` between points."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    x: tuple[float, ...] = Field(min_length=1)
    y: tuple[float, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _shape(self) -> Curve:
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} points and y {len(self.y)}; they must pair up")
        if any(v <= 0 for v in self.x) or any(b <= a for a, b in zip(self.x, self.x[1:], strict=False)):
            raise ValueError("x must be positive and strictly increasing")
        if any(not (0.0 < v <= 1.5) for v in self.y):
            raise ValueError("efficiencies (y) must lie in (0, 1.5]")
        return self

    def at(self, value: float) -> float:
        xs, ys = self.x, self.y
        if value <= xs[0]:
            return ys[0]
        if value >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, value)
        lo, hi = math.log(xs[i - 1]), math.log(xs[i])
        w = (math.log(value) - lo) / (hi - lo)
        return ys[i - 1] + w * (ys[i] - ys[i - 1])


class WeightGemm(BaseModel):
    """Dense weight GEMMs: ``fixed_s + max(bytes / (peak_bw * bandwidth), flops / (peak * mfu(tokens)))``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    bandwidth: float = Field(gt=0, le=1.2)
    fixed_s: float = Field(ge=0, lt=1e-3)
    mfu: Curve


class MoeGemm(BaseModel):
    """Routed-expert GEMMs (up and down): roofline over ``efficiency(tokens in the pass)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    efficiency: Curve
    measured_in: str = "bf16"


class DecodeAttention(BaseModel):
    """Per attention layer: ``fixed_s + kv_bytes / (peak_bw * bandwidth[q](sequences))``, q = query tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    fixed_s: float = Field(ge=0, lt=1e-3)
    bandwidth: dict[int, Curve] = Field(min_length=1)

    def efficiency(self, sequences: float, query: int) -> float:
        qs = sorted(self.bandwidth)
        if query <= qs[0]:
            return self.bandwidth[qs[0]].at(sequences)
        if query >= qs[-1]:
            return self.bandwidth[qs[-1]].at(sequences)
        i = bisect.bisect_right(qs, query)
        a, b = qs[i - 1], qs[i]
        w = (query - a) / (b - a)
        return (1 - w) * self.bandwidth[a].at(sequences) + w * self.bandwidth[b].at(sequences)


class PrefillAttention(BaseModel):
    """Prompt attention per layer pass: FLOPs over ``peak * efficiency(FLOPs)``, for fresh prompts (causal, one
    or several sequences) and for a chunk that also attends to the request's cached context."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    fresh: Curve
    cached: Curve


class StateTraffic(BaseModel):
    """Mamba-state read-modify-write: bytes over ``peak_bw * efficiency(sequences)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    efficiency: Curve


class KernelOverhead(BaseModel):
    """Time of one small kernel in a replayed CUDA graph, and launched one by one (eager)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    graph_kernel_s: float = Field(gt=0, lt=1e-4)
    eager_kernel_s: float = Field(gt=0, lt=1e-3)


class LayerOps(BaseModel):
    """A decoder layer's small kernels (norms, cache writes, layout copies, residual adds, the gated activation),
    timed together at B sequences x q tokens: ``kernels * graph_kernel_s / kernel_efficiency(tokens) +
    activation_bytes / (peak_bw * bandwidth)``. ``kernel_efficiency`` is the overhead probe's kernel time over a
    layer kernel's own (real-width reductions and copies take longer than a one-row elementwise op);
    ``bandwidth`` is the slope of the measured time against the bytes moved, at streaming sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kernel_efficiency: Curve
    bandwidth: float = Field(gt=0, le=1.2)
    kernels_per_layer: tuple[float, ...] = ()  # the probe's layer, as counted (one entry per distinct count)


class GemmChain(BaseModel):
    """A layer's GEMMs back to back over distinct weights: the weight-GEMM curves' sum over the measured time,
    against tokens. The model divides its dense GEMM time by it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    efficiency: Curve


class Ceilings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    copy_gbs: float = Field(gt=0)
    read_gbs: float = Field(gt=0)
    gemm_tflops: float = Field(gt=0)


class EngineRuntime(BaseModel):
    """What vLLM itself adds to the kernels' time, fitted to the engine measured on this GPU
    (``bench/engine_fidelity.py`` on ``profiles/calibration/engine-<gpu>/``).

    - ``cpu_step_base_s`` / ``cpu_per_seq_s``: the engine core's CPU time per step (fixed, and per scheduled
      request). Async scheduling hides it behind the GPU's step; without async it adds to the step.
    - ``v1_runner_step_s`` / ``v1_runner_per_seq_s``: configs that fall back to the V1 model runner
      (``v1_runner_methods``: vLLM 0.26's Model Runner V2 lacks the n-gram drafters) take at least the CPU time
      plus this per step, whatever the async setting (measured: ngram_gpu with async on ran as fast as ngram
      with it off, both far below stock at few streams and close to the GPU's verification time at 64).
    - ``prefill_compute_scale``: the engine's compute-bound time over the kernel probe's in steps with prompt
      chunks; decode steps are left as the kernels say.
    - ``fp8_kv_step_bytes``: what one element of an fp8 KV cache costs the step, in bytes of KV traffic (1.0 is
      its size; more means the fp8 path's dequantisation costs beyond the bytes it saves), and
      ``fp8_kv_per_seq_s`` what it adds per decoding sequence and step. Capacity still counts one byte.
    - ``fp8_kv_prefill_attention_scale``: prefill attention's compute time with an fp8 cache over its time with a
      bf16 one (Hopper's FlashAttention 3 runs it on fp8 tensor cores; below 1.0 is faster). It acts where prompts
      are long, and nowhere in decode.
    - ``decode_attention_scale``: the engine's paged decode attention (KV read) time over the kernel probe's
      contiguous one; it shows where many long contexts decode together.
    - ``v1_runner_host_step_s`` / ``v1_runner_host_per_seq_s``: models vLLM 0.26 serves only on the V1 model
      runner (hybrid Mamba / attention models: ``VllmConfig._is_default_v2_model_runner_model``) add this host
      time per step to the engine core's CPU time; async scheduling hides it behind the GPU as it hides the rest.
    - ``model_drafter_step_s``: an MTP or EAGLE drafter on the V1 runner adds this host time per step (the
      drafting loop's bookkeeping, whatever the depth), hidden the same way; ``model_drafter_pass_s``: the GPU
      time each draft pass takes beyond its kernels (measured: MTP3 against MTP1 at 64 streams).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    vllm: str
    source: str
    cpu_step_base_s: float = Field(ge=0, lt=0.05)
    cpu_per_seq_s: float = Field(ge=0, lt=1e-3)
    v1_runner_methods: tuple[str, ...] = ("ngram", "ngram_gpu")
    v1_runner_step_s: float = Field(default=0.0, ge=0, lt=0.05)
    v1_runner_per_seq_s: float = Field(default=0.0, ge=0, lt=1e-3)
    prefill_compute_scale: float = Field(default=1.0, gt=0.3, le=2.0)
    fp8_kv_step_bytes: float = Field(default=1.0, gt=0, le=4.0)
    fp8_kv_per_seq_s: float = Field(default=0.0, ge=0, lt=1e-3)
    fp8_kv_prefill_attention_scale: float = Field(default=1.0, gt=0.2, le=2.0)
    decode_attention_scale: float = Field(default=1.0, gt=0.3, le=3.0)
    v1_runner_host_step_s: float = Field(default=0.0, ge=0, lt=0.05)
    v1_runner_host_per_seq_s: float = Field(default=0.0, ge=0, lt=1e-3)
    model_drafter_step_s: float = Field(default=0.0, ge=0, lt=0.05)
    model_drafter_pass_s: float = Field(default=0.0, ge=0, lt=0.01)


class MeasuredOn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    device: str
    date: str
    torch: str
    cuda: str
    driver: str = ""
    probe_seconds: float = Field(ge=0)
    models: tuple[str, ...] = ()


class RawPoint(BaseModel):
    """One measurement as the fit used it: the family, its sizes and the median time of one op."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    family: str
    seconds: float = Field(gt=0)
    sizes: dict[str, float | str]


class Calibration(BaseModel):
    """A calibration profile (``calibration-<gpu>.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = CALIBRATION_SCHEMA_VERSION
    gpu: str
    measured_on: MeasuredOn
    ceilings: Ceilings
    activation_bandwidth: float = Field(gt=0, le=1.2)
    weight_gemm: WeightGemm
    moe_gemm: MoeGemm | None = None
    decode_attention: DecodeAttention
    prefill_attention: PrefillAttention
    state: StateTraffic | None = None
    overhead: KernelOverhead
    layer_ops: LayerOps | None = None
    gemm_chain: GemmChain | None = None
    engine: EngineRuntime | None = None
    held_out: dict[str, float] = {}
    raw_file: str = ""
    points: tuple[RawPoint, ...] = ()

    @model_validator(mode="after")
    def _version(self) -> Calibration:
        if self.schema_version != CALIBRATION_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not {CALIBRATION_SCHEMA_VERSION}")
        return self


def calibration_path(gpu: str) -> Path:
    return PROFILE_DIR / f"calibration-{gpu}.yaml"


def parse_calibration(data: Any, source: str) -> Calibration:
    """Validate a loaded YAML mapping; errors name the file and the field."""
    if not isinstance(data, dict):
        raise InvalidInput("a calibration profile must be a mapping", source=source)
    try:
        return Calibration.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(f"invalid calibration profile: {err['msg']}", source=source, field=field) from exc


def read_calibration(path: Path) -> Calibration:
    try:
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # a safe loader
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read calibration profile: {exc}", source=str(path)) from exc
    return parse_calibration(data, str(path))


def load_calibration(gpu: str) -> Calibration | None:
    """The shipped calibration profile of ``gpu``, or ``None`` when that GPU has not been measured."""
    path = calibration_path(gpu)
    if not path.exists():
        return None
    return read_calibration(path)


def dump_calibration(cal: Calibration) -> str:
    data = cal.model_dump(mode="json", exclude_defaults=False)
    return yaml.safe_dump(data, sort_keys=False, width=120)
