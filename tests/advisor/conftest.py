from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.trial import TrialResult
from controller.policy import Policy, parse_policy
from tests.support.builders import shape, trial

POLICY_YAML = """
name: agent-test
target: {gpu_family: blackwell, hybrid: true, has_mtp: true, gpu_memory_gib: 252}
space:
  speculative_method: [none, mtp]
  num_speculative_tokens: {min: 1, max: 3}
  async_scheduling: [true, false]
  mamba_ssm_cache_dtype: [float32, float16]
  mamba_cache_stochastic_rounding: [false, true]
  mamba_backend: [triton, flashinfer]
  max_num_seqs: [128, 256, 512]
  max_num_batched_tokens: [4096, 8192]
trial_budget: {max_trials: 6, canary_gpu_minutes: 600}
approval: manual-for-lossy
llm: {enabled: true, timeout_s: 5, token_budget: 100000}
"""

SHAPE = shape(20, 256, 512, 512)
PCT = (0.1, 0.2, 0.3)


def surface(c: EngineConfig) -> float:
    v = 1000.0 * {0: 1.0, 1: 1.5, 2: 1.35, 3: 1.2}[c.k]
    v *= 1.2 if c.async_scheduling else 1.0
    v *= 1.3 if c.mamba_backend == "flashinfer" else 1.0
    v *= 1.15 if c.mamba_ssm_cache_dtype == "float16" else 1.0
    v *= {128: 0.7, 256: 1.0, 512: 0.95}.get(c.max_num_seqs or 0, 0.6)
    return v


def measure(c: EngineConfig) -> TrialResult:
    return trial(
        c, SHAPE, slo=SLO(), goodput=surface(c), ttft=PCT, tpot=PCT, throughput=0.0, completed=0, duration_s=120
    )


@pytest.fixture
def policy() -> Policy:
    return parse_policy(POLICY_YAML)


@pytest.fixture
def make_context() -> Callable[..., AdvisorContext]:
    def make(
        history: tuple[TrialResult, ...] = (),
        n: int = 2,
        target: TargetRef | None = None,
        active: EngineConfig = STOCK,
    ) -> AdvisorContext:
        return AdvisorContext(target or TargetRef("prod", "chat", "nemotron"), SHAPE, SLO(), active, history, n)

    return make
