"""The search bench's library baselines: their knob encoding, the snapping of a suggestion, the modelled target
and expected improvement (pure helpers; the libraries themselves run only in the bench's own environment)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from bench import search_efficiency as se
from controller.decide.search.candidates import CandidateSet
from controller.domain.config import EngineConfig

# max_num_seqs first seen unsorted; the capture size's vLLM default (None) seen after a set value
CONFIGS = [
    EngineConfig(max_num_seqs=256, max_cudagraph_capture_size=2048, kv_cache_dtype="auto"),
    EngineConfig(max_num_seqs=64, max_cudagraph_capture_size=None, kv_cache_dtype="fp8"),
    EngineConfig(max_num_seqs=128, max_cudagraph_capture_size=2048, kv_cache_dtype="fp8"),
    EngineConfig(max_num_seqs=64, max_cudagraph_capture_size=2048, kv_cache_dtype="auto"),
]


def _encoding() -> tuple[Any, list[str]]:
    enc = se.LibraryEncoding(CandidateSet(CONFIGS))
    return enc, list(enc.knobs)


def test_ordered_knobs_are_coded_by_rank_with_the_default_lowest_and_the_rest_as_categories() -> None:
    enc, knobs = _encoding()
    assert set(knobs) == {"kv_cache_dtype", "max_num_seqs", "max_cudagraph_capture_size"}
    col = {k: enc.codes[:, j].tolist() for j, k in enumerate(knobs)}
    assert col["max_num_seqs"] == [2, 0, 1, 0]
    assert col["max_cudagraph_capture_size"] == [1, 0, 1, 1]
    assert col["kv_cache_dtype"] == [0, 1, 1, 0]  # first seen first
    assert enc.ordered == {"max_num_seqs", "max_cudagraph_capture_size"}


def test_features_scale_ranks_to_the_unit_interval_and_one_hot_the_categories() -> None:
    enc, knobs = _encoding()
    x = enc.features()
    assert x.shape == (4, 1 + 1 + 2)  # two ordered knobs, one category of two values
    seqs = knobs.index("max_num_seqs")
    offset = sum(1 if k in enc.ordered else enc.levels[k] for k in knobs[:seqs])
    assert x[:, offset].tolist() == [1.0, 0.0, 0.5, 0.0]
    assert np.all((x >= 0) & (x <= 1))


@pytest.mark.parametrize(
    ("want", "blocked", "expected"),
    [
        (0, set(), (0, False)),  # a valid untried suggestion stands for itself
        (0, {0}, (3, True)),  # tried: the nearest untried config by knobs in common (3 differs in one knob)
        (2, {2}, (0, True)),  # a tie (every other config differs in two knobs) goes to the first in the set
        (1, {0, 1, 2, 3}, None),  # nothing left
    ],
)
def test_a_suggestion_snaps_to_the_nearest_untried_valid_config(
    want: int, blocked: set[int], expected: tuple[int, bool] | None
) -> None:
    enc, _ = _encoding()
    got = enc.snap(enc.codes[want].tolist(), {CONFIGS[i].key() for i in blocked})
    assert got == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([300.0, 0.0, 400.0], [300.0, 200.0, 400.0]),  # a failure at half the best
        ([100.0, 0.0, 400.0], [100.0, 100.0, 400.0]),  # ... never above a config that ran
        ([0.0, 0.0], [1.0, 1.0]),  # nothing ran
        ([], []),
    ],
)
def test_targets_are_log_goodput_with_a_failure_at_half_the_best(values: list[float], expected: list[float]) -> None:
    assert se.library_targets(values).tolist() == pytest.approx([math.log(x) for x in expected])


def test_expected_improvement_grows_with_the_mean_and_the_uncertainty() -> None:
    mu = np.array([0.0, 0.5, 1.0, 0.5])
    sd = np.array([0.1, 0.1, 0.1, 0.5])
    ei = se.expected_improvement(mu, sd, best=0.5, xi=0.0)
    assert ei[0] < ei[1] < ei[2]
    assert ei[3] > ei[1]
    sure = se.expected_improvement(np.array([1.0, 0.0]), np.array([0.0, 0.0]), best=0.5, xi=0.0)
    assert sure.tolist() == pytest.approx([0.5, 0.0])
