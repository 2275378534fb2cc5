"""The trial cache never fails a cycle: a store that cannot be written keeps the result in memory, and an entry
that does not parse as a result is a miss (dropped), not an error."""

from __future__ import annotations

import pytest

from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.errors import TemporaryError
from controller.trials.cache import MemoryStore, TrialCache, TrialKey

SHAPE = TrafficShape(arrival_rate_rps=0, concurrency=4, prompt_tokens=LengthDistribution(mean=32),
                     output_tokens=LengthDistribution(mean=8))  # fmt: skip
P = Percentiles(p50=0.1, p95=0.2, p99=0.3)


def key(seqs: int) -> TrialKey:
    return TrialKey.of(model="m", gpu_type="g", engine_version="v", config=EngineConfig(max_num_seqs=seqs), shape=SHAPE)


def result(seqs: int) -> TrialResult:
    return TrialResult(config=EngineConfig(max_num_seqs=seqs), shape=SHAPE, slo=SLO(), status=TrialStatus.MEASURED,
                       completed=5, ttft_s=P, tpot_s=P)  # fmt: skip


class DownStore(MemoryStore):
    def save(self, entries: dict[str, str]) -> None:
        raise TemporaryError("the API server is unreachable")


def test_a_store_that_cannot_be_written_keeps_the_result_in_memory() -> None:
    cache = TrialCache(DownStore())
    cache.put(key(64), result(64))  # no exception
    assert cache.get(key(64)) == result(64)


@pytest.mark.security
def test_an_entry_that_is_not_a_result_is_a_miss_and_dropped() -> None:
    store = MemoryStore()
    store.entries = {key(64).encode(): '{"status": "measured"}', key(128).encode(): result(128).model_dump_json()}
    cache = TrialCache(store)
    assert cache.get(key(64)) is None and key(64) not in cache
    assert cache.get(key(128)) == result(128)
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_result_put_again_becomes_the_newest_entry() -> None:
    store = MemoryStore()
    cache = TrialCache(store)
    for seqs in (64, 128, 64):
        cache.put(key(seqs), result(seqs))
    assert list(store.entries) == [key(128).encode(), key(64).encode()]
