"""Trials of other traffic shapes (the windows tuned earlier on the same target) in the optimizer's surrogate: on
top of a shape-aware prior, and which of them count as already tried."""

from __future__ import annotations

import numpy as np
import pytest

from controller.decide.search.candidates import CandidateSet
from controller.decide.search.gp import GpSearch
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from tests.support.builders import shape as traffic
from tests.support.optimizer_space import CONFIGS, POLICY

PCT = Percentiles(p50=0.1, p95=0.1, p99=0.1)


def _shape(concurrency: float) -> TrafficShape:
    return traffic(1, concurrency)


NIGHT, DAY = _shape(4), _shape(256)


def _goodput(cfg: EngineConfig, shape: TrafficShape) -> float:
    """Deep drafts pay at night (low concurrency), one draft token by day; the batch limit matters by day."""
    if shape.concurrency < 32:
        gain = {0: 1.0, 1: 1.3, 2: 1.45, 3: 1.6}[cfg.k]
        seqs = 1.0
    else:
        gain = {0: 1.0, 1: 1.25, 2: 1.05, 3: 0.85}[cfg.k]
        seqs = {64: 0.7, 128: 0.85, 256: 1.0, 512: 0.95}[cfg.max_num_seqs or 256]
    return 1000.0 * (shape.concurrency / 4) ** 0.5 * gain * seqs * (1.05 if cfg.async_scheduling else 1.0)


def _trial(cfg: EngineConfig, shape: TrafficShape) -> TrialResult:
    value = _goodput(cfg, shape)
    return TrialResult(
        config=cfg, shape=shape, slo=SLO(), status=TrialStatus.MEASURED, ttft_s=PCT, tpot_s=PCT,
        goodput_tokens_per_s=value,
    )  # fmt: skip


def _night_history() -> tuple[TrialResult, ...]:
    """A night round that found deep drafts best (none of these configs is the day's best)."""
    picks = [
        {"max_num_seqs": 64},
        {"max_num_seqs": 64, "speculative_method": "mtp", "num_speculative_tokens": 3},
        {"max_num_seqs": 128, "speculative_method": "mtp", "num_speculative_tokens": 3},
        {"max_num_seqs": 512, "speculative_method": "mtp", "num_speculative_tokens": 3},
        {"max_num_seqs": 128, "speculative_method": "mtp", "num_speculative_tokens": 2},
        {"max_num_seqs": 512},
    ]
    configs = [
        EngineConfig.model_validate({"async_scheduling": True, "max_num_batched_tokens": 8192} | p) for p in picks
    ]
    return tuple(_trial(c, NIGHT) for c in configs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_window_with_no_trials_follows_its_own_prior_not_the_other_windows_winner(seed: int) -> None:
    """The prior knows both windows exactly; the night's trials agree with it at night. By day nothing is
    measured yet: the day's pick is the day prior's (one draft token, the batch limit near the concurrency), not
    the night's deep drafts -- the night's trials are judged against the prior at the night's shape."""
    ctx = AdvisorContext(
        target=TargetRef("ns", "svc", "m"), shape=DAY, slo=SLO(), active=STOCK, history=_night_history(),
        max_proposals=1,
    )  # fmt: skip
    (pick,) = OptimizerAdvisor(POLICY, prior=_goodput, seed=seed).suggest(ctx)
    assert pick.rationale.startswith("GP-EI")
    assert (pick.config.speculative_method, pick.config.k, pick.config.max_num_seqs) == ("mtp", 1, 256)


@pytest.mark.parametrize(
    ("measured_on", "blocked"),
    [
        (DAY, True),  # tried on this shape: never suggested again
        (_shape(200), True),  # the same shape bucket counts as this shape
        (NIGHT, False),  # another window's trial: the config may still be this window's best
    ],
)
def test_a_config_tried_on_another_shape_can_be_tried_again(measured_on: TrafficShape, blocked: bool) -> None:
    """The search suggests the one config it is shown as best unless that config was tried on this shape."""
    best = CONFIGS[17]
    search = GpSearch(CandidateSet([best, CONFIGS[20], CONFIGS[40]], shape=DAY), seed=0)
    observed = [(best, 2000.0), (CONFIGS[20], 1000.0), (CONFIGS[40], 900.0)]
    shapes = [measured_on, NIGHT, NIGHT]
    picks = search.suggest(observed, shapes=shapes, n=3)
    assert (best not in [p.config for p in picks]) is blocked


def _cfg(**knobs: object) -> EngineConfig:
    return EngineConfig.model_validate(
        {"async_scheduling": True, "max_num_batched_tokens": 8192, "max_cudagraph_capture_size": 1024} | knobs
    )


def test_a_failure_is_blamed_on_what_the_failures_share_not_on_its_other_knobs() -> None:
    """Every failure ran without async scheduling; the one at 512 sequences is no evidence against 512 sequences:
    the trend of the successes (more sequences, more goodput) leads to 512 with async scheduling on."""
    observed = [
        (_cfg(max_num_seqs=64), 1000.0),
        (_cfg(max_num_seqs=128), 1100.0),
        (_cfg(max_num_seqs=256), 1200.0),
        (_cfg(max_num_seqs=512, async_scheduling=False), 0.0),
        (_cfg(max_num_seqs=64, async_scheduling=False), 0.0),
        (_cfg(max_num_seqs=128, async_scheduling=False), 0.0),
    ]
    space = [c for c in CONFIGS if c.speculative_method == "none" and c.max_cudagraph_capture_size == 1024]
    picks = GpSearch(CandidateSet(space), seed=0).suggest(observed, n=3)
    assert all(p.config.async_scheduling for p in picks)
    assert picks[0].config.max_num_seqs == 512


def test_when_every_trial_failed_the_next_is_the_config_most_unlike_them() -> None:
    failed = [_cfg(max_num_seqs=512, async_scheduling=False, max_num_batched_tokens=m) for m in (4096, 8192, 16384)]
    (pick,) = GpSearch(CandidateSet(CONFIGS), seed=0).suggest([(c, 0.0) for c in failed], n=1)
    assert pick.rationale.startswith("every trial failed")
    assert pick.config.async_scheduling and pick.config.max_num_seqs != 512


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_without_a_prior_the_first_trials_cover_the_knobs(seed: int) -> None:
    """The second and third trials differ from every earlier one in at least 5 of the 6 knobs."""
    cands = CandidateSet(CONFIGS)
    search = GpSearch(cands, seed=seed)
    observed: list[tuple[EngineConfig, float]] = []
    for i in range(3):
        (pick,) = search.suggest(observed, n=1)
        if i:
            assert pick.rationale.startswith("initial design")
            codes = cands.encode(pick.config)
            for earlier, _ in observed:
                assert sum(a != b for a, b in zip(codes, cands.encode(earlier), strict=True)) >= 5
        observed.append((pick.config, 1000.0 + i))
    (fourth,) = search.suggest(observed, n=1)
    assert fourth.rationale.startswith("GP-EI")


def test_per_knob_amplitudes_follow_the_knob_that_explains_the_measurements() -> None:
    """Without a prior the main-effect amplitudes are fitted per knob: a knob whose values move the goodput gets
    a larger amplitude, one that moves nothing a smaller one."""
    from controller.decide.search.kernel import correlations, fit_amplitudes

    space = [c for c in CONFIGS if c.speculative_method == "none" and c.max_cudagraph_capture_size == 1024]
    cands = CandidateSet(space)
    rows = list(range(0, len(space), 2))
    X = cands.inputs.take(rows)
    seqs = {64: -1.0, 128: -0.3, 256: 0.4, 512: 0.9}
    r = np.array([seqs[space[i].max_num_seqs or 256] for i in rows])
    r = r - r.mean()
    corr = correlations(X, X, 0.7, with_shape=False)
    w0 = np.full(corr.shape[2], 0.3**2)
    w = fit_amplitudes(corr, np.diag(np.full(len(rows), 0.02**2)), r, w0, 0.1, None)
    knobs = cands.encoding.ordered + cands.encoding.unordered
    assert w[knobs.index("max_num_seqs")] > w0[0]
    assert w[knobs.index("async_scheduling")] < w0[0]


@pytest.mark.parametrize("structured", [True, False])
def test_another_windows_trials_are_judged_against_the_prior_at_their_own_shape(structured: bool) -> None:
    """The night's trials agree exactly with the prior at night, so they carry no correction to the day: the
    day's predicted ratio of three draft tokens to one is the day prior's. Judged against the day's prior instead
    (no ``priors``), the night's deep-draft winner looks better by day than the prior says."""
    history = _night_history()
    observed = [(r.config, r.goodput_tokens_per_s or 0.0) for r in history]
    shapes = [r.shape for r in history]
    k3 = _cfg(max_num_seqs=256, speculative_method="mtp", num_speculative_tokens=3, max_cudagraph_capture_size=None)
    k1 = k3.model_copy(update={"num_speculative_tokens": 1})
    cands = CandidateSet(CONFIGS, lambda c: _goodput(c, DAY), DAY, structured=structured)
    search = GpSearch(cands, seed=0)

    def ratio(pred: np.ndarray) -> float:
        return float(pred[cands.index[k3.key()]] / pred[cands.index[k1.key()]])

    prior_ratio = _goodput(k3, DAY) / _goodput(k1, DAY)
    own = ratio(search.predict(observed, shapes=shapes, priors=[_goodput(r.config, r.shape) for r in history]))
    assert own == pytest.approx(prior_ratio, rel=0.01)
    assert ratio(search.predict(observed, shapes=shapes)) > prior_ratio * 1.03
