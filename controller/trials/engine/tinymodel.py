"""Build a tiny random-weight Llama model and a byte-level BPE tokenizer, offline, into a directory.

Runs inside the ENGINE venv (it needs ``torch``, ``transformers`` and ``tokenizers``)::

    $SHIFTLIGHT_ENGINE_PYTHON -m controller.trials.engine.tinymodel OUT_DIR --seed 0 [--dtype float32]

Self-contained on purpose: it imports nothing else from ``controller``. The output directory carries a
``shiftlight-tinymodel.json`` stamp holding a content key (this file's source, seed, dtype); a second call with
the same key returns at once without rebuilding. The same seed always gives the same weights and tokenizer.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
from pathlib import Path

STAMP = "shiftlight-tinymodel.json"
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: How many standard-library source files feed the tokenizer (sorted, so the corpus is stable).
CORPUS_FILES = 120


def content_key(seed: int, dtype: str) -> str:
    """Identity of one build: this recipe's source, the seed and the dtype."""
    source = Path(__file__).read_bytes()
    return hashlib.sha256(source + f"|{seed}|{dtype}".encode()).hexdigest()[:16]


def is_built(out_dir: Path, seed: int, dtype: str) -> bool:
    stamp = out_dir / STAMP
    if not stamp.is_file():
        return False
    try:
        return bool(json.loads(stamp.read_text()).get("key") == content_key(seed, dtype))
    except (OSError, ValueError):
        return False


def _corpus() -> list[str]:
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())[:CORPUS_FILES]
    return [str(p) for p in files]


def build(out_dir: Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    """Build (or reuse) the tiny model in ``out_dir``; returns ``out_dir``."""
    if is_built(out_dir, seed, dtype):
        return out_dir
    # Imported by name so the operator's type checker (which has no torch) sees plain modules.
    torch = importlib.import_module("torch")
    tk = importlib.import_module("tokenizers")
    transformers = importlib.import_module("transformers")
    Tokenizer, decoders, models = tk.Tokenizer, tk.decoders, tk.models
    pre_tokenizers, processors, trainers = tk.pre_tokenizers, tk.processors, tk.trainers
    LlamaConfig, LlamaForCausalLM = transformers.LlamaConfig, transformers.LlamaForCausalLM
    PreTrainedTokenizerFast = transformers.PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    (out_dir / STAMP).write_text(json.dumps({"key": content_key(seed, dtype), "seed": seed, "dtype": dtype}))
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = parser.parse_args(argv)
    build(args.out_dir, args.seed, args.dtype)
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
