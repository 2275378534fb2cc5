"""A cached trial result answers a request only when it holds for it (config, shape bucket, SLO, a passed quality
report for a gated config), served with the request's exact shape; stored log tails are bounded in lines and
bytes. Table-driven, on the in-memory store (the ConfigMap store and its signatures: tests/adapters/kube/canary)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.domain.config import EngineConfig
from controller.domain.log_tail import MAX_BYTES, MAX_LINE_BYTES, MAX_LINES, bounded_log_tails, bounded_tail, clip_utf8
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, QualityReport, TrialResult, TrialStatus
from controller.ports import TrialBudget, TrialRequest
from controller.trials.cache import CachedTrials, MemoryStore, TrialCache, TrialKey, refusal

SHAPE = TrafficShape(arrival_rate_rps=0, concurrency=4, prompt_tokens=LengthDistribution(mean=32),
                     output_tokens=LengthDistribution(mean=8))  # fmt: skip
# the same bucket (log2 of the concurrency and lengths), not the same exact shape
NEAR = SHAPE.model_copy(update={"concurrency": 5, "prompt_tokens": LengthDistribution(mean=34)})
FAR = SHAPE.model_copy(update={"concurrency": 64})
P = Percentiles(p50=0.01, p95=0.02, p99=0.03)
SLO_NOW = SLO(ttft_seconds=2, tpot_seconds=0.1)
FP8 = EngineConfig(kv_cache_dtype="fp8")
SEQS = EngineConfig(max_num_seqs=64)
PASSED = QualityReport(exact_match_rate=1.0, mean_logprob_divergence=0.0, prompts=16, passed=True)
FAILED_GATE = QualityReport(exact_match_rate=0.5, mean_logprob_divergence=0.2, prompts=16, passed=False)
BUDGET = TrialBudget(duration_s=20, warmup_s=0, max_requests=12, startup_timeout_s=5)


def key(config: EngineConfig, shape: TrafficShape = SHAPE) -> TrialKey:
    return TrialKey.of(model="m", gpu_type="g", engine_version="img:1", config=config, shape=shape)


def request(config: EngineConfig, shape: TrafficShape = SHAPE, slo: SLO = SLO_NOW) -> TrialRequest:
    return TrialRequest(TargetRef("ns", "svc", "m"), config, shape, slo, BUDGET)


def result(
    config: EngineConfig,
    *,
    shape: TrafficShape = SHAPE,
    slo: SLO = SLO_NOW,
    status: TrialStatus = TrialStatus.MEASURED,
    quality: QualityReport | None = None,
) -> TrialResult:
    return TrialResult(
        config=config, shape=shape, slo=slo, status=status, completed=12, goodput_tokens_per_s=100.0, ttft_s=P,
        tpot_s=P, quality=quality, reason="" if status is TrialStatus.MEASURED else "quality gate: exact match 50%",
    )  # fmt: skip


# (stored under the key of, stored result, request, gated) -> why it is refused ("" = served)
CASES: dict[str, tuple[EngineConfig, TrialResult, TrialRequest, bool, str]] = {
    "matches": (SEQS, result(SEQS), request(SEQS), False, ""),
    "same bucket, another exact shape": (SEQS, result(SEQS), request(SEQS, NEAR), False, ""),
    "another config under the key": (SEQS, result(FP8), request(SEQS), False, "holds config"),
    "another shape bucket under the key": (SEQS, result(SEQS, shape=FAR), request(SEQS), False, "shape bucket"),
    "judged under a looser TPOT": (
        SEQS, result(SEQS, slo=SLO_NOW.model_copy(update={"tpot_seconds": 0.5})), request(SEQS), False, "SLO",
    ),
    "judged under a tighter TTFT": (
        SEQS, result(SEQS, slo=SLO_NOW.model_copy(update={"ttft_seconds": 0.5})), request(SEQS), False, "SLO",
    ),
    "lossy without a quality report": (FP8, result(FP8), request(FP8), True, "quality report"),
    "lossy with a failed report yet measured": (FP8, result(FP8, quality=FAILED_GATE), request(FP8), True, "quality"),
    "lossy with a passed report": (FP8, result(FP8, quality=PASSED), request(FP8), True, ""),
    "lossy, rejected by the gate": (
        FP8, result(FP8, status=TrialStatus.REJECTED, quality=FAILED_GATE), request(FP8), True, "",
    ),
    "not gated, no report needed": (FP8, result(FP8), request(FP8), False, ""),
}  # fmt: skip


@pytest.mark.security
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cached_result_is_served_only_when_it_holds_for_the_request(case: str) -> None:
    under, stored, req, gated, why = CASES[case]
    store = MemoryStore()
    store.entries = {key(under).encode(): stored.model_dump_json()}
    cache = TrialCache(store)
    assert (
        (why in refusal(key(under), stored, req, gated=gated))
        if why
        else not refusal(key(under), stored, req, gated=gated)
    )
    served = cache.lookup(key(req.config, req.shape), req, gated=gated)
    if why:
        assert served is None and cache.misses == 1 and cache.hits == 0
    else:
        assert served is not None and cache.hits == 1
        assert served.shape == req.shape and served.slo == req.slo  # the request's exact shape: selection can use it
        assert served.model_copy(update={"shape": stored.shape}) == stored


@pytest.mark.security
def test_an_entry_holding_another_config_than_its_key_is_a_miss_and_dropped() -> None:
    store = MemoryStore()
    store.entries = {key(SEQS).encode(): result(FP8).model_dump_json()}
    cache = TrialCache(store)
    assert cache.get(key(SEQS)) is None
    assert key(SEQS) not in cache and cache.misses == 1


class CountingTester:
    def __init__(self, make: Callable[[TrialRequest], TrialResult]) -> None:
        self.make = make
        self.runs: list[TrialRequest] = []

    def run(self, req: TrialRequest) -> TrialResult:
        self.runs.append(req)
        return self.make(req)


@pytest.mark.security
def test_cached_trials_measure_what_the_cache_cannot_answer_and_store_it() -> None:
    inner = CountingTester(lambda r: result(r.config, shape=r.shape, slo=r.slo, quality=PASSED))
    cache = TrialCache()
    cache.put(key(FP8), result(FP8))  # stored without a quality report (from before the config was gated)
    tester = CachedTrials(inner, cache, key=lambda r: key(r.config, r.shape), gated=lambda c: c == FP8)
    first = tester.run(request(FP8))
    assert len(inner.runs) == 1 and first.quality == PASSED  # measured, with the gate
    assert tester.run(request(FP8, NEAR)) == first.model_copy(update={"shape": NEAR})  # now served
    tightened = SLO_NOW.model_copy(update={"tpot_seconds": 0.02})
    assert tester.run(request(FP8, slo=tightened)).slo == tightened and len(inner.runs) == 2
    fresh = request(FP8, slo=tightened)
    tester.run(TrialRequest(fresh.target, fresh.config, fresh.shape, fresh.slo, fresh.budget, fresh=True))
    assert len(inner.runs) == 3  # a fresh request always measures
    failed = CountingTester(lambda r: result(r.config, status=TrialStatus.FAILED))
    CachedTrials(failed, cache, key=lambda r: key(r.config, r.shape), gated=lambda c: False).run(request(SEQS))
    assert key(SEQS) not in cache  # a failed measurement says nothing and is not kept


LONG = "é" * 2000  # 4,000 bytes


@pytest.mark.security
@pytest.mark.parametrize(
    ("lines", "newest_kept"),
    [
        (["short"] * 10, 10),
        ([f"{i} x" for i in range(500)], MAX_LINES),
        ([f"{i} {LONG}" for i in range(30)], 16),  # each cut to 511 bytes and a newline: 16 fill 8 KiB
        ([LONG], 1),
        ([], 0),
    ],
)
def test_a_stored_log_tail_keeps_its_newest_lines_within_lines_and_bytes(lines: list[str], newest_kept: int) -> None:
    tail = bounded_tail(lines)
    assert len(tail) == newest_kept
    assert all(len(line.encode()) <= MAX_LINE_BYTES for line in tail)
    assert sum(len(line.encode()) + 1 for line in tail) <= MAX_BYTES
    if tail:
        assert lines[-1].startswith(tail[-1].removesuffix(" [...]"))  # the newest line (it says why) is kept
    wire = {"trials": [{"log_tail": lines, "reason": "r"}], "log_tail_count": 3}
    assert bounded_log_tails(wire) == {"trials": [{"log_tail": list(tail), "reason": "r"}], "log_tail_count": 3}


def test_clipping_in_bytes_never_splits_a_character() -> None:
    assert clip_utf8("aé", 2) == "a" and clip_utf8("aé", 3) == "aé" and clip_utf8("abc", 0) == ""
