"""What the optimizer holds is bounded by construction, whatever a legal policy's space.

A space of at most ``MAX_POOL_CONFIGS`` raw combinations (every shipped preset) is walked whole, exactly as
before; a larger one, up to the 100,000-combination limit, gives a pool of at most ``MAX_POOL_CONFIGS`` valid
configs, drawn without listing the space and with a bounded number of checks. The pools and encoded candidate sets
of every optimizer in the process share one cache bounded in candidates, per optimizer and in total.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from controller.decide.search.candidates import CandidateCache, CandidateSet, candidate_configs
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.policy import load_policy, parse_policy
from controller.policy.knob_ranges import IntRange
from controller.policy.space import (
    MAX_POOL_CONFIGS,
    MAX_POOL_EVALUATIONS,
    MAX_SPACE_COMBINATIONS,
    SearchSpace,
)

REPO = Path(__file__).resolve().parents[3]

#: The hybrid-MTP preset with batching as fine ranges: 98,304 raw combinations, under the limit.
WIDE = parse_policy(
    "target: {model: nemotron-3-super-nvfp4, gpu: gb300-dgx-station, gpu_family: blackwell, hybrid: true,"
    " has_mtp: true, gpu_memory_gib: 252}\n"
    "space:\n"
    "  speculative_method: [none, mtp]\n"
    "  num_speculative_tokens: {min: 1, max: 3}\n"
    "  async_scheduling: [true, false]\n"
    "  mamba_ssm_cache_dtype: [float32, float16]\n"
    "  mamba_cache_stochastic_rounding: [false, true]\n"
    "  mamba_backend: [triton, flashinfer]\n"
    "  max_num_seqs: {min: 8, max: 512, step: 8}\n"
    "  max_num_batched_tokens: {min: 1024, max: 16384, step: 1024}\n"
)


@dataclass
class CountingFeasibility:
    """A memory-fit oracle that refuses configs above ``max_seqs`` slots and counts what it was asked."""

    max_seqs: int = 1 << 20
    asked: list[str] = field(default_factory=list)

    def __call__(self, config: EngineConfig) -> str | None:
        self.asked.append(config.key())
        return "does not fit" if (config.max_num_seqs or 0) > self.max_seqs else None


def shape(concurrency: float) -> TrafficShape:
    return TrafficShape(
        arrival_rate_rps=concurrency / 4,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=2000),
        output_tokens=LengthDistribution(mean=300),
    )


def presets() -> Iterator[Path]:
    yield from sorted((REPO / "policies/v1").glob("*.yaml"))


@pytest.mark.parametrize("path", list(presets()), ids=lambda p: p.stem)
def test_every_shipped_preset_is_walked_whole_as_before(path: Path) -> None:
    policy = load_policy(path)
    assert policy.space.product_size() <= MAX_POOL_CONFIGS
    assert candidate_configs(policy) == list(policy.space.configs(policy.feasibility))


@pytest.mark.security
def test_a_space_at_the_limit_gives_a_bounded_pool_of_valid_configs_in_policy() -> None:
    feasibility = CountingFeasibility(max_seqs=384)
    policy = WIDE.with_feasibility(feasibility)
    assert 0.95 * MAX_SPACE_COMBINATIONS < policy.space.product_size() <= MAX_SPACE_COMBINATIONS
    pool = candidate_configs(policy)
    assert len(pool) == MAX_POOL_CONFIGS
    assert len({c.key() for c in pool}) == len(pool)
    assert len(feasibility.asked) <= MAX_POOL_EVALUATIONS  # bounded work, not 98,304 checks
    for config in pool:
        assert policy.validate_config(config) == [], config.label()
        assert config.max_num_seqs is not None and config.max_num_seqs <= 384
    assert candidate_configs(policy) == pool  # deterministic


SPARSE = [
    # (what, slots allowed by memory fit, pool size expected): a space mostly infeasible gives what it finds within
    # the evaluation budget, an all-infeasible one nothing
    ("half fits", 256, None),
    ("a sliver fits", 16, None),
    ("nothing fits", 0, 0),
]


@pytest.mark.parametrize(("max_seqs", "expected"), [c[1:] for c in SPARSE], ids=[c[0] for c in SPARSE])
def test_a_mostly_infeasible_space_costs_a_bounded_walk(max_seqs: int, expected: int | None) -> None:
    feasibility = CountingFeasibility(max_seqs=max_seqs)
    pool = WIDE.space.sampled_configs(feasibility)
    assert len(feasibility.asked) <= MAX_POOL_EVALUATIONS
    assert all((c.max_num_seqs or 0) <= max_seqs for c in pool)
    if expected is not None:
        assert len(pool) == expected
    else:
        assert 0 < len(pool) <= MAX_POOL_CONFIGS


def test_value_at_matches_the_listed_values() -> None:
    space = SearchSpace(
        max_num_seqs=IntRange(min=64, max=1000, scale="log2"),
        max_num_batched_tokens=IntRange(min=1024, max=9000, step=1024),
        async_scheduling=[True, None, True, False],
    )
    for knob in space.knob_names():
        assert [space.value_at(knob, i) for i in range(space.value_count(knob))] == space.allowed(knob)
    assert space.value_at("kv_cache_dtype", 0) == space.base.kv_cache_dtype


@pytest.mark.security
def test_the_optimizer_on_a_space_at_the_limit_holds_a_pool_and_proposes_in_policy() -> None:
    cache = CandidateCache()
    policy = WIDE
    advisor = OptimizerAdvisor(policy, cache=cache)
    target = TargetRef("prod", "wide", "nemotron-3-super-nvfp4")
    for concurrency in (8, 64):
        context = AdvisorContext(target, shape(concurrency), SLO(), STOCK, (), max_proposals=2)
        proposals = advisor.propose(context)
        assert len(proposals) == 2
        for proposal in proposals:
            assert policy.validate_config(proposal.config) == []
    assert len(advisor.configs()) == MAX_POOL_CONFIGS
    assert cache.candidates() <= 3 * MAX_POOL_CONFIGS  # the pool and one set per shape


def _set(n: int) -> CandidateSet:
    return CandidateSet([EngineConfig(max_num_seqs=s) for s in range(1, n + 1)])


CACHE_BOUNDS = [
    # (what, max candidates, sets per owner, puts as (owner, shape, size), entries kept as (owner, shape))
    ("within both bounds", 100, 4, [(1, "a", 10), (1, "b", 10), (2, "a", 10)], [(1, "a"), (1, "b"), (2, "a")]),
    ("per owner: its oldest set goes", 100, 2, [(1, "a", 5), (1, "b", 5), (1, "c", 5)], [(1, "b"), (1, "c")]),
    (
        "in total: the least recently used goes, whoever owns it",
        25,
        4,
        [(1, "a", 10), (2, "a", 10), (3, "a", 10)],
        [(2, "a"), (3, "a")],
    ),
    ("one entry over the total is still kept", 5, 4, [(1, "a", 10)], [(1, "a")]),
]


@pytest.mark.parametrize(
    ("max_candidates", "per_owner", "puts", "kept"), [c[1:] for c in CACHE_BOUNDS], ids=[c[0] for c in CACHE_BOUNDS]
)
def test_the_candidate_cache_is_bounded_per_optimizer_and_in_total(
    max_candidates: int, per_owner: int, puts: list[tuple[int, str, int]], kept: list[tuple[int, str]]
) -> None:
    cache = CandidateCache(max_candidates=max_candidates, max_per_owner=per_owner)
    for owner, key, size in puts:
        cache.put_candidate_set(owner, key, _set(size))
    assert [(o, k) for o, k, _ in puts if cache.candidate_set(o, k) is not None] == kept


def test_a_recently_used_set_outlives_an_older_one() -> None:
    cache = CandidateCache(max_candidates=25)
    cache.put_candidate_set(1, "a", _set(10))
    cache.put_candidate_set(2, "a", _set(10))
    assert cache.candidate_set(1, "a") is not None  # used: now the most recent
    cache.put_candidate_set(3, "a", _set(10))
    assert cache.candidate_set(2, "a") is None
    assert cache.candidate_set(1, "a") is not None


def test_pools_count_against_the_same_bound() -> None:
    cache = CandidateCache(max_candidates=15)
    cache.put_pool(1, [EngineConfig(max_num_seqs=s) for s in range(1, 11)])
    cache.put_candidate_set(1, "a", _set(10))
    assert cache.pool(1) is None and cache.candidate_set(1, "a") is not None
    assert cache.candidates() == 10


def test_pools_of_the_same_space_share_their_configs() -> None:
    """Two optimizers on one space (two TunedServices on one preset): the second pool holds the first's instances,
    equal as before; the table of shared configs is bounded with the cache."""
    cache = CandidateCache(max_candidates=25)
    first = [EngineConfig(max_num_seqs=s) for s in range(1, 11)]
    second = [EngineConfig(max_num_seqs=s) for s in range(1, 11)]
    cache.put_pool(1, first)
    cache.put_pool(2, second)
    assert second == [EngineConfig(max_num_seqs=s) for s in range(1, 11)]
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert cache.pool(2) is second
    for owner in range(3, 10):  # other spaces: the oldest pools go, and with them their configs
        cache.put_pool(owner, [EngineConfig(max_num_seqs=100 * owner + s) for s in range(10)])
    assert cache.shared_configs() <= 25 + 10
