"""Benchmark: the performance model against vLLM 0.26.0 measured on the H200 (no GPU needed).

The reference is the committed engine measurements in
``controller/simulator/profiles/calibration/engine-h200/run*/results.jsonl`` (``scripts/gpu/measure.py``: one
server per config, a warm-up run, then two measured ``vllm bench serve`` runs of 4 x concurrency requests; the
engine's figure for a point is the median of its measured runs, and the spread between them is printed).

**What the model predicts for a bench run.** The runs are closed loops of fixed lengths (``--random-range-ratio
0``, ``--ignore-eos``): the first C requests start together and, all being the same length, finish together, so
the run is a train of synchronized waves. One wave: the C prompts prefill in ``ceil(C x I / max_num_batched_tokens)``
chunked steps, then ``O - 1`` decode steps of C sequences at a mean context of ``I + O / 2``. Its step times
are the performance model's (:meth:`PerformanceModel.step`); throughput is ``C x O`` over the wave's time. (The
model's own fluid steady state, :meth:`PerformanceModel.estimate`, assumes staggered requests; it is printed
beside, but it is not what such a run measures: at 256 streams the engine spends ~1.8 s of each wave in prefill
while the fluid model mixes prompt chunks into decode steps.)

**The fit.** Two engine fields, fitted on half the points (alternate points in (config, shape, concurrency)
order) by a grid search for the least worst error, reported on the other half:

- ``step_scale``: the engine's step time over the calibrated model's (the runner, sampler and scheduling the
  kernel probe does not see);
- ``fp8_kv_bytes``: what an fp8 KV cache's element costs in the step, in bytes of KV traffic (the model's own
  figure is 1.0, half of bf16's 2.0; searched over 1.0-3.0: above 2.0 means the fp8 path costs more than the
  bytes it saves, which is what the engine showed at these short contexts). It also sets the cache's capacity
  in the fitted model, which binds at none of the measured points.

They are fitted from the measurements each run, not stored per GPU.

Ends with one line (``N`` points; a cell is (shape, concurrency) with at least two configs measured; "right"
means the model's top config is within 3 % of the engine's best there; ``uncalibrated`` is the model on its
default constants with no fit):
``engine: throughput error median X%, worst Y% over N points (held-out half: median X2%, worst Y2%); top config
right in K of M cells; uncalibrated median U%``

Run: ``.venv/bin/python bench/engine_fidelity.py [--data DIR]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from controller.domain.config import EngineConfig  # noqa: E402
from controller.domain.traffic import LengthDistribution, TrafficShape  # noqa: E402
from controller.simulator.perf import PerformanceModel, StepTiming, shipped_calibration  # noqa: E402
from controller.simulator.profiles import load_gpu, load_model  # noqa: E402

DATA = ROOT / "controller" / "simulator" / "profiles" / "calibration" / "engine-h200"
MODEL, GPU = "llama-3.1-8b", "h200"

#: ``scripts/gpu/measure.py``'s config names as the operator's engine configs.
CONFIGS: dict[str, EngineConfig] = {
    "stock": EngineConfig(),
    "kv-fp8": EngineConfig(kv_cache_dtype="fp8"),
    "ngram4": EngineConfig(speculative_method="ngram", num_speculative_tokens=4),
    "ngram2": EngineConfig(speculative_method="ngram", num_speculative_tokens=2),
    "sync": EngineConfig(async_scheduling=False),
    "mbt2048": EngineConfig(max_num_batched_tokens=2048),
    "mbt16384": EngineConfig(max_num_batched_tokens=16384),
    "seqs64": EngineConfig(max_num_seqs=64),
    "seqs256": EngineConfig(max_num_seqs=256),
}


@dataclass(frozen=True)
class Point:
    config: str
    input_len: int
    output_len: int
    concurrency: int
    runs: tuple[float, ...]  # output tok/s of each measured run

    @property
    def engine(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> float:
        return (max(self.runs) - min(self.runs)) / self.engine

    @property
    def cell(self) -> tuple[int, int, int]:
        return (self.input_len, self.output_len, self.concurrency)


@dataclass(frozen=True)
class EngineFit:
    """The engine fields (see the module docstring); the defaults change nothing."""

    step_scale: float = 1.0
    fp8_kv_bytes: float = 1.0  # step cost of an fp8 cache's element, in bytes of KV traffic (the model's own: 1.0)


class FittedModel(PerformanceModel):
    """The performance model with :class:`EngineFit` applied to its step time and its fp8 KV cost."""

    def __init__(self, base: PerformanceModel, fit: EngineFit) -> None:
        super().__init__(base.model, base.gpu, base.calibration, prefill_fixes=base.prefill_fixes)
        self.fit = fit

    def _kv_dtype_bytes(self, config: EngineConfig) -> float:
        return self.fit.fp8_kv_bytes if config.kv_cache_dtype.startswith("fp8") else 2.0

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
        s = super().step(
            config,
            decode_seqs=decode_seqs,
            prefill_tokens=prefill_tokens,
            mean_context_tokens=mean_context_tokens,
            repetitiveness=repetitiveness,
            prefill_attention_work=prefill_attention_work,
        )
        return replace(s, seconds=s.seconds * self.fit.step_scale)


def load_points(data: Path = DATA) -> list[Point]:
    """Every (config, shape, concurrency) with at least two measured runs, in a stable order."""
    runs: dict[tuple[str, int, int, int], list[float]] = {}
    for path in sorted(data.glob("run*/results.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            result = rec.get("result")
            if rec.get("kind") != "measured" or not isinstance(result, dict) or result.get("failed"):
                continue
            key = (rec["config"], rec["input_len"], rec["output_len"], rec["concurrency"])
            runs.setdefault(key, []).append(float(result["output_throughput"]))
    points = [Point(*k, runs=tuple(v)) for k, v in runs.items() if len(v) >= 2 and k[0] in CONFIGS]
    return sorted(points, key=lambda p: (p.config, p.input_len, p.output_len, p.concurrency))


def wave_throughput(model: PerformanceModel, p: Point) -> float:
    """Output tok/s of a closed loop of fixed-length requests: synchronized waves (see the module docstring)."""
    config = CONFIGS[p.config]
    c, i, o = p.concurrency, p.input_len, p.output_len
    mbt = model.capacity(config).max_num_batched_tokens
    total = c * i
    n_prefill = math.ceil(total / mbt)
    chunk = total / n_prefill
    t_prefill = model.step(
        config, decode_seqs=0, prefill_tokens=round(chunk), mean_context_tokens=0.0, prefill_attention_work=None
    ).seconds
    t_decode = model.step(config, decode_seqs=c, prefill_tokens=0, mean_context_tokens=i + o / 2.0).seconds
    wave = n_prefill * t_prefill + (o - 1) * t_decode
    return c * o / wave


def fluid_throughput(model: PerformanceModel, p: Point) -> float:
    length = LengthDistribution(mean=p.input_len)
    shape = TrafficShape(
        arrival_rate_rps=0,
        concurrency=p.concurrency,
        prompt_tokens=length,
        output_tokens=LengthDistribution(mean=p.output_len),
    )
    return model.estimate(CONFIGS[p.config], shape).output_tokens_per_s


def errors(predict: Callable[[Point], float], points: Sequence[Point]) -> list[float]:
    """Signed relative errors of the prediction against the engine, in percent."""
    return [(predict(p) / p.engine - 1.0) * 100.0 for p in points]


def fit_engine(base: PerformanceModel, train: Sequence[Point]) -> EngineFit:
    """Grid search of :class:`EngineFit` for the least worst error on ``train`` (median as tie-break)."""
    best: tuple[float, float, EngineFit] | None = None
    has_fp8 = any(CONFIGS[p.config].kv_cache_dtype.startswith("fp8") for p in train)
    for scale in [0.80 + 0.01 * i for i in range(41)]:
        for fp8 in [1.0 + 0.05 * i for i in range(41)] if has_fp8 else [1.0]:
            fit = EngineFit(step_scale=scale, fp8_kv_bytes=fp8)
            m = FittedModel(base, fit)
            err = [abs(wave_throughput(m, p) / p.engine - 1.0) * 100.0 for p in train]
            key = (max(err), statistics.median(err), fit)
            if best is None or key[:2] < best[:2]:
                best = key
    assert best is not None
    return best[2]


def top_config_right(predict: Callable[[Point], float], points: Sequence[Point]) -> tuple[int, int]:
    """Cells with at least two configs measured, and in how many the model's top config is within 3 % of the
    engine's best there."""
    cells: dict[tuple[int, int, int], list[Point]] = {}
    for p in points:
        cells.setdefault(p.cell, []).append(p)
    right = total = 0
    for ps in cells.values():
        if len(ps) < 2:
            continue
        total += 1
        chosen = max(ps, key=predict)
        right += chosen.engine >= 0.97 * max(q.engine for q in ps)
    return right, total


def describe(errs: Sequence[float]) -> tuple[float, float]:
    a = [abs(e) for e in errs]
    return statistics.median(a), max(a)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    points = load_points(args.data)
    if len(points) < 2:
        raise SystemExit(f"fewer than two measured points under {args.data}")
    model, gpu = load_model(MODEL), load_gpu(GPU)
    uncal = PerformanceModel(model, gpu, None)
    cal = PerformanceModel(model, gpu, shipped_calibration(GPU), prefill_fixes=True)
    train, held = points[0::2], points[1::2]
    fit_half = fit_engine(cal, train)
    fit_all = fit_engine(cal, points)
    half_model, full_model = FittedModel(cal, fit_half), FittedModel(cal, fit_all)

    def full(p: Point) -> float:
        return wave_throughput(full_model, p)

    print(f"{len(points)} points from {args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data}")
    for label, f in (("all points", fit_all), (f"half ({len(train)} points)", fit_half)):
        print(f"fit on {label}: step_scale {f.step_scale:.2f}, fp8_kv_bytes {f.fp8_kv_bytes:.2f}")
    print(
        f"{'config':10s} {'shape':>8s} {'conc':>5s} {'engine':>9s} {'spread':>7s} | {'fitted':>7s} {'held':>7s}"
        f" {'calib':>7s} {'uncal':>7s} {'fluid':>7s}   (model error, %)"
    )
    for p in points:
        e = p.engine
        cols = [
            full(p),
            wave_throughput(half_model, p) if p in held else float("nan"),
            wave_throughput(cal, p),
            wave_throughput(uncal, p),
            fluid_throughput(cal, p),
        ]
        shown = " ".join(f"{(v / e - 1) * 100:+7.1f}" if not math.isnan(v) else f"{'':>7s}" for v in cols)
        where = f"{p.config:10s} {p.input_len:>4d}/{p.output_len:<3d} {p.concurrency:5d}"
        print(f"{where} {e:9.1f} {p.spread:7.1%} | {shown}")
    med, worst = describe(errors(full, points))
    med2, worst2 = describe(errors(lambda p: wave_throughput(half_model, p), held))
    unc_med, _ = describe(errors(lambda p: wave_throughput(uncal, p), points))
    right, cells = top_config_right(full, points)
    print(
        f"engine: throughput error median {med:.1f}%, worst {worst:.1f}% over {len(points)} points"
        f" (held-out half: median {med2:.1f}%, worst {worst2:.1f}%); top config right in {right} of {cells} cells;"
        f" uncalibrated median {unc_med:.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
