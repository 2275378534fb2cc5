"""Fixtures for the trial tests: the seed-1 tiny model, the shared real vLLM server, and a fast fake engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.domain.traffic import LengthDistribution, TrafficShape
from tests.support.fake_engine import FakeEngine
from tests.support.vllm_server import VllmServer, build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_seed1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-seed1"), seed=1)


@pytest.fixture(scope="session")
def baseline_server(engine_server: VllmServer) -> VllmServer:
    """The stock vLLM server of the session (quality baseline, bench, helper checks): the shared ``engine_server``
    on the seed-0 ``tiny_model`` (both from ``tests.support.vllm_server``)."""
    return engine_server


SMALL_SHAPE = TrafficShape(
    arrival_rate_rps=0,
    concurrency=8,
    prompt_tokens=LengthDistribution(mean=64, cv=0.3, maximum=200),
    output_tokens=LengthDistribution(mean=32, cv=0.2, maximum=64),
    repetitiveness=0.5,
)


# ----- a fast fake OpenAI engine (no vLLM): exercises the client, the runner and the cache -------------------------


@pytest.fixture
def fake_engine() -> Iterator[FakeEngine]:
    with FakeEngine() as engine:
        yield engine


@pytest.fixture
def make_fake_engine() -> type[FakeEngine]:
    return FakeEngine


@pytest.fixture
def small_shape() -> TrafficShape:
    return SMALL_SHAPE
