"""The optimizer's surrogate knows what the knobs are: ordered knobs with distance-aware correlations, speculation
as one method-then-depth knob, the traffic shape as an input, noise pooled from repeats, determinism for a seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller.decide.search.candidates import CandidateSet
from controller.decide.search.gp import GpSearch
from controller.decide.search.kernel import KnobEncoding, correlations
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.decide.signals import noise
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from tests.support.builders import shape as traffic
from tests.support.optimizer_space import CONFIGS, POLICY


def _shape(concurrency: float) -> TrafficShape:
    return traffic(1, concurrency)


def _config(**knobs: object) -> EngineConfig:
    return EngineConfig.model_validate({"async_scheduling": True, "max_num_batched_tokens": 8192} | knobs)


def _corr(a: EngineConfig, b: EngineConfig, knob: str, length: float = 0.7) -> float:
    """The correlation of one knob's input between two configs, under the space's encoding."""
    enc = KnobEncoding(CONFIGS)
    cands = CandidateSet(CONFIGS)
    pa, ua, ca = enc.encode([a])
    pb, ub, cb = enc.encode([b])
    k = correlations(
        type(cands.inputs)(pa, ua, ca, np.zeros((1, 5))),
        type(cands.inputs)(pb, ub, cb, np.zeros((1, 5))),
        length,
        with_shape=False,
    )[0, 0]
    return float(k[enc.ordered.index(knob) if knob in enc.ordered else len(enc.ordered) + enc.unordered.index(knob)])


@pytest.mark.parametrize(
    ("knob", "base", "near", "far"),
    [
        ("num_speculative_tokens", {"speculative_method": "mtp", "num_speculative_tokens": 1}, 2, 3),
        ("max_num_seqs", {"max_num_seqs": 64}, 128, 512),
        ("max_num_seqs", {"max_num_seqs": 512}, 256, 64),
        ("max_num_batched_tokens", {"max_num_batched_tokens": 4096}, 8192, 16384),
        ("max_cudagraph_capture_size", {"max_cudagraph_capture_size": 1024}, 1024, 2048),
    ],
)
def test_a_nearer_value_of_an_ordered_knob_is_more_correlated(
    knob: str, base: dict[str, object], near: int, far: int
) -> None:
    a = _config(**({"max_num_seqs": 128} | base))
    b = a.model_copy(update={knob: near})
    c = a.model_copy(update={knob: far})
    same, k_near, k_far = _corr(a, a, knob), _corr(a, b, knob), _corr(a, c, knob)
    assert same == pytest.approx(1.0)
    assert same >= k_near > k_far > 0


def test_unordered_knobs_and_the_plain_kernel_see_no_distance() -> None:
    a = _config(max_num_seqs=64)
    # async scheduling is unordered: alike when equal, else not
    assert _corr(a, a.model_copy(update={"async_scheduling": False}), "async_scheduling") == 0.0
    plain = KnobEncoding(CONFIGS, frozenset())
    assert plain.ordered == [] and "max_num_seqs" in plain.unordered


def test_a_knob_left_at_its_default_is_its_own_point() -> None:
    a = _config(max_num_seqs=64, max_cudagraph_capture_size=1024)
    unset = a.model_copy(update={"max_cudagraph_capture_size": None})
    assert _corr(unset, unset, "max_cudagraph_capture_size") == 1.0
    assert 0 < _corr(a, unset, "max_cudagraph_capture_size") < 1


def test_speculation_is_one_knob_method_then_depth() -> None:
    enc = KnobEncoding(CONFIGS)
    assert "speculative_method" in enc.unordered and "num_speculative_tokens" in enc.ordered
    depth = enc.ordered.index("num_speculative_tokens")
    none, k1, k2, k3 = (
        _config(max_num_seqs=64),
        *(_config(max_num_seqs=64, speculative_method="mtp", num_speculative_tokens=k) for k in (1, 2, 3)),
    )
    pos = enc.encode([none, k1, k2, k3])[0][:, depth]
    # no speculation is depth 0, next to depth 1; deeper steps are closer on the log scale
    assert list(pos) == sorted(pos) and pos[0] == 0.0
    assert pos[1] - pos[0] > pos[2] - pos[1] > pos[3] - pos[2] > 0
    # turning speculation on is said once, by the method; the depth input only says how deep
    assert _corr(none, k1, "speculative_method") == 0.0 and _corr(k1, k3, "speculative_method") == 1.0


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([[1000.0]], None),  # no repeat
        ([[1000.0, 1000.0]], (0.0, 1)),
        ([[1000.0, 1100.0]], (math.log(1.1) / math.sqrt(2), 1)),
        ([[1000.0, 1100.0], [500.0, 550.0]], (math.log(1.1) / math.sqrt(2), 2)),  # pooled over configs
        ([[1000.0, 1100.0], [700.0]], (math.log(1.1) / math.sqrt(2), 1)),  # a single measurement adds nothing
        ([[1000.0, 0.0, 1100.0]], (math.log(1.1) / math.sqrt(2), 1)),  # a failed measurement says nothing
    ],
)
def test_noise_is_pooled_from_repeats(groups: list[list[float]], expected: tuple[float, int] | None) -> None:
    got = noise.pooled(groups)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got[0] == pytest.approx(expected[0]) and got[1] == expected[1]


def test_the_search_measures_its_noise_from_the_repeats_it_is_given() -> None:
    """Repeats in the observations set the noise (their mean is the observation), whatever figure is passed."""
    search = GpSearch(CandidateSet(CONFIGS), seed=0)
    picked = [CONFIGS[i] for i in (0, 50, 100, 150, 200)]
    observed = [(c, 1000.0 + 37 * i) for i, c in enumerate(picked)]
    repeated = [*observed, (picked[0], 1100.0)]
    merged = [(picked[0], 1050.0), *observed[1:]]
    figure = math.log(1100 / 1000) / math.sqrt(2)
    with_repeat = search.suggest(repeated, n=1, noise=0.2)[0]
    told = search.suggest(merged, n=1, noise=figure)[0]
    assert with_repeat.config == told.config and with_repeat.predicted == pytest.approx(told.predicted)
    assert "noise 6.7%" in with_repeat.rationale


def test_deterministic_for_a_seed() -> None:
    observed = [(CONFIGS[i % len(CONFIGS)], 900.0 + (i * 7919) % 300) for i in (3, 70, 140, 210, 280, 350)]
    runs = [GpSearch(CandidateSet(CONFIGS), seed=s).suggest(observed, n=3) for s in (4, 4, 5)]
    assert runs[0] == runs[1]
    first = GpSearch(CandidateSet(CONFIGS), seed=4).suggest([], n=1)
    assert first == GpSearch(CandidateSet(CONFIGS), seed=4).suggest([], n=1)
    assert first != GpSearch(CandidateSet(CONFIGS), seed=9).suggest([], n=1)


PCT = Percentiles(p50=0.1, p95=0.1, p99=0.1)


def _depth_surface(cfg: EngineConfig, concurrency: float) -> float:
    """Deep drafts pay at low concurrency, shallow ones at high concurrency (the verify cost grows with batch)."""
    gain = {0: 1.0, 1: 1.3, 2: 1.4, 3: 1.5} if concurrency < 32 else {0: 1.0, 1: 1.25, 2: 1.1, 3: 0.9}
    return 1000.0 * gain[cfg.k] * (1.1 if cfg.max_num_seqs == 256 else 1.0)


def _trial(cfg: EngineConfig, shape: TrafficShape) -> TrialResult:
    value = _depth_surface(cfg, shape.concurrency)
    return TrialResult(
        config=cfg, shape=shape, slo=SLO(), status=TrialStatus.MEASURED, ttft_s=PCT, tpot_s=PCT,
        goodput_tokens_per_s=value,
    )  # fmt: skip


def test_depth_by_concurrency_is_learned_across_shapes() -> None:
    """Trials at a low and a high concurrency teach the surrogate a depth x concurrency interaction: at a new
    shape near each, it ranks the depths as that neighbour does."""
    low, high = _shape(4), _shape(256)
    depths = [_config(max_num_seqs=256, speculative_method="mtp", num_speculative_tokens=k) for k in (1, 2, 3)]
    depths = [_config(max_num_seqs=256), *depths]
    others = [_config(max_num_seqs=s) for s in (64, 512)]
    history = [_trial(c, s) for s in (low, high) for c in [*depths, *others]]
    observed = [(t.config, t.goodput_tokens_per_s or 0.0) for t in history]
    shapes = [t.shape for t in history]
    for near, best_k in ((_shape(6), 3), (_shape(192), 1)):
        cands = CandidateSet(CONFIGS, shape=near)
        pred = GpSearch(cands, seed=0).predict(observed, shapes=shapes)
        by_depth = {c.k: float(pred[cands.index[c.key()]]) for c in depths}
        assert max(by_depth, key=by_depth.__getitem__) == best_k


def test_the_advisor_learns_from_neighbouring_shapes() -> None:
    """Nothing measured on this shape yet: the advisor's pick follows what the other shapes measured."""
    high = _shape(256)
    depths = [_config(max_num_seqs=256, speculative_method="mtp", num_speculative_tokens=k) for k in (1, 2, 3)]
    history = tuple(_trial(c, high) for c in [_config(max_num_seqs=256), *depths[1:], _config(max_num_seqs=64)])
    ctx = AdvisorContext(
        target=TargetRef("ns", "svc", "m"), shape=_shape(200), slo=SLO(), active=STOCK, history=history,
        max_proposals=1,
    )  # fmt: skip
    (pick,) = OptimizerAdvisor(POLICY, seed=0).suggest(ctx)
    assert pick.rationale.startswith("GP-EI") and "4 configs observed" in pick.rationale
    # the neighbours' lesson: speculation on, and not as deep as the depth that measured worst there
    assert pick.config.speculative_method == "mtp" and pick.config.k < 3
