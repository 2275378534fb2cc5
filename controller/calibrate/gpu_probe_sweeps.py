"""The GPU probe's kernel sweeps: the ceilings (copy, read, a large GEMM), the weight-streaming GEMMs, the MoE
expert GEMMs, decode and prefill attention, Mamba-style state traffic and the per-kernel overhead.

The probe (``gpu_probe.py``, next to this file) loads it and hands each sweep its timing harness, so this file imports
neither PyTorch nor the operator; every point goes to the harness's ``add``.
"""

from __future__ import annotations

import math
import time
from typing import Any


def moe_batch(tokens: int, num_experts: int, experts_per_token: int) -> tuple[int, int]:
    """(experts touched, tokens per touched expert) for ``tokens`` tokens under uniform routing."""
    p = experts_per_token / num_experts
    touched = max(1, min(num_experts, round(num_experts * (1.0 - (1.0 - p) ** tokens))))
    return touched, max(1, math.ceil(tokens * experts_per_token / touched))


def ceilings(p: Any, n_copy: int) -> tuple[float, float]:
    """Copy, read and bf16 GEMM ceilings, after about a second of matrix work (so the clocks have left idle);
    returns (copy GB/s, GEMM TFLOP/s)."""
    torch, rand = p.torch, p.rand
    wa = rand(8192, 8192)
    for _ in range(20 if p.quick else 60):
        wa = (wa @ wa) * (1.0 / 90.0)
    torch.cuda.synchronize()
    del wa
    src, dst = rand(n_copy), torch.empty(n_copy, device=p.dev, dtype=p.bf16)
    t = p.time_graph(lambda d=dst, s_=src: d.copy_(s_), 1)
    p.check("copy", p.rel_err(dst, src), 1e-6)
    copy_gbs = 2 * n_copy * 2 / t / 1e9
    p.add("ceiling_copy", t, bytes=4 * n_copy, gbs=copy_gbs)
    t = p.time_graph(lambda s_=src: s_.sum(dtype=torch.float32), 1)
    p.add("ceiling_read", t, bytes=2 * n_copy, gbs=2 * n_copy / t / 1e9)
    del src, dst
    nm = 8192
    ga, gb = rand(nm, nm), rand(nm, nm)
    gc = torch.empty(nm, nm, device=p.dev, dtype=p.bf16)
    t = p.time_graph(lambda a=ga, b=gb, c=gc: torch.matmul(a, b, out=c), 1)
    p.check("gemm_ceiling", p.rel_err(gc[:256], ga[:256].float() @ gb.float()))
    gemm_tflops = 2 * nm**3 / t / 1e12
    p.add("ceiling_gemm", t, m=nm, n=nm, k=nm, tflops=gemm_tflops)
    del ga, gb, gc
    p.log(f"ceilings: copy {copy_gbs:.0f} GB/s (read+write), bf16 GEMM {gemm_tflops:.0f} TFLOP/s")
    return copy_gbs, gemm_tflops


def weight_gemms(p: Any, shapes: dict[str, Any], tok_sweep: list[int]) -> None:
    """Weight-streaming GEMMs: tokens x [k -> n] per layer matrix."""
    torch, rand = p.torch, p.rand
    checked = False
    for model in shapes["models"]:
        mats = model["dense_matrices"]
        if p.quick:
            mats = mats[:2]
        for mat in mats:
            k, n = mat["k"], mat["n"]
            w_bytes = k * n * 2
            reps = p.rotations(w_bytes)
            ws = [rand(k, n, scale=k**-0.5) for _ in range(reps)]
            for m in tok_sweep:
                xs = [rand(m, k) for _ in range(reps)]
                ys = [torch.empty(m, n, device=p.dev, dtype=p.bf16) for _ in range(reps)]
                if not checked:
                    torch.matmul(xs[0], ws[0], out=ys[0])
                    p.check("gemm", p.rel_err(ys[0], xs[0].float() @ ws[0].float()))
                    checked = True

                def run(xs: Any = xs, ws: Any = ws, ys: Any = ys) -> None:
                    for x, w, y in zip(xs, ws, ys, strict=True):
                        torch.matmul(x, w, out=y)

                t = p.time_graph(run, reps)
                p.add("gemm", t, model=model["name"], matrix=mat["name"], tokens=m, k=k, n=n)
                del xs, ys
            del ws
        p.log(f"gemm sweep done for {model['name']} ({time.time() - p.t_start:.0f} s)")


def moe_gemms(p: Any, shapes: dict[str, Any]) -> None:
    """MoE expert GEMMs: touched experts x tokens-per-expert, up then down."""
    torch, rand = p.torch, p.rand
    for model in shapes["models"]:
        moe = model.get("moe")
        if not moe:
            continue
        e_all, top, d, f = moe["num_experts"], moe["experts_per_token"], moe["d_in"], moe["d_ff"]
        w_up = rand(e_all, d, f, scale=d**-0.5)
        w_dn = rand(e_all, f, d, scale=f**-0.5)
        moe_sweep = [1, 16, 256, 2048] if p.quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
        first = True
        for m in moe_sweep:
            touched, tpe = moe_batch(m, e_all, top)
            groups = max(1, e_all // touched)
            xs = [rand(touched, tpe, d) for _ in range(groups)]
            hs = [torch.empty(touched, tpe, f, device=p.dev, dtype=p.bf16) for _ in range(groups)]
            ys = [torch.empty(touched, tpe, d, device=p.dev, dtype=p.bf16) for _ in range(groups)]
            if first:
                torch.bmm(xs[0], w_up[:touched], out=hs[0])
                p.check("moe_bmm", p.rel_err(hs[0], xs[0].float() @ w_up[:touched].float()))
                first = False

            def run_moe(
                xs: Any = xs, hs: Any = hs, ys: Any = ys, touched: int = touched, w_up: Any = w_up, w_dn: Any = w_dn
            ) -> None:
                for i, (x, h, y) in enumerate(zip(xs, hs, ys, strict=True)):
                    sl = slice(i * touched, (i + 1) * touched)
                    torch.bmm(x, w_up[sl], out=h)
                    torch.bmm(h, w_dn[sl], out=y)

            t = p.time_graph(run_moe, groups)
            p.add(
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
        p.log(f"moe sweep done for {model['name']} ({time.time() - p.t_start:.0f} s)")


def decode_attention(p: Any, att: dict[str, Any]) -> None:
    """Decode attention: B sequences x ctx tokens of cache, q query tokens each (GQA folded), fused and unfused."""
    torch, F, rand = p.torch, p.F, p.rand
    hq, hkv, hd = att["num_heads"], att["num_kv_heads"], att["head_dim"]
    group = hq // hkv
    ctx_sweep = [1024, 8192] if p.quick else [256, 1024, 4096, 16384, 32768]
    b_sweep = [1, 64] if p.quick else [1, 4, 16, 64, 256]
    q_sweep = [1, 4] if p.quick else [1, 2, 4, 8]
    kv_budget = 6 * 1024**3  # bytes of K+V per timed set
    first = True
    for ctx in ctx_sweep:
        for b in b_sweep:
            kv_bytes = 2 * b * ctx * hkv * hd * 2
            if kv_bytes > kv_budget:
                continue
            reps = p.rotations(kv_bytes, most=256)
            ks = [rand(b, hkv, ctx, hd) for _ in range(reps)]
            vs = [rand(b, hkv, ctx, hd) for _ in range(reps)]
            for q in q_sweep:
                qs = [rand(b, hkv, group * q, hd) for _ in range(reps)]
                outs = [torch.empty(b, hkv, group * q, hd, device=p.dev, dtype=p.bf16) for _ in range(reps)]
                if first:
                    o = F.scaled_dot_product_attention(qs[0], ks[0], vs[0])
                    ref = F.scaled_dot_product_attention(qs[0].float(), ks[0].float(), vs[0].float())
                    p.check("decode_attention", p.rel_err(o, ref))
                    first = False

                    o2 = p.unfused_attention(qs[0], ks[0], vs[0])
                    p.check("decode_attention_unfused", p.rel_err(o2, ref))

                def run_att(qs: Any = qs, ks: Any = ks, vs: Any = vs, outs: Any = outs) -> None:
                    for qq, kk, vv, oo in zip(qs, ks, vs, outs, strict=True):
                        oo.copy_(F.scaled_dot_product_attention(qq, kk, vv))

                def run_unf(qs: Any = qs, ks: Any = ks, vs: Any = vs, outs: Any = outs) -> None:
                    for qq, kk, vv, oo in zip(qs, ks, vs, outs, strict=True):
                        oo.copy_(p.unfused_attention(qq, kk, vv))

                for impl, fn in (("sdpa", run_att), ("unfused", run_unf)):
                    t = p.time_graph(fn, reps)
                    p.add(
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
    p.log(f"decode attention sweep done ({time.time() - p.t_start:.0f} s)")


def prefill_attention(p: Any, att: dict[str, Any]) -> None:
    """Prefill attention: a chunk against a cached context; several sequences in one step."""
    F, rand = p.F, p.rand
    hq, hd = att["num_heads"], att["head_dim"]
    import importlib

    causal_lower_right = importlib.import_module("torch.nn.attention.bias").causal_lower_right

    cached_sweep = [0, 4096] if p.quick else [0, 2048, 4096, 8192, 16384, 24576]
    first = True
    for chunk, cached in [(c, x) for c in ((512,) if p.quick else (512, 2048)) for x in cached_sweep]:
        L = cached + chunk
        qx = rand(1, hq, chunk, hd)
        kx, vx = rand(1, hq, L, hd), rand(1, hq, L, hd)  # KV heads expanded: compute-bound, bytes are minor
        mask = causal_lower_right(chunk, L)
        if first:
            o = F.scaled_dot_product_attention(qx, kx, vx, attn_mask=mask)
            ref = F.scaled_dot_product_attention(qx.float(), kx.float(), vx.float(), attn_mask=mask)
            p.check("chunked_prefill", p.rel_err(o, ref))
            first = False
        t = p.time_graph(
            lambda qx=qx, kx=kx, vx=vx, mask=mask: F.scaled_dot_product_attention(qx, kx, vx, attn_mask=mask), 1
        )
        p.add("prefill_chunk", t, chunk=chunk, cached=cached, flops=4 * hq * hd * chunk * (cached + (chunk + 1) / 2))
        del qx, kx, vx
    for total, seqs in [(tt, n) for tt in ((2048,) if p.quick else (2048, 8192)) for n in (1, 2, 4, 8, 16, 32)]:
        per = total // seqs
        qx, kx, vx = rand(seqs, hq, per, hd), rand(seqs, hq, per, hd), rand(seqs, hq, per, hd)
        t = p.time_graph(lambda qx=qx, kx=kx, vx=vx: F.scaled_dot_product_attention(qx, kx, vx, is_causal=True), 1)
        p.add("prefill_multi", t, sequences=seqs, tokens=total, flops=4 * hq * hd * seqs * per * (per + 1) / 2)
        del qx, kx, vx
    p.log(f"prefill sweeps done ({time.time() - p.t_start:.0f} s)")


def state_traffic(p: Any, shapes: dict[str, Any]) -> None:
    """Mamba-style state traffic: read-modify-write of the SSM state of B sequences."""
    torch, rand = p.torch, p.rand
    for model in shapes["models"]:
        mamba = model.get("mamba")
        if not mamba:
            continue
        heads, elems = mamba["heads"], mamba["state_elems"]
        per = elems // heads
        for dtype_name, dt in (("float32", torch.float32), ("float16", torch.float16)):
            first = True
            for b in [1, 64] if p.quick else [1, 4, 16, 64, 256, 1024]:
                st_bytes = b * elems * dt.itemsize
                reps = p.rotations(st_bytes, most=32)
                states = [rand(b, heads, per, dtype=dt) for _ in range(reps)]
                decays = [torch.rand(b, heads, 1, device=p.dev, dtype=dt) * 0.5 + 0.5 for _ in range(reps)]
                if first:
                    ref = states[0].float() * decays[0].float()
                    tmp = states[0].clone()
                    tmp.mul_(decays[0])
                    p.check(f"state_rmw_{dtype_name}", p.rel_err(tmp, ref), 1e-2)
                    first = False

                def run_state(states: Any = states, decays: Any = decays) -> None:
                    for s_, d_ in zip(states, decays, strict=True):
                        s_.mul_(d_)

                t = p.time_graph(run_state, reps)
                p.add("state", t, model=model["name"], batch=b, dtype=dtype_name, bytes=2 * st_bytes)
                del states, decays
        p.log(f"state sweep done for {model['name']} ({time.time() - p.t_start:.0f} s)")


def kernel_overhead(p: Any, width: int) -> None:
    """Per-kernel overhead: a stack of small dependent kernels, graphed and eager."""
    xs_small = p.rand(1, width)
    n_k = 320

    def small_stack() -> None:
        x = xs_small
        for _ in range(n_k):
            x = x * 1.0001
        xs_small.copy_(x)

    p.add("overhead_graph", p.time_graph(small_stack, n_k + 1), kernels=n_k + 1)
    p.add("overhead_eager", p.time_eager(small_stack, n_k + 1), kernels=n_k + 1)
    p.log(f"overhead done ({time.time() - p.t_start:.0f} s)")
