"""Layer shapes to time, derived from model profiles (written as the JSON the GPU probe reads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.simulator.profiles import ModelProfile

#: Mamba2 heads the state is split into for the decay broadcast (Nemotron-H and Mamba2 models use 128).
DEFAULT_MAMBA_HEADS = 128


def _round_to(x: float, step: int) -> int:
    return max(step, round(x / step) * step)


def moe_layers(model: ModelProfile) -> int:
    """Layers that carry routed experts: those that are neither attention nor Mamba in a hybrid, else all."""
    if not model.num_experts:
        return 0
    if model.has_mamba:
        return max(1, model.num_layers - model.attention_layers - model.mamba_layers)
    return model.num_layers


def dense_intermediate(model: ModelProfile) -> int:
    """MLP width of a dense (attention-only) model: layer parameters less attention, over three hidden-wide
    matrices (gate, up, down), rounded to a multiple of 256."""
    h = model.hidden_size
    attn = h * (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim
    attn += model.num_attention_heads * model.head_dim * h
    per_layer = model.dense_params_b * 1e9 / model.num_layers
    return _round_to((per_layer - attn) / (3 * h), 256)


def dense_matrices(model: ModelProfile) -> list[dict[str, Any]]:
    """The weight matrices ``[k -> n]`` every token of a dense layer multiplies, and the lm_head."""
    h, hd = model.hidden_size, model.head_dim
    inter = dense_intermediate(model)
    return [
        {"name": "qkv", "k": h, "n": (model.num_attention_heads + 2 * model.num_kv_heads) * hd},
        {"name": "o", "k": model.num_attention_heads * hd, "n": h},
        {"name": "gate_up", "k": h, "n": 2 * inter},
        {"name": "down", "k": inter, "n": h},
        {"name": "lm_head", "k": h, "n": model.vocab_size},
    ]


def moe_shape(model: ModelProfile, latent: int | None = None) -> dict[str, Any] | None:
    """One routed expert as ``d_in -> d_ff -> d_in`` (``latent`` is the expert input width of latent-MoE models;
    the hidden size otherwise); ``d_ff`` follows from the routed parameter count."""
    layers = moe_layers(model)
    if not layers:
        return None
    d_in = latent or model.hidden_size
    per_expert = model.routed_expert_params_b * 1e9 / (layers * model.num_experts)
    return {
        "num_experts": model.num_experts,
        "experts_per_token": model.experts_per_token,
        "d_in": d_in,
        "d_ff": _round_to(per_expert / (2 * d_in), 64),
    }


def mamba_shape(model: ModelProfile) -> dict[str, Any] | None:
    if not model.has_mamba or not model.ssm_state_elems_per_layer:
        return None
    return {"heads": DEFAULT_MAMBA_HEADS, "state_elems": model.ssm_state_elems_per_layer}


def probe_shapes(
    dense: ModelProfile,
    others: Sequence[ModelProfile] = (),
    *,
    moe_latent: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The probe's input: ``dense`` gives the GEMM, attention and end-to-end shapes; ``others`` add their MoE and
    Mamba primitives (and their dense GEMMs when they have no experts)."""
    latents = moe_latent or {}
    models: list[dict[str, Any]] = [{"name": dense.name, "dense_matrices": dense_matrices(dense)}]
    for m in others:
        entry: dict[str, Any] = {"name": m.name, "dense_matrices": []}
        moe = moe_shape(m, latents.get(m.name))
        if moe:
            entry["moe"] = moe
        mamba = mamba_shape(m)
        if mamba:
            entry["mamba"] = mamba
        models.append(entry)
    return {
        "models": models,
        "attention": {
            "num_heads": dense.num_attention_heads,
            "num_kv_heads": dense.num_kv_heads,
            "head_dim": dense.head_dim,
        },
        "overhead_width": dense.hidden_size,
        "e2e": {
            "model": dense.name,
            "hidden": dense.hidden_size,
            "layers": dense.num_layers,
            "intermediate": dense_intermediate(dense),
            "vocab": dense.vocab_size,
            "num_heads": dense.num_attention_heads,
            "num_kv_heads": dense.num_kv_heads,
            "head_dim": dense.head_dim,
        },
    }
