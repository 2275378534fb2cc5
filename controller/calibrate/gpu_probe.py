"""GPU side of ``shiftlight calibrate``: time the primitives the performance model adds up, on this GPU.

Self-contained on purpose: it needs PyTorch and the standard library only (every vLLM image carries both), so it
runs on a canary node without the operator's dependencies:

    python3 controller/calibrate/gpu_probe.py --shapes shapes.json --out DIR [--quick] [--e2e]

``shapes.json`` holds the layer shapes of one or more model profiles (``controller.calibrate.shapes`` writes it).
Every timing is the median of several CUDA-graph replays timed with CUDA events, after warm-up, on random data
(never zeros), with the weights or caches of each replay rotated over buffers larger than the L2 cache. Each
kernel family is checked once against a float32 reference before it is timed. Results go to ``DIR/raw.json``.

This file holds the entry point and the timing harness (:class:`Probe`); the sweeps it runs are in the scripts next
to it, which it loads from their files: the kernel families (``gpu_probe_sweeps.py``), one dense decoder layer's
parts (``gpu_probe_layer.py``) and the end-to-end decode steps (``gpu_probe_e2e.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
L2_BYTES_FLOOR = 256 * 1024 * 1024  # rotate over at least this many bytes per timed op (H200 L2 is 60 MB)


def _log(msg: str) -> None:
    print(msg, flush=True)


def rotations(bytes_per_set: float, floor: float = L2_BYTES_FLOOR, most: int = 64) -> int:
    """How many distinct input sets to rotate over so that one replay touches at least ``floor`` bytes."""
    if bytes_per_set <= 0:
        return 1
    return max(1, min(most, math.ceil(floor / bytes_per_set)))


def sibling(name: str) -> Any:
    """One of the probe's scripts next to this file, loaded from its file; the folder stays off ``sys.path`` (its
    profile.py would shadow the standard library's ``profile`` module, which PyTorch imports)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, f"{name}.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"no {name}.py next to the probe")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Probe:
    """The timing harness the sweeps share: PyTorch's handles, random inputs, CUDA-graph and eager timers, checks
    against a float32 reference, and the raw output with its points."""

    rotations = staticmethod(rotations)

    def __init__(self, torch: Any, F: Any, *, quick: bool, replays: int, raw: dict[str, Any], t_start: float) -> None:
        self.torch, self.F = torch, F
        self.dev = torch.device("cuda")
        self.bf16 = torch.bfloat16
        self.quick, self.replays = quick, replays
        self.raw, self.t_start = raw, t_start
        self.points: list[dict[str, Any]] = raw["points"]

    def log(self, msg: str) -> None:
        _log(msg)

    def rand(self, *shape: int, dtype: Any = None, scale: float = 1.0) -> Any:
        torch = self.torch
        dtype = self.bf16 if dtype is None else dtype
        return (torch.randn(*shape, device=self.dev, dtype=torch.float32) * scale).to(dtype)

    def time_graph(self, fn: Any, ops_per_call: int) -> float:
        """Median seconds of one op: capture ``fn`` (which runs ``ops_per_call`` ops) in a graph, replay it."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        del g
        return float(statistics.median(times)) / ops_per_call

    def time_eager(self, fn: Any, ops_per_call: int) -> float:
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return float(statistics.median(times)) / ops_per_call

    def rel_err(self, out: Any, ref: Any) -> float:
        out, ref = out.float(), ref.float()
        if not self.torch.isfinite(out).all():
            return float("inf")
        return float((out - ref).norm() / ref.norm())

    def check(self, name: str, err: float, tol: float = 2e-2) -> None:
        self.raw.setdefault("checks", {})[name] = err
        _log(f"check {name}: rel err {err:.2e}")
        if not err < tol:
            raise SystemExit(f"{name}: result differs from the float32 reference (rel err {err})")

    def unfused_attention(self, qq: Any, kk: Any, vv: Any) -> Any:
        """Split-free decode attention as two batched GEMMs and a softmax: many blocks even for one sequence."""
        torch = self.torch
        sc = torch.matmul(qq, kk.transpose(-1, -2)) * (qq.shape[-1] ** -0.5)
        return torch.matmul(torch.softmax(sc, dim=-1), vv)

    def add(self, family: str, seconds: float, **fields: Any) -> None:
        pt = {"family": family, "seconds": seconds, **fields}
        self.points.append(pt)

    def count_kernels(self, fn: Any) -> int:
        """GPU kernels and copies one call of ``fn`` launches, from PyTorch's profiler (0 where it cannot say)."""
        import importlib

        torch = self.torch
        try:
            prof_mod = importlib.import_module("torch.profiler")
            torch.cuda.synchronize()
            acts = [prof_mod.ProfilerActivity.CPU, prof_mod.ProfilerActivity.CUDA]
            with prof_mod.profile(activities=acts) as prof:
                fn()
                torch.cuda.synchronize()
            return sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))
        except Exception as exc:  # the profiler is optional; the analytic count stands in
            self.raw.setdefault("errors", []).append(f"kernel count: {exc!r}")
            return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="JSON file with the layer shapes to time")
    ap.add_argument("--out", required=True, help="directory for raw.json")
    ap.add_argument("--quick", action="store_true", help="tiny sweeps, to check the script runs")
    ap.add_argument("--e2e", action="store_true", help="also time end-to-end decode steps of the dense stack")
    ap.add_argument("--replays", type=int, default=15)
    return ap.parse_args(argv)


def _device(torch: Any) -> dict[str, Any]:
    """The GPU the probe runs on, and the PyTorch and CUDA versions."""
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "sms": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", 0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)

    import importlib  # the CPU side imports this module's helpers without torch

    # Run as a script, this folder comes first on the path, and its profile.py would shadow the standard library's
    # ``profile`` module (which PyTorch's compiler and profiler import): keep the folder off the front.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

    try:
        torch: Any = importlib.import_module("torch")
    except ImportError as exc:
        print(f"error: the GPU probe needs PyTorch, and {sys.executable} has none ({exc})", file=sys.stderr)
        return 3
    F: Any = importlib.import_module("torch.nn.functional")

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    with open(args.shapes) as fh:
        shapes: dict[str, Any] = json.load(fh)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    quick = args.quick
    t_start = time.time()
    raw: dict[str, Any] = {
        "device": _device(torch),
        "driver": _driver(),
        "started_unix": t_start,
        "quick": quick,
        "points": [],
    }
    p = Probe(torch, F, quick=quick, replays=5 if quick else args.replays, raw=raw, t_start=t_start)
    sweeps = sibling("gpu_probe_sweeps")

    n_copy = 2048 * 1024 * 1024 // 2
    copy_gbs, gemm_tflops = sweeps.ceilings(p, n_copy)
    tok_sweep = [1, 8, 64, 512, 4096] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    sweeps.weight_gemms(p, shapes, tok_sweep)
    sweeps.moe_gemms(p, shapes)
    sweeps.decode_attention(p, shapes["attention"])
    sweeps.prefill_attention(p, shapes["attention"])
    sweeps.state_traffic(p, shapes)
    sweeps.kernel_overhead(p, shapes["overhead_width"])

    # ----- one dense decoder layer: its non-GEMM ops together, and its four GEMMs back to back --------------
    sibling("gpu_probe_layer").layer_parts(p, shapes["e2e"], tok_sweep)
    _log(f"layer ops and GEMM chain done ({time.time() - t_start:.0f} s)")

    # ----- end-to-end decode step of the dense stack ------------------------------------------------------
    if args.e2e:
        e2e = shapes["e2e"]
        try:
            # the stack lives next to this script (copied with it by ``shiftlight calibrate --prepare``)
            decode_steps = sibling("gpu_probe_e2e").decode_steps
            decode_steps(
                torch,
                F,
                p.dev,
                e2e,
                p.add,
                p.time_graph,
                p.time_eager,
                p.rand,
                quick,
                _log,
                t_start,
                p.unfused_attention,
            )
        except Exception as exc:  # keep what was measured; the error is recorded next to it
            raw.setdefault("errors", []).append(f"e2e: {exc!r}")
            _log(f"e2e failed: {exc!r}")
            torch.cuda.empty_cache()

    src, dst = p.rand(n_copy), torch.empty(n_copy, device=p.dev, dtype=p.bf16)
    t = p.time_graph(lambda d=dst, s_=src: d.copy_(s_), 1)
    p.add("ceiling_copy_end", t, bytes=4 * n_copy, gbs=4 * n_copy / t / 1e9)
    del src, dst
    raw["finished_unix"] = time.time()
    raw["elapsed_s"] = raw["finished_unix"] - t_start
    with open(os.path.join(args.out, "raw.json"), "w") as fh:
        json.dump(raw, fh, indent=1)
    _summary(p.points, copy_gbs, gemm_tflops)
    return 0


def _driver() -> str:
    """The NVIDIA driver version, where nvidia-smi is on the PATH."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def _summary(points: list[dict[str, Any]], copy_gbs: float, gemm_tflops: float) -> None:
    print("\nfamily          points  median_us   min_us   max_us")
    fams: dict[str, list[float]] = {}
    for p in points:
        fams.setdefault(p["family"], []).append(p["seconds"] * 1e6)
    for fam, ts in fams.items():
        print(f"{fam:<15} {len(ts):>6} {statistics.median(ts):>10.1f} {min(ts):>8.1f} {max(ts):>8.1f}")
    print(f"copy {copy_gbs:.0f} GB/s (read+write)   bf16 GEMM {gemm_tflops:.0f} TFLOP/s")


if __name__ == "__main__":
    sys.exit(main())
