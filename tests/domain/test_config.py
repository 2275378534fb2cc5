"""EngineConfig: validation, identity and the exact `vllm serve` rendering."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from controller.domain.config import STOCK, EngineConfig


@pytest.mark.parametrize(
    ("config", "args"),
    [
        (STOCK, []),
        (
            EngineConfig(speculative_method="mtp", num_speculative_tokens=1),
            ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}'],
        ),
        (
            EngineConfig(speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_max=4),
            [
                "--speculative-config",
                '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2}',
            ],
        ),
        (EngineConfig(async_scheduling=True), ["--async-scheduling"]),
        (EngineConfig(async_scheduling=False), ["--no-async-scheduling"]),
        (
            EngineConfig(
                mamba_ssm_cache_dtype="float16",
                mamba_cache_stochastic_rounding=True,
                mamba_cache_philox_rounds=5,
                mamba_backend="flashinfer",
            ),
            [
                "--mamba-ssm-cache-dtype",
                "float16",
                "--enable-mamba-cache-stochastic-rounding",
                "--mamba-cache-philox-rounds",
                "5",
                "--mamba-backend",
                "flashinfer",
            ],
        ),
        (
            EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, kv_cache_dtype="fp8"),
            ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8"],
        ),
        (EngineConfig(enable_prefix_caching=False), ["--no-enable-prefix-caching"]),
        (
            EngineConfig(max_cudagraph_capture_size=1024, gpu_memory_utilization=0.9, tensor_parallel_size=2),
            ["--max-cudagraph-capture-size", "1024", "--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "2"],
        ),
    ],
)
def test_vllm_args_are_exact(config: EngineConfig, args: list[str]) -> None:
    assert config.vllm_args() == args


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_speculative_tokens": 2}, "num_speculative_tokens must be 0"),
        ({"speculative_method": "mtp"}, "num_speculative_tokens must be >= 1"),
        ({"mamba_cache_stochastic_rounding": True}, "requires mamba_ssm_cache_dtype 'float16'"),
        (
            {"speculative_method": "ngram", "num_speculative_tokens": 3, "async_scheduling": True},
            "async_scheduling cannot be enabled with the CPU drafter 'ngram'",
        ),
        ({"prompt_lookup_max": 4}, "prompt_lookup_max only applies"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"unknown_knob": 1}, "unknown_knob"),
        ({"kv_cache_dtype": "int3"}, "kv_cache_dtype"),
    ],
)
def test_invalid_configs_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EngineConfig.model_validate(kwargs)


def test_key_is_stable_and_distinguishes_configs() -> None:
    a = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
    b = EngineConfig.model_validate(json.loads(a.model_dump_json()))
    assert a.key() == b.key()
    assert a.key() != EngineConfig(speculative_method="mtp", num_speculative_tokens=3).key()
    assert STOCK.label() == "stock"
    assert a.label() == "mtp1"


def test_env_and_serve_command() -> None:
    cfg = EngineConfig(omp_num_threads=1, max_num_seqs=64)
    assert cfg.env() == {"OMP_NUM_THREADS": "1"}
    cmd = cfg.serve_command("org/model", served_model_name="m", port=8001)
    assert cmd[:5] == ["vllm", "serve", "org/model", "--port", "8001"]
    assert cmd[-2:] == ["--max-num-seqs", "64"]
    assert cfg.changed_knobs(STOCK) == {"max_num_seqs": (64, None), "omp_num_threads": (1, None)}
