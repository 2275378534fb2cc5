"""The GPU probe's parts of one dense decoder layer: its non-GEMM ops together and its four GEMMs back to back, with
the bytes and kernels the layer ops count from the stack's code.

The probe (``gpu_probe.py``, next to this file) loads it and hands it the timing harness, so this file imports neither
PyTorch nor the operator; the operator's fit imports the counts.
"""

from __future__ import annotations

from typing import Any


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


def _check_layer_ops(p: Any, rms: Any, s: dict[str, Any], b: int, q: int, e2e: dict[str, Any], pad: int) -> None:
    """The timed ops compute what they should: the cache write copies the new keys, the RMSNorm matches float64."""
    torch = p.torch
    hq, hkv, hd = e2e["num_heads"], e2e["num_kv_heads"], e2e["head_dim"]
    k_src = s["qkv"][:, hq * hd : hq * hd + hkv * hd].reshape(b, q, hkv, hd).transpose(1, 2)
    p.check("layer_ops_cache_write", p.rel_err(s["kc"][:, :, pad:], k_src), 1e-6)
    x2 = s["x"]
    ref = x2.double() * torch.rsqrt(x2.double().pow(2).mean(-1, keepdim=True) + 1e-6) * s["n1"].double()
    p.check("layer_ops_rmsnorm", p.rel_err(rms(x2, s["n1"]), ref))


def layer_parts(p: Any, e2e: dict[str, Any], tok_sweep: list[int]) -> None:
    """Two primitives of one dense decoder layer (the end-to-end stack's own code, ``gpu_probe_e2e.py``):

    * ``layer_ops``: everything but its GEMMs and the attention kernel (the RMSNorms, the cache writes, the query
      and attention-output layout copies, the residual adds, SiLU and the gate product) at B sequences x q query
      tokens, each replay over distinct layers' inputs, norm weights and cache buffers;
    * ``gemm_chain``: its four GEMMs (qkv, o, gate_up, down) back to back over several layers' distinct weights.
    """
    torch, F, dev, rand, quick = p.torch, p.F, p.dev, p.rand, p.quick
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
        reps = p.rotations(set_bytes, most=32)
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

        counted = p.count_kernels(ops)
        t = p.time_graph(ops, reps)
        if (b, q) == cases[0]:
            _check_layer_ops(p, rms, sets[-1], b, q, e2e, pad)
        p.add(
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

        t = p.time_graph(chain, layers)
        if m == tok_sweep[0]:
            p.check("gemm_chain", p.rel_err(outs[3], act_in.float() @ weights[-1][3].float()))
        p.add("gemm_chain", t, tokens=m, layers=layers, matrices=mats)
        del x_in, a_in, act_in, outs
    del weights
    torch.cuda.empty_cache()
