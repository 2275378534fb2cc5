"""GPU side of ``shiftlight calibrate``: time the primitives the performance model adds up, on this GPU.

Self-contained on purpose: it needs PyTorch and the standard library only (every vLLM image carries both), so it
runs on a canary node without the operator's dependencies:

    python3 controller/calibrate/gpu_probe.py --shapes shapes.json --out DIR [--quick] [--e2e]

``shapes.json`` holds the layer shapes of one or more model profiles (``controller.calibrate.shapes`` writes it).
Every timing is the median of several CUDA-graph replays timed with CUDA events, after warm-up, on random data
(never zeros), with the weights or caches of each replay rotated over buffers larger than the L2 cache. Each
kernel family is checked once against a float32 reference before it is timed. Results go to ``DIR/raw.json``.
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


def moe_batch(tokens: int, num_experts: int, experts_per_token: int) -> tuple[int, int]:
    """(experts touched, tokens per touched expert) for ``tokens`` tokens under uniform routing."""
    p = experts_per_token / num_experts
    touched = max(1, min(num_experts, round(num_experts * (1.0 - (1.0 - p) ** tokens))))
    return touched, max(1, math.ceil(tokens * experts_per_token / touched))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="JSON file with the layer shapes to time")
    ap.add_argument("--out", required=True, help="directory for raw.json")
    ap.add_argument("--quick", action="store_true", help="tiny sweeps, to check the script runs")
    ap.add_argument("--e2e", action="store_true", help="also time end-to-end decode steps of the dense stack")
    ap.add_argument("--replays", type=int, default=15)
    args = ap.parse_args(argv)

    import importlib  # the CPU side imports this module's helpers without torch

    # Run as a script, this folder comes first on the path, and its profile.py would shadow the standard library's
    # ``profile`` module (which PyTorch's compiler and profiler import): keep the folder off the front.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

    torch: Any = importlib.import_module("torch")
    F: Any = importlib.import_module("torch.nn.functional")

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    with open(args.shapes) as fh:
        shapes: dict[str, Any] = json.load(fh)
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda")
    bf16 = torch.bfloat16
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    quick = args.quick
    replays = 5 if quick else args.replays
    t_start = time.time()
    raw: dict[str, Any] = {
        "device": {
            "name": props.name,
            "sms": props.multi_processor_count,
            "memory_bytes": props.total_memory,
            "l2_bytes": getattr(props, "L2_cache_size", 0),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        },
        "driver": _driver(),
        "started_unix": t_start,
        "quick": quick,
        "points": [],
    }
    points: list[dict[str, Any]] = raw["points"]

    def rand(*shape: int, dtype: Any = bf16, scale: float = 1.0) -> Any:
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(dtype)

    def time_graph(fn: Any, ops_per_call: int) -> float:
        """Median seconds of one op: capture ``fn`` (which runs ``ops_per_call`` ops) in a graph, replay it."""
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
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        del g
        return float(statistics.median(times)) / ops_per_call

    def time_eager(fn: Any, ops_per_call: int) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return float(statistics.median(times)) / ops_per_call

    def rel_err(out: Any, ref: Any) -> float:
        out, ref = out.float(), ref.float()
        if not torch.isfinite(out).all():
            return float("inf")
        return float((out - ref).norm() / ref.norm())

    def check(name: str, err: float, tol: float = 2e-2) -> None:
        raw.setdefault("checks", {})[name] = err
        _log(f"check {name}: rel err {err:.2e}")
        if not err < tol:
            raise SystemExit(f"{name}: result differs from the float32 reference (rel err {err})")

    def unfused_attention(qq: Any, kk: Any, vv: Any) -> Any:
        """Split-free decode attention as two batched GEMMs and a softmax: many blocks even for one sequence."""
        sc = torch.matmul(qq, kk.transpose(-1, -2)) * (qq.shape[-1] ** -0.5)
        return torch.matmul(torch.softmax(sc, dim=-1), vv)

    def add(family: str, seconds: float, **fields: Any) -> None:
        pt = {"family": family, "seconds": seconds, **fields}
        points.append(pt)

    # ----- ceilings (after about a second of matrix work, so the clocks have left idle) --------------------
    wa = rand(8192, 8192)
    for _ in range(20 if quick else 60):
        wa = (wa @ wa) * (1.0 / 90.0)
    torch.cuda.synchronize()
    del wa
    n_copy = 2048 * 1024 * 1024 // 2
    src, dst = rand(n_copy), torch.empty(n_copy, device=dev, dtype=bf16)
    t = time_graph(lambda d=dst, s_=src: d.copy_(s_), 1)
    check("copy", rel_err(dst, src), 1e-6)
    copy_gbs = 2 * n_copy * 2 / t / 1e9
    add("ceiling_copy", t, bytes=4 * n_copy, gbs=copy_gbs)
    t = time_graph(lambda s_=src: s_.sum(dtype=torch.float32), 1)
    add("ceiling_read", t, bytes=2 * n_copy, gbs=2 * n_copy / t / 1e9)
    del src, dst
    nm = 8192
    ga, gb = rand(nm, nm), rand(nm, nm)
    gc = torch.empty(nm, nm, device=dev, dtype=bf16)
    t = time_graph(lambda a=ga, b=gb, c=gc: torch.matmul(a, b, out=c), 1)
    check("gemm_ceiling", rel_err(gc[:256], ga[:256].float() @ gb.float()))
    gemm_tflops = 2 * nm**3 / t / 1e12
    add("ceiling_gemm", t, m=nm, n=nm, k=nm, tflops=gemm_tflops)
    del ga, gb, gc
    _log(f"ceilings: copy {copy_gbs:.0f} GB/s (read+write), bf16 GEMM {gemm_tflops:.0f} TFLOP/s")

    # ----- weight-streaming GEMMs: tokens x [k -> n] per layer matrix ------------------------------------
    tok_sweep = [1, 8, 64, 512, 4096] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    checked = False
    for model in shapes["models"]:
        mats = model["dense_matrices"]
        if quick:
            mats = mats[:2]
        for mat in mats:
            k, n = mat["k"], mat["n"]
            w_bytes = k * n * 2
            reps = rotations(w_bytes)
            ws = [rand(k, n, scale=k**-0.5) for _ in range(reps)]
            for m in tok_sweep:
                xs = [rand(m, k) for _ in range(reps)]
                ys = [torch.empty(m, n, device=dev, dtype=bf16) for _ in range(reps)]
                if not checked:
                    torch.matmul(xs[0], ws[0], out=ys[0])
                    check("gemm", rel_err(ys[0], xs[0].float() @ ws[0].float()))
                    checked = True

                def run(xs: Any = xs, ws: Any = ws, ys: Any = ys) -> None:
                    for x, w, y in zip(xs, ws, ys, strict=True):
                        torch.matmul(x, w, out=y)

                t = time_graph(run, reps)
                add("gemm", t, model=model["name"], matrix=mat["name"], tokens=m, k=k, n=n)
                del xs, ys
            del ws
        _log(f"gemm sweep done for {model['name']} ({time.time() - t_start:.0f} s)")

    # ----- MoE expert GEMMs: touched experts x tokens-per-expert, up then down ----------------------------
    for model in shapes["models"]:
        moe = model.get("moe")
        if not moe:
            continue
        e_all, top, d, f = moe["num_experts"], moe["experts_per_token"], moe["d_in"], moe["d_ff"]
        w_up = rand(e_all, d, f, scale=d**-0.5)
        w_dn = rand(e_all, f, d, scale=f**-0.5)
        moe_sweep = [1, 16, 256, 2048] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
        first = True
        for m in moe_sweep:
            touched, tpe = moe_batch(m, e_all, top)
            groups = max(1, e_all // touched)
            xs = [rand(touched, tpe, d) for _ in range(groups)]
            hs = [torch.empty(touched, tpe, f, device=dev, dtype=bf16) for _ in range(groups)]
            ys = [torch.empty(touched, tpe, d, device=dev, dtype=bf16) for _ in range(groups)]
            if first:
                torch.bmm(xs[0], w_up[:touched], out=hs[0])
                check("moe_bmm", rel_err(hs[0], xs[0].float() @ w_up[:touched].float()))
                first = False

            def run_moe(
                xs: Any = xs, hs: Any = hs, ys: Any = ys, touched: int = touched, w_up: Any = w_up, w_dn: Any = w_dn
            ) -> None:
                for i, (x, h, y) in enumerate(zip(xs, hs, ys, strict=True)):
                    sl = slice(i * touched, (i + 1) * touched)
                    torch.bmm(x, w_up[sl], out=h)
                    torch.bmm(h, w_dn[sl], out=y)

            t = time_graph(run_moe, groups)
            add(
                "moe",
                t,
                model=model["name"],
                tokens=m,
                experts=touched,
                tokens_per_expert=tpe,
                d_in=d,
                d_ff=f,
                weight_bytes=2 * touched * d * f * 2,
                flops=2 * 2 * touched * tpe * d * f,
            )
            del xs, hs, ys
        del w_up, w_dn
        _log(f"moe sweep done for {model['name']} ({time.time() - t_start:.0f} s)")

    # ----- decode attention: B sequences x ctx tokens of cache, q query tokens each (GQA folded) -----------
    att = shapes["attention"]
    hq, hkv, hd = att["num_heads"], att["num_kv_heads"], att["head_dim"]
    group = hq // hkv
    ctx_sweep = [1024, 8192] if quick else [256, 1024, 4096, 16384, 32768]
    b_sweep = [1, 64] if quick else [1, 4, 16, 64, 256]
    q_sweep = [1, 4] if quick else [1, 2, 4, 8]
    kv_budget = 6 * 1024**3  # bytes of K+V per timed set
    first = True
    for ctx in ctx_sweep:
        for b in b_sweep:
            kv_bytes = 2 * b * ctx * hkv * hd * 2
            if kv_bytes > kv_budget:
                continue
            reps = rotations(kv_bytes, most=256)
            ks = [rand(b, hkv, ctx, hd) for _ in range(reps)]
            vs = [rand(b, hkv, ctx, hd) for _ in range(reps)]
            for q in q_sweep:
                qs = [rand(b, hkv, group * q, hd) for _ in range(reps)]
                outs = [torch.empty(b, hkv, group * q, hd, device=dev, dtype=bf16) for _ in range(reps)]
                if first:
                    o = F.scaled_dot_product_attention(qs[0], ks[0], vs[0])
                    ref = F.scaled_dot_product_attention(qs[0].float(), ks[0].float(), vs[0].float())
                    check("decode_attention", rel_err(o, ref))
                    first = False

                    o2 = unfused_attention(qs[0], ks[0], vs[0])
                    check("decode_attention_unfused", rel_err(o2, ref))

                def run_att(qs: Any = qs, ks: Any = ks, vs: Any = vs, outs: Any = outs) -> None:
                    for qq, kk, vv, oo in zip(qs, ks, vs, outs, strict=True):
                        oo.copy_(F.scaled_dot_product_attention(qq, kk, vv))

                def run_unf(qs: Any = qs, ks: Any = ks, vs: Any = vs, outs: Any = outs) -> None:
                    for qq, kk, vv, oo in zip(qs, ks, vs, outs, strict=True):
                        oo.copy_(unfused_attention(qq, kk, vv))

                for impl, fn in (("sdpa", run_att), ("unfused", run_unf)):
                    t = time_graph(fn, reps)
                    add(
                        "attention",
                        t,
                        impl=impl,
                        batch=b,
                        context=ctx,
                        query=q,
                        kv_bytes=kv_bytes,
                        flops=4 * b * hq * q * ctx * hd,
                    )
                del qs, outs
            del ks, vs
    _log(f"decode attention sweep done ({time.time() - t_start:.0f} s)")

    # ----- prefill attention: a chunk against a cached context; several sequences in one step -------------
    causal_lower_right = importlib.import_module("torch.nn.attention.bias").causal_lower_right

    cached_sweep = [0, 4096] if quick else [0, 2048, 4096, 8192, 16384, 24576]
    first = True
    for chunk, cached in [(c, x) for c in ((512,) if quick else (512, 2048)) for x in cached_sweep]:
        L = cached + chunk
        qx = rand(1, hq, chunk, hd)
        kx, vx = rand(1, hq, L, hd), rand(1, hq, L, hd)  # KV heads expanded: compute-bound, bytes are minor
        mask = causal_lower_right(chunk, L)
        if first:
            o = F.scaled_dot_product_attention(qx, kx, vx, attn_mask=mask)
            ref = F.scaled_dot_product_attention(qx.float(), kx.float(), vx.float(), attn_mask=mask)
            check("chunked_prefill", rel_err(o, ref))
            first = False
        t = time_graph(
            lambda qx=qx, kx=kx, vx=vx, mask=mask: F.scaled_dot_product_attention(qx, kx, vx, attn_mask=mask), 1
        )
        add("prefill_chunk", t, chunk=chunk, cached=cached, flops=4 * hq * hd * chunk * (cached + (chunk + 1) / 2))
        del qx, kx, vx
    for total, seqs in [(tt, n) for tt in ((2048,) if quick else (2048, 8192)) for n in (1, 2, 4, 8, 16, 32)]:
        p = total // seqs
        qx, kx, vx = rand(seqs, hq, p, hd), rand(seqs, hq, p, hd), rand(seqs, hq, p, hd)
        t = time_graph(lambda qx=qx, kx=kx, vx=vx: F.scaled_dot_product_attention(qx, kx, vx, is_causal=True), 1)
        add("prefill_multi", t, sequences=seqs, tokens=total, flops=4 * hq * hd * seqs * p * (p + 1) / 2)
        del qx, kx, vx
    _log(f"prefill sweeps done ({time.time() - t_start:.0f} s)")

    # ----- Mamba-style state traffic: read-modify-write of the SSM state of B sequences -------------------
    for model in shapes["models"]:
        mamba = model.get("mamba")
        if not mamba:
            continue
        heads, elems = mamba["heads"], mamba["state_elems"]
        per = elems // heads
        for dtype_name, dt in (("float32", torch.float32), ("float16", torch.float16)):
            first = True
            for b in [1, 64] if quick else [1, 4, 16, 64, 256, 1024]:
                st_bytes = b * elems * dt.itemsize
                reps = rotations(st_bytes, most=32)
                states = [rand(b, heads, per, dtype=dt) for _ in range(reps)]
                decays = [torch.rand(b, heads, 1, device=dev, dtype=dt) * 0.5 + 0.5 for _ in range(reps)]
                if first:
                    ref = states[0].float() * decays[0].float()
                    tmp = states[0].clone()
                    tmp.mul_(decays[0])
                    check(f"state_rmw_{dtype_name}", rel_err(tmp, ref), 1e-2)
                    first = False

                def run_state(states: Any = states, decays: Any = decays) -> None:
                    for s_, d_ in zip(states, decays, strict=True):
                        s_.mul_(d_)

                t = time_graph(run_state, reps)
                add("state", t, model=model["name"], batch=b, dtype=dtype_name, bytes=2 * st_bytes)
                del states, decays
        _log(f"state sweep done for {model['name']} ({time.time() - t_start:.0f} s)")

    # ----- per-kernel overhead: a stack of small dependent kernels, graphed and eager ---------------------
    xs_small = rand(1, shapes["overhead_width"])
    n_k = 320

    def small_stack() -> None:
        x = xs_small
        for _ in range(n_k):
            x = x * 1.0001
        xs_small.copy_(x)

    add("overhead_graph", time_graph(small_stack, n_k + 1), kernels=n_k + 1)
    add("overhead_eager", time_eager(small_stack, n_k + 1), kernels=n_k + 1)
    _log(f"overhead done ({time.time() - t_start:.0f} s)")

    # ----- one dense decoder layer: its non-GEMM ops together, and its four GEMMs back to back --------------
    def count_kernels(fn: Any) -> int:
        """GPU kernels and copies one call of ``fn`` launches, from PyTorch's profiler (0 where it cannot say)."""
        try:
            prof_mod = importlib.import_module("torch.profiler")
            torch.cuda.synchronize()
            acts = [prof_mod.ProfilerActivity.CPU, prof_mod.ProfilerActivity.CUDA]
            with prof_mod.profile(activities=acts) as prof:
                fn()
                torch.cuda.synchronize()
            return sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))
        except Exception as exc:  # the profiler is optional; the analytic count stands in
            raw.setdefault("errors", []).append(f"kernel count: {exc!r}")
            return 0

    layer_parts(torch, F, dev, shapes["e2e"], add, time_graph, rand, count_kernels, check, rel_err, quick, tok_sweep)
    _log(f"layer ops and GEMM chain done ({time.time() - t_start:.0f} s)")

    # ----- end-to-end decode step of the dense stack ------------------------------------------------------
    if args.e2e:
        e2e = shapes["e2e"]
        try:
            # the stack lives next to this script (copied with it by ``shiftlight calibrate --prepare``)
            sys.path.append(_HERE)
            decode_steps = importlib.import_module("gpu_probe_e2e").decode_steps
            decode_steps(torch, F, dev, e2e, add, time_graph, time_eager, rand, quick, _log, t_start, unfused_attention)
        except Exception as exc:  # keep what was measured; the error is recorded next to it
            raw.setdefault("errors", []).append(f"e2e: {exc!r}")
            _log(f"e2e failed: {exc!r}")
            torch.cuda.empty_cache()

    src, dst = rand(n_copy), torch.empty(n_copy, device=dev, dtype=bf16)
    t = time_graph(lambda d=dst, s_=src: d.copy_(s_), 1)
    add("ceiling_copy_end", t, bytes=4 * n_copy, gbs=4 * n_copy / t / 1e9)
    del src, dst
    raw["finished_unix"] = time.time()
    raw["elapsed_s"] = raw["finished_unix"] - t_start
    with open(os.path.join(args.out, "raw.json"), "w") as fh:
        json.dump(raw, fh, indent=1)
    _summary(points, copy_gbs, gemm_tflops)
    return 0


def layer_ops_bytes_per_token(hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, query: int) -> int:
    """Bytes one token moves through the dense stack's non-GEMM ops of one layer (each op's reads and writes).

    Two RMSNorms in float32 (cast, square, mean, scale, cast back, weight: 36 bytes per element each), K and V
    written to the cache, two residual adds, SiLU and the gate product; with more than one query token per
    sequence, the query and the attention output are also copied between layouts."""
    norms = 2 * 36 * hidden
    kv_write = 2 * 4 * kv_heads * head_dim
    residual = 2 * 6 * hidden
    gated = 4 * inter + 6 * inter
    layouts = 2 * 4 * heads * head_dim if query > 1 else 0
    return norms + kv_write + residual + gated + layouts


def layer_ops_kernels(query: int) -> int:
    """Kernels of the dense stack's non-GEMM ops of one layer, counted from its code: 8 per RMSNorm, 2 cache
    writes, 2 residual adds, SiLU and the product; 2 layout copies when a sequence has more than one query token."""
    return 2 * 8 + 2 + 2 + 2 + (2 if query > 1 else 0)


def layer_parts(
    torch: Any,
    F: Any,
    dev: Any,
    e2e: dict[str, Any],
    add: Any,
    time_graph: Any,
    rand: Any,
    count_kernels: Any,
    check: Any,
    rel_err: Any,
    quick: bool,
    tok_sweep: list[int],
) -> None:
    """Two primitives of one dense decoder layer (the end-to-end stack's own code, ``gpu_probe_e2e.py``):

    * ``layer_ops``: everything but its GEMMs and the attention kernel (the RMSNorms, the cache writes, the query
      and attention-output layout copies, the residual adds, SiLU and the gate product) at B sequences x q query
      tokens, each replay over distinct layers' inputs, norm weights and cache buffers;
    * ``gemm_chain``: its four GEMMs (qkv, o, gate_up, down) back to back over several layers' distinct weights.
    """
    bf16 = torch.bfloat16
    h, inter = e2e["hidden"], e2e["intermediate"]
    hq, hkv, hd = e2e["num_heads"], e2e["num_kv_heads"], e2e["head_dim"]
    group, qkv_n, pad = hq // hkv, (hq + 2 * hkv) * hd, 64

    def rms(x: Any, w: Any) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(bf16) * w

    cases = [(1, 1), (64, 2)] if quick else [(b, q) for q in (1, 2, 4, 8) for b in (1, 4, 16, 64, 256, 1024)]
    for b, q in cases:
        n = b * q
        set_bytes = 2 * n * (h + qkv_n + hq * hd + h + 2 * inter + h) + 2 * 2 * b * hkv * (pad + q) * hd
        reps = rotations(set_bytes, most=32)
        sets = [
            {
                "x": rand(n, h),
                "qkv": rand(n, qkv_n),
                "att": rand(b, hkv, group * q, hd),
                "o": rand(n, h),
                "gu": rand(n, 2 * inter),
                "dn": rand(n, h),
                "n1": rand(h, scale=0.1) + 1.0,
                "n2": rand(h, scale=0.1) + 1.0,
                "kc": rand(b, hkv, pad + q, hd),
                "vc": rand(b, hkv, pad + q, hd),
            }
            for _ in range(reps)
        ]

        def ops(sets: Any = sets, b: int = b, q: int = q, n: int = n) -> None:
            for s in sets:
                x = s["x"]
                y = rms(x, s["n1"])
                qh, kh, vh = s["qkv"].split([hq * hd, hkv * hd, hkv * hd], dim=-1)
                s["kc"][:, :, pad:] = kh.view(b, q, hkv, hd).transpose(1, 2)
                s["vc"][:, :, pad:] = vh.view(b, q, hkv, hd).transpose(1, 2)
                qg = qh.view(b, q, hkv, group, hd).permute(0, 2, 3, 1, 4).reshape(b, hkv, group * q, hd)
                a = s["att"].view(b, hkv, group, q, hd).permute(0, 3, 1, 2, 4).reshape(n, hq * hd)
                x = x + s["o"]
                y = rms(x, s["n2"])
                g_, u_ = s["gu"].chunk(2, dim=-1)
                act = F.silu(g_) * u_
                x = x + s["dn"]  # the next layer's input in the stack
                del x, y, qg, a, act

        counted = count_kernels(ops)
        t = time_graph(ops, reps)
        if (b, q) == cases[0]:
            k_src = sets[-1]["qkv"][:, hq * hd : hq * hd + hkv * hd].reshape(b, q, hkv, hd).transpose(1, 2)
            check("layer_ops_cache_write", rel_err(sets[-1]["kc"][:, :, pad:], k_src), 1e-6)
            x2 = sets[-1]["x"]
            ref = x2.double() * torch.rsqrt(x2.double().pow(2).mean(-1, keepdim=True) + 1e-6) * sets[-1]["n1"].double()
            check("layer_ops_rmsnorm", rel_err(rms(x2, sets[-1]["n1"]), ref))
        add(
            "layer_ops",
            t,
            batch=b,
            query=q,
            tokens=n,
            kernels=counted / reps if counted else layer_ops_kernels(q),
            kernels_counted=counted / reps if counted else 0,
            kernels_code=layer_ops_kernels(q),
            bytes=n * layer_ops_bytes_per_token(h, inter, hq, hkv, hd, q),
        )
        del sets

    layers = 2 if quick else 8
    weights = [
        (
            rand(h, qkv_n, scale=h**-0.5),
            rand(hq * hd, h, scale=(hq * hd) ** -0.5),
            rand(h, 2 * inter, scale=h**-0.5),
            rand(inter, h, scale=inter**-0.5),
        )
        for _ in range(layers)
    ]
    mats = f"{h}x{qkv_n},{hq * hd}x{h},{h}x{2 * inter},{inter}x{h}"
    for m in tok_sweep:
        x_in, a_in, act_in = rand(m, h), rand(m, hq * hd), rand(m, inter)
        outs = [torch.empty(m, c, device=dev, dtype=bf16) for c in (qkv_n, h, 2 * inter, h)]

        def chain(
            x_in: Any = x_in, a_in: Any = a_in, act_in: Any = act_in, outs: Any = outs, weights: Any = weights
        ) -> None:
            for w_qkv, w_o, w_gu, w_dn in weights:
                torch.matmul(x_in, w_qkv, out=outs[0])
                torch.matmul(a_in, w_o, out=outs[1])
                torch.matmul(outs[1], w_gu, out=outs[2])
                torch.matmul(act_in, w_dn, out=outs[3])

        t = time_graph(chain, layers)
        if m == tok_sweep[0]:
            check("gemm_chain", rel_err(outs[3], act_in.float() @ weights[-1][3].float()))
        add("gemm_chain", t, tokens=m, layers=layers, matrices=mats)
        del x_in, a_in, act_in, outs
    del weights
    torch.cuda.empty_cache()


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
