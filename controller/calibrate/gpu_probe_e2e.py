"""End-to-end decode steps for the GPU probe: a decoder stack with the dense model's shapes and random bf16 weights,
one CUDA-graphed decode step per batch size, query length and context. The probe (``gpu_probe.py``, next to this
file) runs it with ``--e2e`` and hands it PyTorch and its timing helpers, so this file imports neither.
"""

from __future__ import annotations

import time
from typing import Any


def decode_steps(
    torch: Any,
    F: Any,
    dev: Any,
    e2e: dict[str, Any],
    add: Any,
    time_graph: Any,
    time_eager: Any,
    rand: Any,
    quick: bool,
    log: Any,
    t_start: float,
    unfused_attention: Any,
) -> None:
    """A decoder stack with the model's shapes and random bf16 weights: one decode step, CUDA-graphed."""
    h, layers, inter, vocab = e2e["hidden"], e2e["layers"], e2e["intermediate"], e2e["vocab"]
    hq, hkv, hd = e2e["num_heads"], e2e["num_kv_heads"], e2e["head_dim"]
    group = hq // hkv
    if quick:
        layers = 4
    bf16 = torch.bfloat16
    qkv_w = [rand(h, (hq + 2 * hkv) * hd, scale=h**-0.5) for _ in range(layers)]
    o_w = [rand(hq * hd, h, scale=(hq * hd) ** -0.5) for _ in range(layers)]
    gu_w = [rand(h, 2 * inter, scale=h**-0.5) for _ in range(layers)]
    dn_w = [rand(inter, h, scale=inter**-0.5) for _ in range(layers)]
    n1 = [torch.ones(h, device=dev, dtype=bf16) for _ in range(layers)]
    n2 = [torch.ones(h, device=dev, dtype=bf16) for _ in range(layers)]
    lm = rand(h, vocab, scale=h**-0.5)
    kv_budget = 48 * 1024**3

    def rms(x: Any, w: Any) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(bf16) * w

    cases = [(b, q, c) for c in (1024, 4096) for b in (1, 16, 64, 256) for q in (1, 2, 4)]
    if quick:
        cases = [(1, 1, 1024), (16, 2, 1024)]
    for b, q, ctx in cases:
        per_layer = 2 * b * (ctx + q) * hkv * hd * 2
        n_buf = max(1, min(layers, int(kv_budget // per_layer)))
        kc = [rand(b, hkv, ctx + q, hd) for _ in range(n_buf)]
        vc = [rand(b, hkv, ctx + q, hd) for _ in range(n_buf)]
        x0 = rand(b * q, h)
        logits = torch.empty(b * q, vocab, device=dev, dtype=bf16)

        def step(
            kc: Any = kc,
            vc: Any = vc,
            x0: Any = x0,
            logits: Any = logits,
            b: int = b,
            q: int = q,
            ctx: int = ctx,
            n_buf: int = n_buf,
            attn: Any = F.scaled_dot_product_attention,
        ) -> None:
            x = x0
            for i in range(layers):
                y = rms(x, n1[i])
                qkv = y @ qkv_w[i]
                qh, kh, vh = qkv.split([hq * hd, hkv * hd, hkv * hd], dim=-1)
                kk, vv = kc[i % n_buf], vc[i % n_buf]
                kk[:, :, ctx:] = kh.view(b, q, hkv, hd).transpose(1, 2)
                vv[:, :, ctx:] = vh.view(b, q, hkv, hd).transpose(1, 2)
                qg = qh.view(b, q, hkv, group, hd).permute(0, 2, 3, 1, 4).reshape(b, hkv, group * q, hd)
                a = attn(qg, kk, vv)
                a = a.view(b, hkv, group, q, hd).permute(0, 3, 1, 2, 4).reshape(b * q, hq * hd)
                x = x + a @ o_w[i]
                y = rms(x, n2[i])
                gu = y @ gu_w[i]
                g_, u_ = gu.chunk(2, dim=-1)
                x = x + (F.silu(g_) * u_) @ dn_w[i]
            logits.copy_(x @ lm)

        case = {"batch": b, "query": q, "context": ctx, "layers": layers, "kv_buffers": n_buf}
        impls = (("sdpa", F.scaled_dot_product_attention), ("unfused", unfused_attention))
        _time_step(torch, step, logits, impls, case, add, time_graph, time_eager, log, t_start)
        del kc, vc, x0, logits
        torch.cuda.empty_cache()


def _time_step(
    torch: Any,
    step: Any,
    logits: Any,
    impls: tuple[tuple[str, Any], ...],
    case: dict[str, int],
    add: Any,
    time_graph: Any,
    time_eager: Any,
    log: Any,
    t_start: float,
) -> None:
    """Time one case's decode step with each attention implementation (graphed; eager too for one sequence)."""
    b, q, ctx = case["batch"], case["query"], case["context"]
    for impl, attn in impls:
        fn = lambda attn=attn, step=step: step(attn=attn)  # noqa: E731
        t = time_graph(fn, 1)
        row: dict[str, Any] = {"impl": impl, **case}
        if b == 1 and q == 1:
            row["eager_seconds"] = time_eager(fn, 1)
        if not torch.isfinite(logits).all():
            raise SystemExit("e2e step produced non-finite logits")
        add("e2e", t, **row)
        log(f"e2e {impl} B={b} q={q} ctx={ctx}: {t * 1e3:.3f} ms ({time.time() - t_start:.0f} s)")
