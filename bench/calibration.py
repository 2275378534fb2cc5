"""What the H200 calibration is worth: the model's step-time error against measured decode steps, before and after.

Measurements: ``controller/simulator/profiles/calibration/h200-raw.json``, one run of ``shiftlight calibrate``'s
GPU probe on an H200 (docs/simulator.md, "Calibration"). Its end-to-end points are CUDA-graphed decode steps of an
8B-shaped layer stack (Llama 3.1 8B shapes, random bf16 weights, PyTorch kernels) at B = 1, 16, 64, 256 sequences,
q = 1, 2, 4 tokens per sequence and contexts of 1k and 4k tokens. None of them is used by the fit.

Sections:

1. held-out primitives: the fit on half of the primitive points, its error on the other half, per kernel family;
2. end-to-end: the model's GPU step time against each measured step, uncalibrated (fixed constants), calibrated
   (the committed profile) and calibrated on half the primitives;
3. the prefill measurements (a chunk against a cached context; several sequences in one step) against the old
   and the fixed prefill-attention term, and the single-stream TPOT defect before and after the fix;
4. search efficiency with the calibrated model as the prior, against an objective built from the measured
   steps (goodput of each measured (B, q) at a TPOT bound), not from the model; the search loop, its noise and
   its trace are ``bench/search_efficiency.py``'s own.

The stack's PyTorch forward pass is not vLLM's: besides its GEMMs and the attention kernel it runs 22 small
kernels per layer (24 when a sequence verifies more than one token) where vLLM fuses to about 6, and moves 20.6
MB (21.6 MB) of activations per token where the Llama profile says 9.4. Both are counted from the probe's code,
the same way the probe's layer-op primitive counts them (:func:`stack_kernels_per_layer`, :func:`stack_profile`);
the model is given those two numbers for each query length (:class:`StackModel`) and nothing else.

Run: ``.venv/bin/python -m bench.calibration``. Ends with one line::

    calibration: step-time error median X%, worst Y% (uncalibrated median A%, worst B%) over N points
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from bench.common import NOISE, PRIORS_MIS, RAW, e2e_points, measured_trial, model_search, trace
from controller.calibrate.fit import (
    errors_by_family,
    fit_calibration,
    split_half,
)
from controller.calibrate.gpu_probe_layer import layer_ops_bytes_per_token, layer_ops_kernels
from controller.calibrate.profile import Calibration, load_calibration
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import TrialResult
from controller.simulator.perf import ATTENTION_MFU, PerformanceModel, StepTiming
from controller.simulator.profiles import GpuProfile, ModelProfile, load_gpu, load_model

MAX_TRIALS = 12


def stack_kernels_per_layer(query: int) -> float:
    """Small kernels per layer of the probe's stack (its layer-op primitive counts the same code): two unfused
    RMSNorms (8 each), two KV-cache writes, two residual adds, SiLU and the gate product, and two layout copies
    around attention when a sequence verifies more than one token. The attention kernel is the attention
    family's own (its fixed time per layer)."""
    return float(layer_ops_kernels(query))


def stack_profile(model: ModelProfile, query: int = 1) -> ModelProfile:
    """The Llama profile with the probe stack's own activation traffic (bytes per token, from its code): the
    layer ops as the probe counts them, the GEMMs' inputs and outputs, and the logits."""
    h = model.hidden_size
    inter = 14336
    qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim
    ops = layer_ops_bytes_per_token(h, inter, model.num_attention_heads, model.num_kv_heads, model.head_dim, query)
    gemm_io = (2 * h + 2 * qkv) + (2 * h + 2 * h) + (2 * h + 4 * inter) + (2 * inter + 2 * h)
    total = (ops + gemm_io) * model.num_layers + 2 * model.vocab_size
    return dataclasses.replace(model, activation_mb_per_token=total / 1e6)


#: One number for every query length (the count at q = 1), for a single model over all steps; :class:`StackModel`
#: takes the count for each query length.
STACK_SMALL_KERNELS_PER_LAYER = stack_kernels_per_layer(1)


class StackModel:
    """The performance model given the stack's own numbers for each query length (``1 + k`` of the config)."""

    def __init__(self, gpu: GpuProfile, calibration: Calibration | None) -> None:
        self._gpu, self._cal = gpu, calibration
        self._base = load_model("llama-3.1-8b")
        self._by_q: dict[int, PerformanceModel] = {}

    def _model(self, q: int) -> PerformanceModel:
        if q not in self._by_q:
            stack = stack_profile(self._base, q)
            if self._cal is None:
                self._by_q[q] = PerformanceModel(stack, self._gpu, None, prefill_fixes=False)
            else:
                self._by_q[q] = PerformanceModel(
                    stack, self._gpu, self._cal, small_kernels_per_layer=stack_kernels_per_layer(q)
                )
        return self._by_q[q]

    def step(self, config: EngineConfig, **kwargs: Any) -> StepTiming:
        return self._model(1 + config.k).step(config, **kwargs)

    def tokens_per_step(self, config: EngineConfig, repetitiveness: float) -> float:
        return self._model(1 + config.k).tokens_per_step(config, repetitiveness)


def decode_config(q: int) -> EngineConfig:
    """A config whose decode step verifies ``q`` tokens per sequence, inside one captured graph."""
    return EngineConfig(
        speculative_method="ngram" if q > 1 else "none",
        num_speculative_tokens=q - 1,
        max_cudagraph_capture_size=4096,
        max_num_batched_tokens=8192,
    )


def predict(pm: StackModel, p: dict[str, Any]) -> float:
    st = pm.step(decode_config(p["query"]), decode_seqs=p["batch"], prefill_tokens=0, mean_context_tokens=p["context"])
    return st.gpu_seconds


def _stats(errs: Sequence[float]) -> tuple[float, float]:
    a = [abs(e) for e in errs]
    return statistics.median(a), max(a)


def section_primitives(raw: dict[str, Any], gpu: GpuProfile) -> None:
    fit_pts, held = split_half(raw["points"])
    cal = fit_calibration(raw, gpu, points=fit_pts)
    print("1. primitives: fit on half the points, error on the other half")
    print(f"   {'family':15s} {'points':>6s} {'median':>7s} {'worst':>7s}")
    for fam, errs in sorted(errors_by_family(cal, held, gpu).items()):
        med, worst = _stats(errs)
        print(f"   {fam:15s} {len(errs):6d} {med:7.1%} {worst:7.1%}")


def section_e2e(raw: dict[str, Any], gpu: GpuProfile, cal: Calibration) -> tuple[list[float], list[float], list[float]]:
    half = fit_calibration(raw, gpu, points=split_half(raw["points"])[0])
    models = {
        "uncalibrated": StackModel(gpu, None),
        "calibrated": StackModel(gpu, cal),
        "half-fit": StackModel(gpu, half),
    }
    errs: dict[str, list[float]] = {k: [] for k in models}
    print("\n2. end-to-end decode steps (8B-shaped stack, CUDA graph), GPU time in ms")
    print(f"   {'B':>4s} {'q':>2s} {'ctx':>5s} {'measured':>9s} " + " ".join(f"{k:>20s}" for k in models))
    for p in e2e_points(raw):
        t = p["seconds"]
        cells = []
        for name, pm in models.items():
            pred = predict(pm, p)
            errs[name].append(pred / t - 1.0)
            cells.append(f"{pred * 1e3:10.2f} ({pred / t - 1.0:+6.1%})")
        print(f"   {p['batch']:4d} {p['query']:2d} {p['context']:5d} {t * 1e3:9.2f} " + " ".join(cells))
    for name, e in errs.items():
        med, worst = _stats(e)
        bias = statistics.fmean(e)
        print(f"   {name:13s} median {med:6.1%} worst {worst:6.1%} mean signed {bias:+6.1%}")
    return errs["calibrated"], errs["uncalibrated"], errs["half-fit"]


def section_prefill(raw: dict[str, Any], gpu: GpuProfile, cal: Calibration) -> None:
    """Prefill attention per layer: measured vs the old term (chunk^2 / 2 at ATTENTION_MFU) and the new one."""
    heads, hd = 32, 128
    peak = gpu.dense_bf16_tflops * 1e12
    print("\n3. prefill attention per layer (32 heads x 128), measured vs model (new term: the fitted curves)")
    print(f"   {'case':34s} {'measured':>9s} {'old term':>9s} {'new term':>9s}")
    cal_pa = cal.prefill_attention
    for p in raw["points"]:
        if p["family"] == "prefill_chunk":
            c, cached = p["chunk"], p["cached"]
            old_work, new_work = c * c / 2.0, c * (cached + c / 2.0)
            label = f"chunk {c} on {cached} cached"
        elif p["family"] == "prefill_multi":
            s, tokens = p["sequences"], p["tokens"]
            old_work, new_work = tokens * tokens / 2.0, s * (tokens / s) ** 2 / 2.0
            label = f"{s} sequences x {tokens // s} tokens"
        else:
            continue
        old = 4 * heads * hd * old_work / (peak * ATTENTION_MFU)
        flops = 4 * heads * hd * new_work
        curve = cal_pa.cached if p.get("cached", 0) > 0 else cal_pa.fresh
        new = flops / (peak * curve.at(flops))
        print(f"   {label:34s} {p['seconds'] * 1e6:8.0f}us {old * 1e6:8.0f}us {new * 1e6:8.0f}us")
    cfg = EngineConfig(speculative_method="ngram", num_speculative_tokens=7)
    shape = TrafficShape(
        arrival_rate_rps=0.0,
        concurrency=1,
        prompt_tokens=LengthDistribution(mean=25000),
        output_tokens=LengthDistribution(mean=400),
        repetitiveness=0.9,
    )
    print("   single stream, qwen3.6-27b-int4 on rtx-3090, 25k prompt, 400 out, repetitiveness 0.9, ngram k=7:")
    for fixes in (False, True):
        pm = PerformanceModel(load_model("qwen3.6-27b-int4"), load_gpu("rtx-3090"), None, prefill_fixes=fixes)
        st = pm.step(cfg, decode_seqs=1, prefill_tokens=0, mean_context_tokens=25200, repetitiveness=0.9)
        est = pm.estimate(cfg, shape)
        print(
            f"   prefill fixes {'on ' if fixes else 'off'}: step {st.seconds * 1e3:.1f} ms x {st.tokens_per_seq:.2f} "
            f"tokens = {st.seconds / st.tokens_per_seq * 1e3:.1f} ms/token; estimate TPOT p50 "
            f"{est.tpot_s.p50 * 1e3:.1f} ms, TTFT p50 {est.ttft_s.p50:.1f} s"
        )


# ----- search efficiency against measured steps ------------------------------------------------------------------
def measured_goodput(step_s: float, batch: int, tau: float, tpot_bound: float) -> float:
    """Output tokens/s of ``batch`` sequences at this step time, 0 when a token takes longer than the bound."""
    return batch * tau / step_s if step_s / tau <= tpot_bound else 0.0


class MeasuredSurface:
    """The search bench's surface interface (``true``, ``trial``) over goodput computed from measured steps."""

    def __init__(self, truth: Callable[[EngineConfig], float], bound_s: float) -> None:
        self._truth = truth
        self.shape = TrafficShape(
            arrival_rate_rps=0.0,
            concurrency=1,
            prompt_tokens=LengthDistribution(mean=1),
            output_tokens=LengthDistribution(mean=1),
        )
        self.slo = SLO(tpot_seconds=min(bound_s, 60.0))

    def true(self, cfg: EngineConfig) -> float:
        return self._truth(cfg)

    def trial(self, cfg: EngineConfig, rng: random.Random) -> TrialResult:
        return measured_trial(cfg, self.shape, self.slo, max(0.0, self.true(cfg) * (1 + rng.gauss(0, NOISE))))


def search_hits(
    key: str,
    cands: list[EngineConfig],
    surface: MeasuredSurface,
    prior: Callable[[EngineConfig], float] | None,
    seed: int,
) -> int | None:
    """Trials until the incumbent is within 3% of the optimum: the search bench's own GP-EI loop and trace."""
    PRIORS_MIS[key] = prior or (lambda cfg: 0.0)
    run = model_search("gp", "mis" if prior is not None else "none")
    case = SimpleNamespace(profile=key, shape_name="")
    trials = run(case, surface, cands, seed, MAX_TRIALS)  # type: ignore[arg-type]
    hit, _ = trace(trials, surface, max(surface.true(c) for c in cands))  # type: ignore[arg-type]
    return hit


def section_search(raw: dict[str, Any], gpu: GpuProfile, cal: Calibration, seeds: int = 8) -> None:
    measured = {(p["batch"], p["query"], p["context"]): p["seconds"] for p in e2e_points(raw)}
    pm_unc = StackModel(gpu, None)
    pm_cal = StackModel(gpu, cal)
    batches = sorted({b for b, _, _ in measured})
    queries = sorted({q for _, q, _ in measured})
    hits: dict[str, list[float]] = {"calibrated prior": [], "uncalibrated prior": [], "no prior": []}
    cases = 0
    for ctx in sorted({c for _, _, c in measured}):
        for rep in (0.0, 0.6, 0.9):
            for bound_ms in (8.0, 12.0, 1000.0):
                cands = [
                    EngineConfig(
                        max_num_seqs=b,
                        speculative_method="ngram" if q > 1 else "none",
                        num_speculative_tokens=q - 1,
                        max_cudagraph_capture_size=4096,
                        max_num_batched_tokens=8192,
                    )
                    for b in batches
                    for q in queries
                ]

                def tau(cfg: EngineConfig, rep: float = rep) -> float:
                    return pm_unc.tokens_per_step(cfg, rep)

                def truth(cfg: EngineConfig, ctx: int = ctx, bound: float = bound_ms / 1e3) -> float:
                    t = measured[(cfg.max_num_seqs or 1, 1 + cfg.k, ctx)]
                    return measured_goodput(t, cfg.max_num_seqs or 1, tau(cfg), bound)

                if max(truth(c) for c in cands) <= 0:
                    continue
                cases += 1
                surface = MeasuredSurface(truth, bound_ms / 1e3)

                def model_prior(pm: StackModel, ctx: int = ctx, bound: float = bound_ms / 1e3) -> Any:
                    def fn(cfg: EngineConfig) -> float:
                        b = cfg.max_num_seqs or 1
                        st = pm.step(decode_config(1 + cfg.k), decode_seqs=b, prefill_tokens=0, mean_context_tokens=ctx)
                        return measured_goodput(st.gpu_seconds, b, tau(cfg), bound)

                    return fn

                for name, prior in (
                    ("calibrated prior", model_prior(pm_cal)),
                    ("uncalibrated prior", model_prior(pm_unc)),
                    ("no prior", None),
                ):
                    for seed in range(seeds):
                        hit = search_hits(f"{ctx}/{rep}/{bound_ms}/{name}", cands, surface, prior, seed)
                        hits[name].append(float(hit) if hit is not None else math.inf)
    print(
        f"\n4. search over (B x q) against measured steps: {cases} cases (context x repetitiveness x TPOT bound), "
        f"{seeds} seeds, {len(batches) * len(queries)} configs each; trials to reach 3% of the measured optimum"
    )
    for name, h in hits.items():
        h = sorted(h)
        fmt = [f">{MAX_TRIALS}" if math.isinf(x) else f"{x:g}" for x in (statistics.median(h), h[-1])]
        print(f"   {name:20s} median {fmt[0]:>4s} worst {fmt[1]:>4s}")


def main() -> int:
    raw = json.loads(RAW.read_text())
    gpu = load_gpu("h200")
    cal = load_calibration("h200")
    if cal is None:
        print("no calibration profile for h200", file=sys.stderr)
        return 1
    print(
        f"measured on {cal.measured_on.device} ({cal.measured_on.date}, torch {cal.measured_on.torch}, "
        f"driver {cal.measured_on.driver}); probe {cal.measured_on.probe_seconds:.0f} s"
    )
    print(
        f"ceilings: copy {cal.ceilings.copy_gbs:.0f} GB/s (read + write), read {cal.ceilings.read_gbs:.0f} GB/s, "
        f"bf16 GEMM {cal.ceilings.gemm_tflops:.0f} TFLOP/s\n"
    )
    section_primitives(raw, gpu)
    cal_e, unc_e, half_e = section_e2e(raw, gpu, cal)
    section_prefill(raw, gpu, cal)
    section_search(raw, gpu, cal)
    med, worst = _stats(cal_e)
    umed, uworst = _stats(unc_e)
    hmed, hworst = _stats(half_e)
    print(f"\nhalf-fit (primitives fitted on half their points): median {hmed:.1%}, worst {hworst:.1%}")
    print(
        f"calibration: step-time error median {med:.1%}, worst {worst:.1%} "
        f"(uncalibrated median {umed:.1%}, worst {uworst:.1%}) over {len(cal_e)} points"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
