"""A first-principles performance model of one vLLM replica: step time, capacity and steady state.

Every formula and constant is explained, with its source, in ``docs/simulator.md`` (section "Performance model").
The short version:

* **Step time** of one engine iteration is a per-kernel-group roofline over the GPU's HBM bandwidth and dense
  tensor throughput: weights (only the MoE experts the batch touches), KV-cache reads, Mamba state reads and writes
  (at the SSU kernel's efficiency for the chosen backend), the drafter's passes, and a launch penalty when the batch
  runs outside a captured CUDA graph. CPU scheduling work runs in series with the GPU (sync) or overlapped with
  it (async scheduling).
* **Speculative decoding** emits ``1 + sum(per-position acceptance)`` tokens per sequence and step; the
  verification pass carries ``1 + k`` tokens per sequence.
* **Steady state** for a traffic shape is a fluid model of continuous batching (closed loop at the shape's
  concurrency, or open loop at its arrival rate) with Little's law tying concurrency, throughput and latency
  together; percentiles come from log-normal length distributions.

``step()`` is called once per simulated engine iteration by the replica engine, so everything that depends only on
the config is computed once and cached.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from controller.domain.config import CPU_DRAFTERS, EngineConfig
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, SpecDecodeStats
from controller.simulator.calibration_profile import Calibration, load_calibration
from controller.simulator.profiles import GpuProfile, ModelProfile, load_gpu, load_model

GIB = 1024**3

# ----- constants (each one is sourced in docs/simulator.md) -----------------------------------------------------
#: Fraction of peak HBM bandwidth that streaming kernels (weight GEMV/GEMM, paged attention) sustain.
HBM_EFFICIENCY = 0.85
#: Fraction of peak dense tensor throughput that large GEMMs sustain.
GEMM_MFU = 0.60
#: Fraction of peak dense tensor throughput that attention kernels sustain.
ATTENTION_MFU = 0.50
#: Fraction of peak HBM bandwidth the selective-state-update (SSU) kernel reaches, per ``--mamba-backend``.
SSU_BANDWIDTH_EFFICIENCY: dict[str, float] = {"triton": 0.60, "flashinfer": 0.85}
#: Gated DeltaNet decode kernels (Qwen3.5/3.6) are Triton (FLA) kernels and ignore ``--mamba-backend``.
GDN_BANDWIDTH_EFFICIENCY = 0.60
#: Engine-core CPU time per step: fixed part, per scheduled request, per draft token.
CPU_STEP_BASE_S = 0.5e-3
CPU_PER_SEQ_S = 20e-6
CPU_PER_DRAFT_TOKEN_S = 4e-6
#: CPU drafters (run in the engine core, per request and step).
CPU_DRAFTER_PER_SEQ_S: dict[str, float] = {"ngram": 15e-6, "suffix": 25e-6}
#: GPU time of the GPU n-gram drafter per step.
NGRAM_GPU_S = 50e-6
#: What async scheduling cannot hide: the per-step event wait and the sampled-token copy.
ASYNC_RESIDUAL_S = 0.1e-3
#: Extra CPU coordination per additional OpenMP thread (field note 1, vLLM's warning for OMP_NUM_THREADS > 1).
OMP_EXTRA_THREAD_OVERHEAD = 0.05
#: Kernel launches per layer outside a CUDA graph (about 10 kernels at about 4 us each).
EAGER_LAUNCH_S_PER_LAYER = 40e-6
#: GPU idle gaps between dependent kernels without a graph (about 10 kernels per layer, about 1 us each).
EAGER_GPU_GAP_S_PER_LAYER = 10e-6
#: Eager gap per attention/Mamba layer with piecewise graphs (those ops run between graph pieces).
PIECEWISE_S_PER_SPLIT_LAYER = 10e-6
#: Tensor-parallel all-reduce latency (two per layer).
ALLREDUCE_LATENCY_S = 8e-6
#: Memory reserved outside weights and cache: CUDA context, workspaces, graph pool.
FIXED_RESERVE_BYTES = 1.5 * GIB
#: Peak activation bytes per (batched token x hidden unit) in vLLM's profiling run.
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 24.0
#: The cache must hold at least one request of this many tokens (deployments set --max-model-len to fit).
MIN_CONTEXT_TOKENS = 8192
#: Conditional acceptance of any drafter on a position that copies the context (field note 2: ~15 of 16).
COPY_ACCEPTANCE = 15 / 16
#: Conditional acceptance of lookup drafters (ngram, suffix) on fresh text.
LOOKUP_FRESH_ACCEPTANCE = 0.15
#: Per-request TPOT spread that scheduling jitter adds even to a steady batch (coefficient of variation).
TPOT_CV_FLOOR = 0.05
#: How long an overloaded open-loop queue is assumed to have been growing when reported.
OVERLOAD_HORIZON_S = 60.0
#: Calibrated model only: small (non-GEMM) kernels per layer in vLLM's forward pass (fused add + RMSNorm twice,
#: rotary embedding with the cache write, the attention or SSM kernel, the gated activation, one more).
SMALL_KERNELS_PER_LAYER = 6.0
#: The switch: when on, a model built without an explicit ``calibration`` runs on the shipped calibration profile
#: of its GPU (``profiles/calibration-<gpu>.yaml``, where one exists) with the prefill fixes on. Off by default;
#: ``SHIFTLIGHT_SIMULATOR_CALIBRATED=1`` turns it on for one process (to compare outputs).
CALIBRATED_BY_DEFAULT = os.environ.get("SHIFTLIGHT_SIMULATOR_CALIBRATED", "") == "1"


class _Default:
    """Marks an argument left to :data:`CALIBRATED_BY_DEFAULT`."""


_DEFAULT = _Default()


#: Most per-config plans (and as many acceptance vectors) one performance model keeps, least recently used first
#: out: twice an optimizer's pool (``MAX_POOL_CONFIGS``), so a model shared by every TunedService on one (model, GPU)
#: holds a few MiB however many TunedServices ask it. A dropped plan is rebuilt, the same, when next needed.
MAX_CACHED_PLANS = 8_192

#: Most shared performance models (one per (model, GPU) pair) the process keeps.
MAX_SHARED_MODELS = 8


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Lru(Generic[_K, _V]):
    """A bounded, thread-safe map: the least recently used entry goes first once ``limit`` is reached."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K) -> _V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: _K, value: _V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def keys(self) -> list[_K]:
        """The keys held, least recently used first (their order is left as it is)."""
        with self._lock:
            return list(self._entries)

    def __deepcopy__(self, memo: dict[int, object]) -> _Lru[_K, _V]:
        """A copy with its own lock (a lock cannot be copied): the entries are copied as they are now."""
        copied: _Lru[_K, _V] = _Lru(self.limit)
        with self._lock:
            copied._entries = copy.deepcopy(self._entries, memo)
        return copied

    def __getstate__(self) -> dict[str, object]:
        with self._lock:
            return {"limit": self.limit, "entries": list(self._entries.items())}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.limit = state["limit"]
        self._entries = OrderedDict(state["entries"])
        self._lock = threading.Lock()


@functools.cache
def shipped_calibration(gpu: str) -> Calibration | None:
    """The calibration profile that ships for ``gpu``, or ``None`` (read once per process)."""
    return load_calibration(gpu)


_Z95 = 1.6448536269514722
_Z99 = 2.3263478740408408
_DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
_MODEL_DRAFTERS = frozenset({"eagle", "eagle3", "draft_model", "dflash"})


@dataclass(frozen=True)
class StepTiming:
    """How long one engine iteration takes and what limits it."""

    seconds: float
    gpu_seconds: float
    cpu_overhead_s: float
    tokens_per_seq: float
    bound: str  # "memory" | "compute" | "overhead"


@dataclass(frozen=True)
class Capacity:
    """Batch limits of one replica. A running sequence holds ``context + state_tokens_per_seq`` cache tokens."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_tokens: int
    cudagraph_ceiling: int
    state_tokens_per_seq: int = 0  # Mamba state (1 + k slots) of one sequence, in KV-token equivalents
    kv_bytes_per_token: float = 0.0
    state_bytes_per_seq: float = 0.0
    cache_pool_bytes: float = 0.0


@dataclass(frozen=True)
class PerfEstimate:
    """Steady state of one replica serving a traffic shape."""

    feasible: bool
    reason: str
    output_tokens_per_s: float
    request_throughput: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    running: float
    waiting: float
    kv_usage: float
    preemptions_per_s: float
    spec: SpecDecodeStats | None


@dataclass(frozen=True)
class _Plan:
    """Everything about a config that does not change from step to step."""

    k: int
    method: str
    async_on: bool
    capacity: Capacity
    bw: float  # bytes/s for streaming kernels
    state_bw: float  # bytes/s for the SSU / DeltaNet kernel
    dense_bytes: float  # weight bytes every forward pass reads
    routed_bytes: float  # all routed-expert bytes
    expert_p: float  # experts_per_token / num_experts
    gemm_s_per_token: float  # compute time per token in the forward pass
    kv_bytes_per_token: float
    kv_fp8: bool
    attn_s_per_query_ctx: float  # attention compute time per (query token x context token)
    slot_bytes: float  # Mamba state of one sequence, one slot
    act_bytes_per_token: float  # activation traffic per token of the target forward pass
    draft_act_bytes_per_token: float  # activation traffic per token of one drafter pass
    draft_dense_bytes: float  # per draft pass
    draft_routed_bytes: float
    draft_gemm_s_per_token: float
    draft_kv_bytes_per_token: float
    draft_passes: int
    draft_fixed_s: float
    draft_launch_s: float
    cpu_drafter_per_seq_s: float
    omp_factor: float
    layers_launch_s: float
    layers_gap_s: float
    split_layers_s: float
    tp_comm_s_per_token: float
    tp_comm_fixed_s: float
    # calibrated model only
    peak_bw: float = 0.0  # datasheet HBM bytes/s (x TP)
    dense_peak_s_per_token: float = 0.0  # dense + lm_head GEMM time per token at peak tensor throughput
    expert_peak_s_per_token: float = 0.0  # routed-expert GEMM time per token at peak
    attn_peak_flop_s: float = 0.0  # 1 / peak bf16 FLOP/s (x TP)
    attn_flops_per_work: float = 0.0  # 4 * heads * head_dim: FLOPs per (query x context) pair per layer
    gemm_kernels: int = 0
    moe_layers: int = 0
    small_kernels: float = 0.0
    state_backend_factor: float = 1.0


def _lognormal_quantiles(dist: LengthDistribution) -> tuple[float, float, float, float]:
    """(mean, p50, p95, p99) of a length distribution (log-normal; capped at ``maximum``)."""
    if dist.cv <= 0:
        return dist.mean, dist.mean, dist.mean, dist.mean
    mu, sigma = dist.lognormal_params()
    qs = [math.exp(mu + z * sigma) for z in (0.0, _Z95, _Z99)]
    if dist.maximum is not None:
        qs = [min(q, float(dist.maximum)) for q in qs]
    return dist.mean, qs[0], qs[1], qs[2]


def _lognormal_pcts(mean: float, cv: float) -> Percentiles:
    """Percentiles of a log-normal with this mean and coefficient of variation."""
    if mean <= 0:
        return Percentiles(p50=0.0, p95=0.0, p99=0.0)
    if cv <= 0:
        return Percentiles(p50=mean, p95=mean, p99=mean)
    s2 = math.log1p(cv * cv)
    mu, s = math.log(mean) - s2 / 2, math.sqrt(s2)
    return Percentiles(p50=math.exp(mu), p95=math.exp(mu + _Z95 * s), p99=math.exp(mu + _Z99 * s))


def _zero_pcts() -> Percentiles:
    return Percentiles(p50=0.0, p95=0.0, p99=0.0)


class PerformanceModel:
    """Step time, capacity and steady-state estimates for one model on one GPU type."""

    def __init__(
        self,
        model: ModelProfile,
        gpu: GpuProfile,
        calibration: Calibration | _Default | None = _DEFAULT,
        *,
        prefill_fixes: bool | None = None,
        small_kernels_per_layer: float = SMALL_KERNELS_PER_LAYER,
    ) -> None:
        """``calibration`` replaces the fixed efficiency constants by the curves measured on this GPU type
        (``shiftlight calibrate``); ``prefill_fixes`` counts a prompt chunk's attention to its cached context, each
        prefilling sequence's attention separately, and keeps a request's own prefill out of its TPOT. Both are off
        by default (:data:`CALIBRATED_BY_DEFAULT`); :meth:`calibrated` turns both on. Pass ``calibration=None``
        for the fixed constants whatever the switch says."""
        self.model = model
        self.gpu = gpu
        if isinstance(calibration, _Default):
            calibration = shipped_calibration(gpu.name) if CALIBRATED_BY_DEFAULT else None
        self.calibration: Calibration | None = calibration
        self.prefill_fixes = CALIBRATED_BY_DEFAULT if prefill_fixes is None else prefill_fixes
        self.small_kernels_per_layer = small_kernels_per_layer
        self._plans: _Lru[EngineConfig, _Plan] = _Lru(MAX_CACHED_PLANS)
        self._last: tuple[EngineConfig, _Plan] | None = None
        self._acc: _Lru[tuple[EngineConfig, float], tuple[float, ...]] = _Lru(MAX_CACHED_PLANS)

    @classmethod
    def named(cls, model: str, gpu: str) -> PerformanceModel:
        """The model for two shipped profiles, by name."""
        return cls(load_model(model), load_gpu(gpu))

    @classmethod
    def shared(cls, model: str, gpu: str) -> PerformanceModel:
        """One model per (model, GPU) pair for the whole process (what the operator's optimizers and memory-fit
        oracles use): its plan cache is bounded (``MAX_CACHED_PLANS``), so its memory does not grow with the number
        of TunedServices that ask it. Thread-safe."""
        return _shared_model(model, gpu)

    @classmethod
    def calibrated(cls, model: str, gpu: str) -> PerformanceModel:
        """The model for two shipped profiles on what ``shiftlight calibrate`` measured for that GPU, where a
        calibration profile ships (``profiles/calibration-<gpu>.yaml``); today's constants otherwise. The
        prefill fixes are on either way."""
        return cls(load_model(model), load_gpu(gpu), shipped_calibration(gpu), prefill_fixes=True)

    # ----- config-level facts -------------------------------------------------------------------------------
    def _ssm_dtype(self, config: EngineConfig) -> str:
        return self.model.default_ssm_dtype if config.mamba_ssm_cache_dtype == "auto" else config.mamba_ssm_cache_dtype

    def _kv_dtype_bytes(self, config: EngineConfig) -> float:
        return 1.0 if config.kv_cache_dtype.startswith("fp8") else 2.0

    def async_enabled(self, config: EngineConfig) -> bool:
        """vLLM's rule: unset means on, except with a CPU drafter (ngram, suffix), where it is off."""
        if config.async_scheduling is not None:
            return config.async_scheduling
        return config.speculative_method not in CPU_DRAFTERS

    def _ssu_backend(self, config: EngineConfig) -> str:
        return config.mamba_backend or "triton"

    def _tflops(self, bytes_per_param: float, quant: str) -> float:
        """Peak dense tensor TFLOPs for GEMMs whose weights are stored at ``bytes_per_param``.

        BF16 weights and weight-only 4-bit (AWQ/GPTQ, Marlin) run BF16 math. FP8 and NVFP4 weights use FP8/FP4 tensor
        cores where the GPU has them; elsewhere vLLM dequantises them (Marlin), so the math is BF16 again.
        """
        g = self.gpu
        if bytes_per_param >= 1.5 or quant in ("bf16", "int4"):
            return g.dense_bf16_tflops
        if bytes_per_param >= 0.9 or quant == "fp8":
            return g.dense_fp8_tflops or g.dense_bf16_tflops
        return g.dense_fp4_tflops or g.dense_bf16_tflops

    def _weight_bytes_total(self, config: EngineConfig) -> float:
        m = self.model
        total = m.weight_bytes
        if config.speculative_method == "mtp" and m.has_mtp:
            total += m.mtp_params_b * 1e9 * m.mtp_weight_bytes_per_param
        elif config.speculative_method in _MODEL_DRAFTERS and m.drafter_params_b:
            total += m.drafter_params_b * 1e9 * 2.0
        return total

    def _state_slot_bytes(self, config: EngineConfig) -> float:
        m = self.model
        if not m.has_mamba:
            return 0.0
        ssm = _DTYPE_BYTES[self._ssm_dtype(config)]
        return float(
            m.mamba_layers * (m.ssm_state_elems_per_layer * ssm + m.conv_state_elems_per_layer * m.conv_state_bytes)
        )

    def capacity(self, config: EngineConfig) -> Capacity:
        """Batch limits with vLLM's defaults filled in for knobs left unset (see docs/simulator.md)."""
        g, m, k = self.gpu, self.model, config.k
        if g.memory_gib >= 160:
            seqs_default, mbt_default = 1024, 16384
        elif g.memory_gib >= 70:
            seqs_default, mbt_default = 1024, 8192
        else:
            seqs_default, mbt_default = 256, 2048
        seqs = config.max_num_seqs or seqs_default
        mbt = config.max_num_batched_tokens or mbt_default
        if config.max_cudagraph_capture_size is not None:
            ceiling = config.max_cudagraph_capture_size
        else:
            ceiling = min(seqs * (1 + k) * 2, 1024 if g.sm100_family else 512)
        ceiling = min(ceiling, mbt)
        if k:
            ceiling = (ceiling // (1 + k)) * (1 + k)  # FULL decode graphs hold whole (1 + k)-token groups
        tp = config.tensor_parallel_size
        util = config.gpu_memory_utilization or 0.92
        reserve = (
            FIXED_RESERVE_BYTES * tp
            + mbt * m.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN
            + seqs * m.vocab_size * 4.0 * 2
        )
        pool = max(0.0, g.memory_gib * GIB * tp * util - self._weight_bytes_total(config) - reserve)
        kv_tok = m.kv_bytes_per_token_bf16 / 2.0 * self._kv_dtype_bytes(config)
        if config.speculative_method == "mtp":
            kv_tok += kv_tok / max(1, m.attention_layers)  # the MTP head's own attention layer
        state = self._state_slot_bytes(config) * (1 + k)  # vLLM keeps 1 + num_speculative_blocks state slots
        return Capacity(
            max_num_seqs=seqs,
            max_num_batched_tokens=mbt,
            kv_cache_tokens=int(pool // kv_tok) if kv_tok else 0,
            cudagraph_ceiling=max(0, ceiling),
            state_tokens_per_seq=math.ceil(state / kv_tok) if kv_tok else 0,
            kv_bytes_per_token=kv_tok,
            state_bytes_per_seq=state,
            cache_pool_bytes=pool,
        )

    def feasibility(self, config: EngineConfig) -> str | None:
        """Why ``config`` cannot start for this model on this GPU, or ``None`` when it can."""
        g, m, k, method = self.gpu, self.model, config.k, config.speculative_method
        tp = config.tensor_parallel_size
        if tp > g.max_gpus:
            return f"tensor_parallel_size {tp} needs {tp} GPUs; a {g.name} node has {g.max_gpus}"
        if m.num_kv_heads % tp and tp % m.num_kv_heads:
            return f"tensor_parallel_size {tp} does not divide the model's {m.num_kv_heads} KV heads"
        if config.mamba_backend == "cpu":
            return "--mamba-backend cpu only runs on CPU platforms, not on a GPU"
        if (
            m.has_mamba
            and config.mamba_cache_stochastic_rounding
            and m.mamba_kind == "mamba2"
            and self._ssu_backend(config) == "triton"
            and not g.sm100_family
        ):
            return (
                f"Mamba stochastic rounding with the Triton SSU kernel needs an SM100-family GPU; "
                f"on {g.family} ({g.name}) use --mamba-backend flashinfer"
            )
        if config.kv_cache_dtype.startswith("fp8") and g.family == "ampere":
            return f"--kv-cache-dtype {config.kv_cache_dtype} is refused on {g.family} ({g.name}): no FP8 support"
        if method == "mtp" and not m.has_mtp:
            return f"speculative method 'mtp' needs a built-in MTP head; {m.name} has none"
        if method in _MODEL_DRAFTERS and method not in m.drafter_methods:
            return f"speculative method '{method}' needs a published {method} drafter for {m.name}; none is profiled"
        if config.max_cudagraph_capture_size is not None and k and config.max_cudagraph_capture_size < 1 + k:
            return (
                f"max_cudagraph_capture_size {config.max_cudagraph_capture_size} is below 1 + k = {1 + k}: "
                "no valid CUDA graph size after rounding to multiples of 1 + k"
            )
        cap = self.capacity(config)
        if cap.max_num_batched_tokens < cap.max_num_seqs:
            return f"max_num_batched_tokens ({cap.max_num_batched_tokens}) must be >= max_num_seqs ({cap.max_num_seqs})"
        util = config.gpu_memory_utilization or 0.92
        budget = g.memory_gib * tp * util
        weights = self._weight_bytes_total(config) / GIB
        if cap.cache_pool_bytes <= 0:
            return (
                f"weights ({weights:.1f} GiB) plus activation reserve do not fit in {budget:.1f} GiB "
                f"({util:g} of {g.memory_gib:g} GiB x {tp} GPU) on {g.name}"
            )
        need = cap.state_bytes_per_seq + MIN_CONTEXT_TOKENS * cap.kv_bytes_per_token
        if cap.cache_pool_bytes < need:
            return (
                f"after {weights:.1f} GiB of weights the cache pool ({cap.cache_pool_bytes / GIB:.2f} GiB) cannot "
                f"hold one {MIN_CONTEXT_TOKENS}-token request ({need / GIB:.2f} GiB incl. Mamba state)"
            )
        return None

    # ----- speculative decoding -----------------------------------------------------------------------------
    def _conditional(self, config: EngineConfig, repetitiveness: float) -> tuple[float, ...]:
        m, k, method = self.model, config.k, config.speculative_method
        if method == "none" or k == 0:
            return ()
        if method == "mtp":
            base = list(m.mtp_acceptance) or [LOOKUP_FRESH_ACCEPTANCE]
        elif method in _MODEL_DRAFTERS:
            base = list(m.drafter_acceptance) or [LOOKUP_FRESH_ACCEPTANCE]
        else:  # ngram, ngram_gpu, suffix: lookup drafters
            base = [LOOKUP_FRESH_ACCEPTANCE]
        base += [base[-1]] * max(0, k - len(base))
        r = min(1.0, max(0.0, repetitiveness))
        return tuple((1 - r) * a + r * max(a, COPY_ACCEPTANCE) for a in base[:k])

    def acceptance(self, config: EngineConfig, repetitiveness: float) -> tuple[float, ...]:
        """Per-position acceptance rates (len k) as vLLM reports them: P(draft position i is accepted).

        These are prefix products of the conditional acceptance of each position, so they never grow with i and
        the expected tokens per step per sequence is ``1 + sum(acceptance)``.
        """
        r = round(min(1.0, max(0.0, repetitiveness)), 3)
        key = (config, r)
        hit = self._acc.get(key)
        if hit is None:
            out: list[float] = []
            p = 1.0
            for a in self._conditional(config, r):
                p *= a
                out.append(p)
            hit = tuple(out)
            self._acc.put(key, hit)
        return hit

    def tokens_per_step(self, config: EngineConfig, repetitiveness: float = 0.0) -> float:
        """Expected tokens each decoding sequence emits per step (1 without speculative decoding)."""
        return 1.0 + sum(self.acceptance(config, repetitiveness))

    # ----- step time ----------------------------------------------------------------------------------------
    def plan(self, config: EngineConfig) -> _Plan:
        """What every step of ``config`` shares (weight, KV and activation bytes, kernel times), built once."""
        return self._plan(config)

    def cached_plans(self) -> list[EngineConfig]:
        """The configs whose plan is cached now, least recently used first (asking does not reorder them)."""
        return self._plans.keys()

    def _plan(self, config: EngineConfig) -> _Plan:
        last = self._last
        if last is not None and last[0] is config:
            return last[1]
        plan = self._plans.get(config)
        if plan is None:
            plan = self._build_plan(config)
            self._plans.put(config, plan)
        self._last = (config, plan)
        return plan

    def _build_plan(self, config: EngineConfig) -> _Plan:
        g, m, k, method = self.gpu, self.model, config.k, config.speculative_method
        tp = config.tensor_parallel_size
        cap = self.capacity(config)
        peak_bw = g.hbm_bandwidth_gbs * 1e9 * tp
        bw = peak_bw * (self.calibration.weight_gemm.bandwidth if self.calibration else HBM_EFFICIENCY)
        if m.mamba_kind == "gdn":
            state_eff = GDN_BANDWIDTH_EFFICIENCY
        else:
            state_eff = SSU_BANDWIDTH_EFFICIENCY[self._ssu_backend(config)]
        bf16 = g.dense_bf16_tflops * 1e12 * tp * GEMM_MFU
        dense_rate = self._tflops(m.weight_bytes_per_param, m.compute_dtype) * 1e12 * tp * GEMM_MFU
        expert_rate = self._tflops(m.expert_bytes_per_param, m.compute_dtype) * 1e12 * tp * GEMM_MFU
        expert_p = m.experts_per_token / m.num_experts if m.num_experts else 0.0
        gemm_s_per_token = 2e9 * (
            m.dense_params_b / dense_rate
            + m.lm_head_params_b / bf16
            + m.routed_expert_params_b * expert_p / expert_rate
        )
        kv_dtype = self._kv_dtype_bytes(config)
        engine = self.calibration.engine if self.calibration is not None else None
        if engine is not None and config.kv_cache_dtype.startswith("fp8"):
            kv_dtype = engine.fp8_kv_step_bytes  # what an fp8 element costs the engine's step (capacity stays 1 byte)
        kv_tok_target = m.kv_bytes_per_token_bf16 / 2.0 * kv_dtype
        attn_rate = g.dense_bf16_tflops * 1e12 * tp * ATTENTION_MFU
        attn_s = 4.0 * m.attention_layers * m.num_attention_heads * m.head_dim / attn_rate
        lm_head_bytes = m.lm_head_params_b * 1e9 * m.embedding_bytes_per_param

        draft_dense = draft_routed = draft_gemm = draft_kv = draft_fixed = draft_launch = draft_act = 0.0
        passes = 0
        layer_kv = kv_tok_target / max(1, m.attention_layers)
        if method == "mtp":
            mtp_dense_params = m.mtp_params_b - m.mtp_routed_params_b
            draft_dense = mtp_dense_params * 1e9 * m.mtp_weight_bytes_per_param + lm_head_bytes
            draft_routed = m.mtp_routed_params_b * 1e9 * m.mtp_weight_bytes_per_param
            draft_gemm = 2e9 * (mtp_dense_params + m.mtp_routed_params_b * expert_p + m.lm_head_params_b) / bf16
            draft_kv = layer_kv
            passes = k
            draft_launch = 4 * EAGER_LAUNCH_S_PER_LAYER  # layers of the head + lm_head + sampling
            draft_act = m.mtp_activation_mb_per_token * 1e6
        elif method in _MODEL_DRAFTERS:
            draft_dense = m.drafter_params_b * 1e9 * 2.0
            draft_gemm = 2e9 * m.drafter_params_b / bf16
            draft_kv = layer_kv
            passes = 1 if method == "dflash" else k  # DFlash drafts a whole block in one pass
            draft_launch = 4 * EAGER_LAUNCH_S_PER_LAYER
            draft_act = m.drafter_activation_mb_per_token * 1e6 * (k if method == "dflash" else 1)
        elif method == "ngram_gpu":
            draft_fixed = NGRAM_GPU_S
        split_layers = m.attention_layers + m.mamba_layers
        omp = config.omp_num_threads or 1  # vLLM sets torch threads to 1 for serving when unset
        comm_fixed = comm_tok = 0.0
        if tp > 1:
            comm_fixed = 2 * m.num_layers * ALLREDUCE_LATENCY_S
            comm_tok = 2 * m.num_layers * m.hidden_size * 2.0 * 2 * (tp - 1) / tp / (g.interconnect_gbs * 1e9)
        return _Plan(
            k=k,
            method=method,
            async_on=self.async_enabled(config),
            capacity=cap,
            bw=bw,
            state_bw=peak_bw * state_eff,
            dense_bytes=m.dense_params_b * 1e9 * m.weight_bytes_per_param + lm_head_bytes,
            routed_bytes=m.routed_expert_params_b * 1e9 * m.expert_bytes_per_param,
            expert_p=expert_p,
            gemm_s_per_token=gemm_s_per_token,
            kv_bytes_per_token=kv_tok_target,
            kv_fp8=config.kv_cache_dtype.startswith("fp8"),
            attn_s_per_query_ctx=attn_s,
            slot_bytes=self._state_slot_bytes(config),
            act_bytes_per_token=m.activation_mb_per_token * 1e6,
            draft_act_bytes_per_token=draft_act,
            draft_dense_bytes=draft_dense,
            draft_routed_bytes=draft_routed,
            draft_gemm_s_per_token=draft_gemm,
            draft_kv_bytes_per_token=draft_kv,
            draft_passes=passes,
            draft_fixed_s=draft_fixed,
            draft_launch_s=draft_launch,
            cpu_drafter_per_seq_s=CPU_DRAFTER_PER_SEQ_S.get(method, 0.0),
            omp_factor=1.0 + OMP_EXTRA_THREAD_OVERHEAD * (omp - 1),
            layers_launch_s=m.num_layers * EAGER_LAUNCH_S_PER_LAYER,
            layers_gap_s=m.num_layers * EAGER_GPU_GAP_S_PER_LAYER,
            split_layers_s=split_layers * PIECEWISE_S_PER_SPLIT_LAYER,
            tp_comm_s_per_token=comm_tok,
            tp_comm_fixed_s=comm_fixed,
            **self._calibrated_plan(config, peak_bw, tp),
        )

    def _calibrated_plan(self, config: EngineConfig, peak_bw: float, tp: int) -> dict[str, Any]:
        if self.calibration is None:
            return {}
        g, m = self.gpu, self.model
        bf16_peak = g.dense_bf16_tflops * 1e12 * tp
        dense_peak = self._tflops(m.weight_bytes_per_param, m.compute_dtype) * 1e12 * tp
        expert_peak = self._tflops(m.expert_bytes_per_param, m.compute_dtype) * 1e12 * tp
        expert_p = m.experts_per_token / m.num_experts if m.num_experts else 0.0
        if m.num_experts and m.has_mamba:
            moe_layers = max(1, m.num_layers - m.attention_layers - m.mamba_layers)
        else:
            moe_layers = m.num_layers if m.num_experts else 0
        if moe_layers or m.has_mamba:  # qkv + o, in_proj + out_proj, router + shared up + shared down
            gemm_kernels = 2 * m.attention_layers + 2 * m.mamba_layers + 3 * moe_layers + 1
        else:  # qkv, o, gate_up, down per layer, and the lm_head
            gemm_kernels = 4 * m.num_layers + 1
        backend = self._ssu_backend(config)
        factor = (
            1.0
            if m.mamba_kind != "gdn" and backend == "flashinfer"
            else SSU_BANDWIDTH_EFFICIENCY["triton"] / (SSU_BANDWIDTH_EFFICIENCY["flashinfer"])
        )
        return {
            "peak_bw": peak_bw,
            "dense_peak_s_per_token": 2e9 * (m.dense_params_b / dense_peak + m.lm_head_params_b / bf16_peak),
            "expert_peak_s_per_token": 2e9 * m.routed_expert_params_b * expert_p / expert_peak,
            "attn_peak_flop_s": 1.0 / bf16_peak,
            "attn_flops_per_work": 4.0 * m.num_attention_heads * m.head_dim,
            "gemm_kernels": gemm_kernels,
            "moe_layers": moe_layers,
            "small_kernels": self.small_kernels_per_layer * m.num_layers,
            "state_backend_factor": factor,
        }

    def step(
        self,
        config: EngineConfig,
        *,
        decode_seqs: int,
        prefill_tokens: int,
        mean_context_tokens: float,
        repetitiveness: float = 0.0,
        prefill_attention_work: float | None = None,
    ) -> StepTiming:
        """Time of one engine iteration: ``decode_seqs`` sequences decode (each verifying 1 + k tokens) next to
        ``prefill_tokens`` prompt tokens, with ``mean_context_tokens`` of context per decoding sequence.

        ``prefill_attention_work`` is the prompt chunks' (query x context) pairs, ``sum(chunk * (cached +
        chunk / 2))`` over the prefilling sequences; with ``prefill_fixes`` off, or when it is not given, the
        chunks count as one causal sequence (``prefill_tokens ** 2 / 2``)."""
        p = self._plan(config)
        tau = self.tokens_per_step(config, repetitiveness) if p.k else 1.0
        q = 1 + p.k
        dec_tokens = decode_seqs * q
        n = dec_tokens + prefill_tokens
        if n <= 0:
            return StepTiming(seconds=0.0, gpu_seconds=0.0, cpu_overhead_s=0.0, tokens_per_seq=tau, bound="overhead")
        ctx = max(0.0, mean_context_tokens)
        if prefill_attention_work is None or not self.prefill_fixes:
            prefill_attention_work = prefill_tokens * prefill_tokens / 2.0
        prefill_seqs = (1 + prefill_tokens // 2048) if prefill_tokens else 0
        if self.calibration is not None:
            gpu, mem, cmp = self._calibrated_gpu(
                p, self.calibration, decode_seqs, prefill_tokens, prefill_seqs, n, q, ctx, prefill_attention_work
            )
        else:
            gpu, mem, cmp = self._constant_gpu(
                p, decode_seqs, dec_tokens, prefill_tokens, prefill_seqs, n, ctx, prefill_attention_work
            )
        ceiling = p.capacity.cudagraph_ceiling
        # drafter
        if p.draft_passes and decode_seqs:
            d_touched = 1.0 - (1.0 - p.expert_p) ** decode_seqs if p.expert_p else 0.0
            one = max(
                (
                    p.draft_dense_bytes
                    + p.draft_routed_bytes * d_touched
                    + decode_seqs * ctx * p.draft_kv_bytes_per_token
                )
                / p.bw,
                p.draft_gemm_s_per_token * decode_seqs * (p.k if p.draft_passes == 1 else 1),
            )
            if decode_seqs > ceiling:
                one = max(one, p.draft_launch_s)
            gpu += one * p.draft_passes
        gpu += p.draft_fixed_s if decode_seqs else 0.0
        engine = self.calibration.engine if self.calibration is not None else None
        base, per_seq = (engine.cpu_step_base_s, engine.cpu_per_seq_s) if engine else (CPU_STEP_BASE_S, CPU_PER_SEQ_S)
        cpu = (
            base
            + per_seq * (decode_seqs + prefill_seqs)
            + (CPU_PER_DRAFT_TOKEN_S * p.k + p.cpu_drafter_per_seq_s) * decode_seqs
        ) * p.omp_factor
        if engine is not None and self.model.has_mamba:  # vLLM serves hybrid models on the V1 model runner only
            cpu += engine.v1_runner_host_step_s + engine.v1_runner_host_per_seq_s * (decode_seqs + prefill_seqs)
            if decode_seqs and (p.method == "mtp" or p.method in _MODEL_DRAFTERS):
                cpu += engine.model_drafter_step_s
                gpu += engine.model_drafter_pass_s * p.draft_passes
        if engine is not None and p.method in engine.v1_runner_methods:
            # the V1 model runner's drafting path: a host-side floor per step, with or without async scheduling
            cpu += engine.v1_runner_step_s + engine.v1_runner_per_seq_s * decode_seqs
            seconds = max(gpu, cpu) + ASYNC_RESIDUAL_S
            overhead_bound = cpu > gpu
        elif p.async_on:
            seconds = max(gpu, cpu) + ASYNC_RESIDUAL_S
            overhead_bound = cpu > gpu
        else:
            seconds = gpu + cpu
            overhead_bound = cpu > gpu
        bound = "overhead" if overhead_bound else ("compute" if cmp > mem else "memory")
        return StepTiming(seconds=seconds, gpu_seconds=gpu, cpu_overhead_s=cpu, tokens_per_seq=tau, bound=bound)

    def _constant_gpu(
        self,
        p: _Plan,
        decode_seqs: int,
        dec_tokens: int,
        prefill_tokens: int,
        prefill_seqs: int,
        n: int,
        ctx: float,
        prefill_work: float,
    ) -> tuple[float, float, float]:
        """GPU time of the target model's pass on the fixed efficiency constants: (gpu, memory part, compute part)."""
        q = 1 + p.k
        mem = cmp = 0.0
        # target model: weights (MoE: the experts this many tokens touch) vs GEMM compute
        touched = 1.0 - (1.0 - p.expert_p) ** n if p.expert_p else 0.0
        t_mem = (p.dense_bytes + p.routed_bytes * touched) / p.bw
        t_cmp = p.gemm_s_per_token * n
        if t_cmp > t_mem:
            cmp += t_cmp
        else:
            mem += t_mem
        # attention: read every decoding sequence's context once, write the new tokens' KV
        kv_t = (decode_seqs * ctx + n) * p.kv_bytes_per_token / p.bw
        at_t = p.attn_s_per_query_ctx * (dec_tokens * ctx + prefill_work)
        if at_t > kv_t:
            cmp += at_t
        else:
            mem += kv_t
        # activations written and read between kernels scale with the tokens in the pass
        mem += n * p.act_bytes_per_token / p.bw
        # Mamba state: read one slot, write one per verified position (decode); read + write per prefill sequence
        mem += p.slot_bytes * (decode_seqs * (1 + q) + 2 * prefill_seqs) / p.state_bw
        gpu = mem + cmp + p.tp_comm_fixed_s + p.tp_comm_s_per_token * n
        # CUDA graphs: FULL for pure decode within the ceiling, piecewise for mixed batches, eager above it
        ceiling = p.capacity.cudagraph_ceiling
        if n > ceiling:  # the CPU launches every kernel: the GPU waits for it or idles between kernels
            gpu = max(gpu + p.layers_gap_s, p.layers_launch_s)
        elif prefill_tokens:
            gpu += p.split_layers_s
        return gpu, mem, cmp

    def _calibrated_gpu(
        self,
        p: _Plan,
        cal: Calibration,
        decode_seqs: int,
        prefill_tokens: int,
        prefill_seqs: int,
        n: int,
        q: int,
        ctx: float,
        prefill_work: float,
    ) -> tuple[float, float, float]:
        """GPU time of the target model's pass on the measured efficiency curves (docs/simulator.md,
        "Calibration"): (gpu, memory part, compute part)."""
        m = self.model
        peak_bw = p.peak_bw
        w = cal.weight_gemm
        t_wmem = p.dense_bytes / (peak_bw * w.bandwidth)
        t_wcmp = p.dense_peak_s_per_token * n / w.mfu.at(n)
        fixed = p.gemm_kernels * w.fixed_s
        if cal.gemm_chain is not None:  # a layer's GEMMs back to back, against the sum of their curves
            chain = cal.gemm_chain.efficiency.at(n)
            t_wmem, t_wcmp, fixed = t_wmem / chain, t_wcmp / chain, fixed / chain
        mem, cmp = (t_wmem, 0.0) if t_wmem >= t_wcmp else (0.0, t_wcmp)
        if p.expert_p:
            touched = 1.0 - (1.0 - p.expert_p) ** n
            e_mem = p.routed_bytes * touched / peak_bw
            e_cmp = p.expert_peak_s_per_token * n
            eff = cal.moe_gemm.efficiency.at(n) if cal.moe_gemm else HBM_EFFICIENCY
            if e_mem >= e_cmp:
                mem += e_mem / eff
            else:
                cmp += e_cmp / eff
            fixed += 2 * p.moe_layers * w.fixed_s
        if decode_seqs:
            att = cal.decode_attention
            read = decode_seqs * ctx * p.kv_bytes_per_token / (peak_bw * att.efficiency(decode_seqs, q))
            mem += read * (cal.engine.decode_attention_scale if cal.engine is not None else 1.0)
            fixed += m.attention_layers * att.fixed_s
        if prefill_tokens and m.attention_layers:
            cmp += self._calibrated_prefill_attention(p, cal, prefill_tokens, prefill_work)
        # activations and the new tokens' KV: written and read once, at the bandwidth a layer's small kernels
        # reached together (or the copy ceiling); each small kernel at its measured time for this many tokens
        ops = cal.layer_ops
        act_bw = ops.bandwidth if ops is not None else cal.activation_bandwidth
        kernel_s = cal.overhead.graph_kernel_s / (ops.kernel_efficiency.at(n) if ops is not None else 1.0)
        mem += n * (p.act_bytes_per_token + p.kv_bytes_per_token) / (peak_bw * act_bw)
        if p.slot_bytes:
            seqs = decode_seqs + prefill_seqs
            eff = cal.state.efficiency.at(max(1, seqs)) if cal.state else SSU_BANDWIDTH_EFFICIENCY["flashinfer"]
            mem += p.slot_bytes * (decode_seqs * (1 + q) + 2 * prefill_seqs) / (peak_bw * eff * p.state_backend_factor)
        small = p.small_kernels * kernel_s
        if cal.engine is not None and prefill_tokens:  # the engine's compute-bound prefill against the probe's
            cmp *= cal.engine.prefill_compute_scale
        if cal.engine is not None and p.kv_fp8:  # the fp8 cache's per-sequence cost in the step (scales, casts)
            fixed += cal.engine.fp8_kv_per_seq_s * decode_seqs
        gpu = mem + cmp + fixed + small + p.tp_comm_fixed_s + p.tp_comm_s_per_token * n
        kernels = p.gemm_kernels + p.small_kernels + m.attention_layers + 2 * p.moe_layers
        if n > p.capacity.cudagraph_ceiling:  # eager: the CPU launches every kernel
            gpu = max(gpu, kernels * cal.overhead.eager_kernel_s)
        elif prefill_tokens:  # piecewise graphs: attention and Mamba layers run eagerly between graph pieces
            gpu += (m.attention_layers + m.mamba_layers) * (cal.overhead.eager_kernel_s - cal.overhead.graph_kernel_s)
        return gpu, mem, cmp

    def _calibrated_prefill_attention(self, p: _Plan, cal: Calibration, prefill_tokens: int, work: float) -> float:
        """Compute time of the prompt chunks' attention on the measured curve (fresh or on a cached prefix)."""
        flops = p.attn_flops_per_work * work  # per layer
        on_cache = work > prefill_tokens * prefill_tokens / 2.0 + 1.0
        curve = cal.prefill_attention.cached if on_cache else cal.prefill_attention.fresh
        attention = self.model.attention_layers * flops * p.attn_peak_flop_s / curve.at(flops)
        if cal.engine is not None and p.kv_fp8:  # prefill attention on the fp8 cache
            attention *= cal.engine.fp8_kv_prefill_attention_scale
        return attention

    # ----- bounds -------------------------------------------------------------------------------------------
    def single_stream_bound_tokens_per_s(self, config: EngineConfig) -> float:
        """Bandwidth bound for one stream: peak HBM bandwidth over the weight bytes read per emitted token.

        One step of one sequence reads the dense weights, the experts its ``1 + k`` tokens touch and the drafter's
        weights; it emits at most ``1 + sum(acceptance)`` tokens at the best acceptance the method reaches
        (fully repetitive text). No configuration decodes a single stream faster than this.
        """
        p = self._plan(config)
        q = 1 + p.k
        touched = 1.0 - (1.0 - p.expert_p) ** q if p.expert_p else 0.0
        d_touched = p.expert_p
        step_bytes = p.dense_bytes + p.routed_bytes * touched
        step_bytes += p.draft_passes * (p.draft_dense_bytes + p.draft_routed_bytes * d_touched)
        peak_bw = self.gpu.hbm_bandwidth_gbs * 1e9 * config.tensor_parallel_size
        tau = self.tokens_per_step(config, 1.0) if p.k else 1.0
        return peak_bw * tau / step_bytes

    # ----- steady state -------------------------------------------------------------------------------------
    def estimate(self, config: EngineConfig, shape: TrafficShape) -> PerfEstimate:
        """Steady state of one replica under ``shape`` (see docs/simulator.md for the fluid model)."""
        reason = self.feasibility(config)
        if reason is not None:
            return self._infeasible(reason)
        p = self._plan(config)
        cap = p.capacity
        r = shape.repetitiveness
        tau = self.tokens_per_step(config, r) if p.k else 1.0
        prompt_mean, p50_in, p95_in, p99_in = _lognormal_quantiles(shape.prompt_tokens)
        out_mean, p50_out, p95_out, p99_out = _lognormal_quantiles(shape.output_tokens)
        prefix_cached = (config.enable_prefix_caching is not False) and shape.prefix_share > 0
        p_comp = max(1.0, prompt_mean * (1.0 - shape.prefix_share) if prefix_cached else prompt_mean)
        mean_ctx = prompt_mean + out_mean / 2.0
        per_seq_mean = cap.state_bytes_per_seq + mean_ctx * cap.kv_bytes_per_token
        per_seq_final = cap.state_bytes_per_seq + (prompt_mean + out_mean) * cap.kv_bytes_per_token
        kv_cap_mean = cap.cache_pool_bytes / per_seq_mean if per_seq_mean else float(cap.max_num_seqs)
        kv_cap_final = cap.cache_pool_bytes / per_seq_final if per_seq_final else float(cap.max_num_seqs)
        limit = min(float(cap.max_num_seqs), math.floor(kv_cap_mean))
        if limit < 1:
            return self._infeasible(
                f"the cache pool ({cap.cache_pool_bytes / GIB:.2f} GiB) holds no request of this shape "
                f"({per_seq_mean / GIB:.2f} GiB each)"
            )

        def run(running: float) -> dict[str, float]:
            return self._steady(config, p, running, tau, p_comp, prompt_mean, out_mean, mean_ctx, kv_cap_final, r)

        st, running, waiting, lam, queue_wait = _operating_point(shape, run, limit)
        t_step, t_pref = st["t"], st["t_prefill"]
        tpot_mean = t_step / tau
        if self.prefill_fixes and running > 0:
            # a request's own prefill steps come before its first token and are not in its TPOT: it sees only the
            # other running requests' prompt chunks
            f_seen = st["f"] * max(0.0, running - 1.0) / running
            tpot_mean = (f_seen * t_pref + (1.0 - f_seen) * st["t_decode"]) / tau
        budget = st["budget"]

        extra_per_prefill_token = max(0.0, t_pref - st["t_decode"]) / st["chunk"]

        def prefill_time(tokens: float) -> float:
            """Chunks of up to ``budget`` tokens, each a decode step plus its share of prefill work."""
            comp = max(1.0, tokens * p_comp / prompt_mean)
            return math.ceil(comp / budget) * st["t_decode"] + comp * extra_per_prefill_token + t_step / 2.0

        wait_cv = 1.0 / math.sqrt(waiting + 1.0)
        waits = [max(0.0, queue_wait * (1 + z * wait_cv)) for z in (0.0, _Z95, _Z99)]
        ttft = [w + prefill_time(x) for w, x in zip(waits, (p50_in, p95_in, p99_in), strict=True)]
        n_steps = max(1.0, out_mean / tau)
        cv_tpot = math.sqrt(st["cv_step"] ** 2 + st["cv_tau"] ** 2) / math.sqrt(n_steps)
        tpot = _lognormal_pcts(tpot_mean, max(TPOT_CV_FLOOR, cv_tpot))
        e2e = [t + max(0.0, o - 1.0) * tpot_mean for t, o in zip(ttft, (p50_out, p95_out, p99_out), strict=True)]
        spec = None
        if p.k:
            acc = self.acceptance(config, r)
            spec = SpecDecodeStats(
                acceptance_rate=sum(acc) / p.k, mean_acceptance_length=1.0 + sum(acc), per_position=acc
            )
        return PerfEstimate(
            feasible=True,
            reason="",
            output_tokens_per_s=lam * out_mean,
            request_throughput=lam,
            ttft_s=Percentiles(p50=ttft[0], p95=max(ttft[0], ttft[1]), p99=max(ttft[0], ttft[1], ttft[2])),
            tpot_s=tpot,
            e2e_s=Percentiles(p50=e2e[0], p95=max(e2e[0], e2e[1]), p99=max(e2e[0], e2e[1], e2e[2])),
            running=running,
            waiting=waiting,
            kv_usage=min(1.0, running * per_seq_mean / cap.cache_pool_bytes) if cap.cache_pool_bytes else 0.0,
            preemptions_per_s=lam * st["preempt_frac"],
            spec=spec,
        )

    def _steady(
        self,
        config: EngineConfig,
        p: _Plan,
        running: float,
        tau: float,
        p_comp: float,
        prompt: float,
        out: float,
        mean_ctx: float,
        kv_cap_final: float,
        r: float,
    ) -> dict[str, float]:
        """Fluid steady state with ``running`` requests admitted: step times, throughput, preemption share."""
        q = 1 + p.k
        budget = max(1.0, p.capacity.max_num_batched_tokens - running * q)
        chunk = min(p_comp, budget)
        preempt_frac = max(0.0, (running - kv_cap_final) / running) if running > kv_cap_final else 0.0
        # a preempted request recomputes its prompt and half its output (vLLM recompute preemption)
        prefill_per_req = p_comp + preempt_frac * (prompt + out / 2.0)
        decode_steps = out / tau
        prefill_steps = math.ceil(prefill_per_req / budget)
        decoding = running * decode_steps / (decode_steps + prefill_steps) if running > 0 else 0.0
        t = t_dec = t_pref = 0.0
        f = 0.0
        # (query x context) pairs of one prompt chunk: it attends to the cached prefix and, on average, to half
        # of the request's earlier chunks
        cached = max(0.0, prompt - p_comp) + max(0.0, p_comp - chunk) / 2.0
        chunk_work = round(chunk) * (cached + round(chunk) / 2.0) if self.prefill_fixes else None
        for _ in range(3):  # prefill load and decode rate depend on each other; converges in a few rounds
            dec_i = max(1, round(decoding)) if decoding > 0 else 0
            s0 = self.step(config, decode_seqs=dec_i, prefill_tokens=0, mean_context_tokens=mean_ctx, repetitiveness=r)
            s1 = self.step(
                config,
                decode_seqs=dec_i,
                prefill_tokens=round(chunk),
                mean_context_tokens=mean_ctx,
                repetitiveness=r,
                prefill_attention_work=chunk_work,
            )
            t_dec, t_pref = s0.seconds, s1.seconds
            completions_per_step = decoding * tau / out
            f = min(1.0, completions_per_step * prefill_per_req / chunk)
            if f >= 1.0 and decoding > 0:  # prefill-bound: only as many requests decode as prefill can feed
                decoding = min(decoding, chunk * out / (prefill_per_req * tau))
            t = f * t_pref + (1 - f) * t_dec
        if decoding <= 0 or t <= 0:
            return {
                "lam": 0.0,
                "t": t_dec or 1e-3,
                "t_prefill": t_pref or 1e-3,
                "t_decode": t_dec or 1e-3,
                "chunk": chunk,
                "budget": budget,
                "cv_step": 0.0,
                "cv_tau": 0.0,
                "preempt_frac": 0.0,
                "f": 0.0,
            }
        lam = decoding * tau / (out * t)
        var_step = f * (1 - f) * (t_pref - t_dec) ** 2
        acc = self.acceptance(config, r)
        # accepted length L: P(L >= i) = acc[i-1]; E[L^2] = sum (2i - 1) P(L >= i)
        e_l = sum(acc)
        e_l2 = sum((2 * i + 1) * a for i, a in enumerate(acc))
        return {
            "lam": lam,
            "t": t,
            "t_prefill": t_pref,
            "t_decode": t_dec,
            "chunk": chunk,
            "budget": budget,
            "cv_step": math.sqrt(var_step) / t,
            "cv_tau": math.sqrt(max(0.0, e_l2 - e_l * e_l)) / tau,
            "preempt_frac": preempt_frac,
            "f": f,
        }

    @staticmethod
    def _infeasible(reason: str) -> PerfEstimate:
        z = _zero_pcts()
        return PerfEstimate(
            feasible=False,
            reason=reason,
            output_tokens_per_s=0.0,
            request_throughput=0.0,
            ttft_s=z,
            tpot_s=z,
            e2e_s=z,
            running=0.0,
            waiting=0.0,
            kv_usage=0.0,
            preemptions_per_s=0.0,
            spec=None,
        )


def _operating_point(
    shape: TrafficShape, run: Callable[[float], dict[str, float]], limit: float
) -> tuple[dict[str, float], float, float, float, float]:
    """Where a replica settles under ``shape`` (``run``: the fluid steady state with that many requests running):
    the steady state, requests running and waiting, the completion rate and the queue wait. A closed loop runs its
    streams up to ``limit``; an open one runs as many as its arrival rate needs (bisected), or ``limit`` with a
    growing queue when the rate is beyond the replica."""
    if shape.concurrency > 0:
        n_sys = shape.concurrency
        running = min(n_sys, limit)
        st = run(running)
        waiting = n_sys - running
        lam = st["lam"]
        return st, running, waiting, lam, waiting / lam if lam > 0 else 0.0
    if shape.arrival_rate_rps > 0:
        rate = shape.arrival_rate_rps
        top = run(limit)
        if rate >= top["lam"]:
            lam = top["lam"]
            waiting = (rate - lam) * OVERLOAD_HORIZON_S
            return top, limit, waiting, lam, waiting / lam if lam > 0 else OVERLOAD_HORIZON_S
        lo, hi = 0.0, limit
        for _ in range(50):
            mid = (lo + hi) / 2
            if run(mid)["lam"] < rate:
                lo = mid
            else:
                hi = mid
        return run(hi), hi, 0.0, rate, 0.0
    # no traffic: what a lone request would see, zero throughput
    return run(1.0), 0.0, 0.0, 0.0, 0.0


# ----- the field-note table -------------------------------------------------------------------------------------
#: Field note 1's changes, applied one after the other to stock vLLM.
FIELD_NOTE_STEPS: tuple[tuple[str, EngineConfig], ...] = (
    ("stock", EngineConfig()),
    (
        "1. MTP3 + OMP_NUM_THREADS=1",
        EngineConfig(speculative_method="mtp", num_speculative_tokens=3, omp_num_threads=1),
    ),
    (
        "2. + async scheduling",
        EngineConfig(speculative_method="mtp", num_speculative_tokens=3, omp_num_threads=1, async_scheduling=True),
    ),
    (
        "3. + FlashInfer SSU",
        EngineConfig(
            speculative_method="mtp",
            num_speculative_tokens=3,
            omp_num_threads=1,
            async_scheduling=True,
            mamba_backend="flashinfer",
        ),
    ),
    (
        "4. MTP1 instead of MTP3",
        EngineConfig(
            speculative_method="mtp",
            num_speculative_tokens=1,
            omp_num_threads=1,
            async_scheduling=True,
            mamba_backend="flashinfer",
        ),
    ),
    (
        "5. + FP16 state, stochastic rounding",
        EngineConfig(
            speculative_method="mtp",
            num_speculative_tokens=1,
            omp_num_threads=1,
            async_scheduling=True,
            mamba_backend="flashinfer",
            mamba_ssm_cache_dtype="float16",
            mamba_cache_stochastic_rounding=True,
        ),
    ),
)


@functools.lru_cache(maxsize=MAX_SHARED_MODELS)
def _shared_model(model: str, gpu: str) -> PerformanceModel:
    return PerformanceModel.named(model, gpu)


def workstation_shape(concurrency: float = 256) -> TrafficShape:
    """Field note 1's workload: 512 prompt tokens, 512 output tokens, ``concurrency`` streams."""
    return TrafficShape(
        arrival_rate_rps=0.0,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=512),
        output_tokens=LengthDistribution(mean=512),
    )


def field_note_knob_space() -> list[EngineConfig]:
    """Every combination of the knobs field note 1 changed (MTP k, async, SSU backend, FP16 state + SR)."""
    out: list[EngineConfig] = []
    for k in (0, 1, 2, 3):
        for async_s in (None, True, False):
            for backend in (None, "flashinfer"):
                for fp16 in (False, True):
                    out.append(
                        EngineConfig(
                            speculative_method="mtp" if k else "none",
                            num_speculative_tokens=k,
                            async_scheduling=async_s,
                            mamba_backend=backend,
                            mamba_ssm_cache_dtype="float16" if fp16 else "auto",
                            mamba_cache_stochastic_rounding=fp16,
                        )
                    )
    return out


def main() -> None:
    """Print the field-note table for the 512/512/256 workstation case."""
    pm = PerformanceModel.named("nemotron-3-super-fp8", "gb300-dgx-station")
    shape = workstation_shape(256)
    stock = pm.estimate(EngineConfig(), shape).output_tokens_per_s
    print(f"{pm.model.name} on {pm.gpu.name}, 512 in / 512 out, 256 concurrent streams")
    print(f"{'step':<40} {'tok/s':>9} {'x stock':>8} {'TPOT p50':>9} {'TTFT p95':>9}  config")
    for label, cfg in FIELD_NOTE_STEPS:
        est = pm.estimate(cfg, shape)
        print(
            f"{label:<40} {est.output_tokens_per_s:>9,.0f} {est.output_tokens_per_s / stock:>7.2f}x "
            f"{est.tpot_s.p50 * 1000:>7.1f}ms {est.ttft_s.p95 * 1000:>7.0f}ms  {cfg.label()}"
        )
    best = max(field_note_knob_space(), key=lambda c: pm.estimate(c, shape).output_tokens_per_s)
    b = pm.estimate(best, shape).output_tokens_per_s
    print(f"{'best over the field-note knobs':<40} {b:>9,.0f} {b / stock:>7.2f}x {'':>9} {'':>9}  {best.label()}")


if __name__ == "__main__":
    main()
