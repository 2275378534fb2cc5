"""Build a model directory for ``vllm serve --load-format dummy`` from one of the project's model profiles.

    python3 scripts/gpu/model_dir.py llama-3.1-8b /root/models/llama-3.1-8b

Writes ``config.json`` of the real architecture (layer count, widths, heads and vocabulary from the profile in
``controller/simulator/profiles/model-NAME.yaml``; what the profile does not carry, such as the MLP width and
RoPE settings, from the table below, taken from the model's published config.json) and a word-level tokenizer
with the model's full vocabulary (token ``i`` is the word ``t<i>``, so any random id sequence decodes to text
that encodes back to the same ids; enough for random prompts). No weights: vLLM initialises them at random.

Standard library, PyYAML and ``tokenizers`` only (all on the H200 image), so it runs on the GPU host.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "controller" / "simulator" / "profiles"

#: Per profile: what config.json needs beyond the profile's fields (from the published config.json).
ARCH: dict[str, dict[str, object]] = {
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "intermediate_size": 14336,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    },
}

#: Hybrid Gated DeltaNet / attention with an MTP head: Qwen3.6-27B's text model (the profile's widths) in bf16.
#: The profile is the 4-bit body; dummy weights cannot be quantised without a checkpoint, so this measures the
#: same layer widths at bf16 weight cost. vLLM 0.26 serves it as Qwen3_5ForConditionalGeneration; the vision
#: tower is left at its default and kept out of the profile run with --limit-mm-per-prompt (measure.py).
HYBRID: dict[str, dict[str, object]] = {
    "qwen3.6-27b-int4": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "qwen3_5_text",
            "intermediate_size": 17408,
            "hidden_act": "silu",
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "full_attention_interval": 4,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 48,
            "mtp_num_hidden_layers": 1,
            "mamba_ssm_dtype": "float32",
            "attn_output_gate": True,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000000,
                "partial_rotary_factor": 0.25,
                "mrope_section": [11, 11, 10],
                "mrope_interleaved": True,
            },
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
    },
}

SPECIAL = ["<s>", "</s>", "<unk>"]


def config_for(name: str, layers: int | None = None) -> dict[str, object]:
    """The profile's config.json; ``layers``: that many layers at the profile's widths (a hybrid keeps its
    attention interval), so a server of a large model starts in a fraction of the time and memory."""
    profile = yaml.safe_load((PROFILES / f"model-{name}.yaml").read_text(encoding="utf-8"))
    if layers is not None:
        if layers < 1 or layers > int(profile["num_layers"]):
            raise SystemExit(f"--layers must be in 1..{profile['num_layers']}")
        if name in HYBRID:
            text = HYBRID[name]["text_config"]
            assert isinstance(text, dict)
            interval = int(text["full_attention_interval"])
            if layers % interval:
                raise SystemExit(f"--layers must be a multiple of the attention interval {interval}")
            profile["attention_layers"] = layers // interval
        profile["num_layers"] = layers
    if name not in ARCH and name not in HYBRID:
        raise SystemExit(f"no architecture table for {name!r}; known: {', '.join([*ARCH, *HYBRID])}")
    widths: dict[str, object] = {
        "num_hidden_layers": profile["num_layers"],
        "hidden_size": profile["hidden_size"],
        "vocab_size": profile["vocab_size"],
        "num_attention_heads": profile["num_attention_heads"],
        "num_key_value_heads": profile["num_kv_heads"],
        "head_dim": profile["head_dim"],
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    if name in HYBRID:
        cfg = json.loads(json.dumps(HYBRID[name]))
        text = cfg["text_config"]
        text.update(widths)
        if profile["attention_layers"] != profile["num_layers"] // int(text["full_attention_interval"]):
            raise SystemExit(f"{name}: full_attention_interval does not give the profile's attention layers")
        cfg["vocab_size"] = profile["vocab_size"]
        return dict(cfg)
    cfg = dict(ARCH[name])
    cfg.update(widths)
    return cfg


def vocab_size(cfg: dict[str, object]) -> int:
    return int(str(cfg["vocab_size"]))


def tokenizer_json(vocab_size: int) -> dict[str, object]:
    """A WordLevel tokenizer of ``vocab_size`` entries, whitespace pre-tokenizer, no post-processor."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL), vocab_size)})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(SPECIAL)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def build(name: str, out: Path, layers: int | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_for(name, layers)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(vocab_size(cfg))))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 131072,
                "add_bos_token": False,
                "clean_up_tokenization_spaces": False,
            }
        )
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("profile", choices=sorted([*ARCH, *HYBRID]))
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, help="this many layers at the profile's widths (default: all)")
    args = parser.parse_args(argv)
    build(args.profile, args.out, args.layers)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
