"""A synthetic goodput surface over a hybrid MTP model's space (speculation depth, async scheduling, Mamba cache
dtype and backend, slots, batched tokens), with one interaction and one out-of-memory corner, for the optimizer's
tests."""

from __future__ import annotations

import random

from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.policy import parse_policy
from tests.support.builders import failed_trial, shape
from tests.support.optimizer_space import MTP_SPACE

POLICY = parse_policy(
    MTP_SPACE + "  mamba_ssm_cache_dtype: [float32, float16]\n"
    "  mamba_backend: [triton, flashinfer]\n"
    "  max_num_seqs: [128, 256, 512]\n"
    "  max_num_batched_tokens: [4096, 8192, 16384]\n"
)
SHAPE = shape(10, 256)
PCT = Percentiles(p50=0.1, p95=0.1, p99=0.1)
TARGET = TargetRef("ns", "svc", "model")


def surface(c: EngineConfig) -> float:
    """A separable surface with one interaction (MTP depth x batch), like the field notes' workstation."""
    v = 1000.0 * {0: 1.0, 1: 1.5, 2: 1.35, 3: 1.2}[c.k]
    v *= 1.2 if c.async_scheduling else 1.0
    v *= 1.3 if c.mamba_backend == "flashinfer" else 1.0
    v *= 1.15 if c.mamba_ssm_cache_dtype == "float16" else 1.0
    v *= {128: 0.7, 256: 1.0, 512: 0.95}.get(c.max_num_seqs or 0, 0.5)
    v *= {4096: 0.95, 8192: 1.0, 16384: 0.97}.get(c.max_num_batched_tokens or 0, 0.5)
    if c.k == 3 and c.max_num_seqs == 512:
        return 0.0  # e.g. out of memory: a failed trial
    return v


def measured(c: EngineConfig, rng: random.Random | None = None) -> TrialResult:
    """``c``'s trial on ``SHAPE``: the surface's goodput (times 2 % noise from ``rng`` when given), or out of
    memory where the surface is 0."""
    value = surface(c)
    if value == 0:
        return failed_trial(c, SHAPE, status=TrialStatus.INFEASIBLE, reason="OOM")
    noise = 1 + (rng.gauss(0, 0.02) if rng else 0.0)
    return TrialResult(
        config=c,
        shape=SHAPE,
        slo=SLO(),
        status=TrialStatus.MEASURED,
        ttft_s=PCT,
        tpot_s=PCT,
        goodput_tokens_per_s=value * noise,
    )
