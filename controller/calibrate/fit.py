"""Fit the probe's raw timings to a calibration profile (CPU side, pure): every kernel family's curves
(:mod:`controller.calibrate.family_fits`), the ceilings and the kernel overhead as measured, and the held-out check
(fit on half of the points, errors on the other half).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from controller.calibrate.family_fits import (
    Point,
    best_attention,
    fit_attention,
    fit_gemm_chain,
    fit_layer_ops,
    fit_moe,
    fit_prefill,
    fit_state,
    fit_weight_gemm,
    predict_attention,
    predict_gemm,
    predict_gemm_chain,
    predict_layer_ops,
    predict_moe,
    predict_prefill,
    predict_state,
)
from controller.errors import InvalidInput
from controller.simulator.calibration_profile import (
    Calibration,
    Ceilings,
    KernelOverhead,
    MeasuredOn,
    RawPoint,
)
from controller.simulator.profiles import GpuProfile

#: Decode attention kernel the profile is fitted to: PyTorch's fused SDPA kernel (the one the end-to-end steps
#: were validated with); ``None`` takes the faster of the probe's kernels at each point.
ATTENTION_IMPL: str | None = "sdpa"


def split_half(points: Sequence[Point]) -> tuple[list[Point], list[Point]]:
    """Alternate points within each family (in the order the probe took them): (fit half, held-out half).

    The probe sweeps each shape over its sizes in order, so alternation keeps every shape in both halves and
    holds out every second size."""
    fit: list[Point] = []
    held: list[Point] = []
    counters: dict[str, int] = defaultdict(int)
    for p in points:
        key = _split_key(p)
        (fit if counters[key] % 2 == 0 else held).append(p)
        counters[key] += 1
    return fit, held


def _split_key(p: Point) -> str:
    fam = p["family"]
    if fam == "gemm":
        return f"gemm:{p['matrix']}"
    if fam == "attention":
        return f"attention:{p.get('impl')}:{p['batch']}:{p['query']}"
    if fam == "prefill_chunk":
        return f"prefill_chunk:{p['chunk']}"
    if fam == "prefill_multi":
        return f"prefill_multi:{p['tokens']}"
    if fam == "state":
        return f"state:{p['dtype']}"
    if fam == "layer_ops":
        return f"layer_ops:{p['query']}"
    return str(fam)


def _family(points: Sequence[Point], name: str) -> list[Point]:
    return [p for p in points if p["family"] == name]


def _one(points: Sequence[Point], name: str) -> Point:
    found = _family(points, name)
    if not found:
        raise InvalidInput(f"the probe's output has no '{name}' measurement", field="points")
    return found[0]


def fit_calibration(
    raw: dict[str, Any],
    gpu: GpuProfile,
    *,
    points: Sequence[Point] | None = None,
    raw_file: str = "",
    attention_impl: str | None = ATTENTION_IMPL,
) -> Calibration:
    """A calibration profile from the probe's ``raw.json`` (optionally from a subset of its points)."""
    pts = list(raw["points"] if points is None else points)
    allp = raw["points"]
    copy = _one(allp, "ceiling_copy")
    read = _one(allp, "ceiling_read") if _family(allp, "ceiling_read") else copy
    gemm_ceiling = _one(allp, "ceiling_gemm")
    dev = raw.get("device", {})
    started = raw.get("started_unix", 0.0)
    import datetime  # the probe's own timestamp, formatted (not the clock)

    date = datetime.datetime.fromtimestamp(started, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    moe_pts, state_pts = _family(pts, "moe"), _family(pts, "state")
    ops_pts, chain_pts = _family(pts, "layer_ops"), _family(pts, "gemm_chain")
    overhead = KernelOverhead(
        graph_kernel_s=_one(allp, "overhead_graph")["seconds"],
        eager_kernel_s=_one(allp, "overhead_eager")["seconds"],
    )
    weight_gemm = fit_weight_gemm(_family(pts, "gemm"), gpu)
    return Calibration(
        gpu=gpu.name,
        measured_on=MeasuredOn(
            device=str(dev.get("name", "")),
            date=date,
            torch=str(dev.get("torch", "")),
            cuda=str(dev.get("cuda", "")),
            driver=str(raw.get("driver", "")),
            probe_seconds=float(raw.get("elapsed_s", 0.0)),
            models=tuple(sorted({str(p["model"]) for p in allp if "model" in p})),
        ),
        ceilings=Ceilings(copy_gbs=copy["gbs"], read_gbs=read["gbs"], gemm_tflops=gemm_ceiling["tflops"]),
        activation_bandwidth=copy["gbs"] / gpu.hbm_bandwidth_gbs,
        weight_gemm=weight_gemm,
        moe_gemm=fit_moe(moe_pts, gpu) if moe_pts else None,
        decode_attention=fit_attention(_family(pts, "attention"), gpu, attention_impl),
        prefill_attention=fit_prefill(_family(pts, "prefill_multi"), _family(pts, "prefill_chunk"), gpu),
        state=fit_state(state_pts, gpu) if state_pts else None,
        overhead=overhead,
        layer_ops=fit_layer_ops(ops_pts, gpu, overhead.graph_kernel_s) if ops_pts else None,
        gemm_chain=fit_gemm_chain(chain_pts, weight_gemm, gpu) if chain_pts else None,
        raw_file=raw_file,
        points=tuple(_raw_point(p) for p in allp if not p["family"].startswith(("ceiling", "overhead"))),
    )


def _raw_point(p: Point) -> RawPoint:
    sizes = {k: v for k, v in p.items() if k not in ("family", "seconds") and isinstance(v, (int, float, str))}
    return RawPoint(family=p["family"], seconds=p["seconds"], sizes=sizes)


Predictor = Callable[[Calibration, Point, GpuProfile], float]


def _pred(cal: Calibration, p: Point, gpu: GpuProfile) -> float | None:
    fam = p["family"]
    if fam == "gemm":
        return predict_gemm(cal.weight_gemm, p, gpu)
    if fam == "moe" and cal.moe_gemm:
        return predict_moe(cal.moe_gemm, p, gpu)
    if fam == "attention":
        return predict_attention(cal.decode_attention, p, gpu)
    if fam in ("prefill_multi", "prefill_chunk"):
        return predict_prefill(cal.prefill_attention, p, gpu)
    if fam == "state" and cal.state and p["dtype"] == "float32":
        return predict_state(cal.state, p, gpu)
    if fam == "layer_ops" and cal.layer_ops:
        return predict_layer_ops(cal.layer_ops, p, gpu, cal.overhead.graph_kernel_s)
    if fam == "gemm_chain" and cal.gemm_chain:
        return predict_gemm_chain(cal.gemm_chain, cal.weight_gemm, p, gpu)
    return None


def errors_by_family(cal: Calibration, points: Sequence[Point], gpu: GpuProfile) -> dict[str, list[float]]:
    """Relative error ``predicted / measured - 1`` of each point the profile's curves predict, by family."""
    out: dict[str, list[float]] = defaultdict(list)
    pts = [p for p in points if p["family"] != "attention"] + best_attention(
        _family(points, "attention"), ATTENTION_IMPL
    )
    for p in pts:
        pred = _pred(cal, p, gpu)
        if pred is not None:
            out[p["family"]].append(pred / p["seconds"] - 1.0)
    return dict(out)


def held_out_summary(raw: dict[str, Any], gpu: GpuProfile) -> dict[str, float]:
    """Fit on half of the primitive points; median and worst absolute error on the other half, per family."""
    fit_pts, held = split_half(raw["points"])
    cal = fit_calibration(raw, gpu, points=fit_pts)
    out: dict[str, float] = {}
    for fam, errs in sorted(errors_by_family(cal, held, gpu).items()):
        a = [abs(e) for e in errs]
        out[f"{fam}_median"] = round(statistics.median(a), 4)
        out[f"{fam}_worst"] = round(max(a), 4)
        out[f"{fam}_points"] = len(a)
    return out
