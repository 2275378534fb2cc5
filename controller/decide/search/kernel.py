"""What the optimizer's surrogate knows about the knobs: their encoding and the kernel built on it. Pure.

Each varied knob is one *input* of the Gaussian process, with a per-input correlation ``k_i(a, b)`` in [0, 1]:

* **ordered knobs** (speculation depth, ``max_num_seqs``, ``max_num_batched_tokens``, the CUDA-graph capture size,
  lookup length, threads, TP, memory share) sit on a log scale, normalised to [0, 1] over the values the space
  allows, with a squared-exponential correlation ``exp(-d^2 / 2 l^2)``: a nearer depth or batch limit is more
  alike. ``None`` (vLLM's default) is its own point: fully alike to itself, ``NONE_CORRELATION`` alike to a set
  value.
* **unordered knobs** (method, booleans, dtypes, backends): alike when equal, else not.
* **speculation is one structured knob**: the method (unordered, ``none`` included) and the depth
  ``log2(1 + k)`` (ordered; ``none`` has depth 0, next to depth 1), so turning speculation on is said once, and
  how deep is a distance.
* **the traffic shape** (concurrency, prompt and output lengths on a log2 scale, repetitiveness, prefix share) is
  one more input, so trials of neighbouring shapes inform each other.

The covariance of two points is ``bias + s_main^2 * sum_i k_i + s_pair^2 * sum_{i<j} k_i k_j``: one main effect
per input and one interaction per pair of inputs, the pairs including depth x shape (MTP depth against
concurrency), depth x ``max_num_seqs`` and batch limits x shape (batched tokens against prompt length). With
only unordered knobs this is the exponential-Hamming-style kernel of "knobs in common" the optimizer used before;
the ordered inputs and the shape are what it adds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape

ORDERED: frozenset[str] = frozenset(
    {
        "num_speculative_tokens",
        "prompt_lookup_max",
        "mamba_cache_philox_rounds",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_cudagraph_capture_size",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "omp_num_threads",
    }
)
"""Knobs whose values are ordered (distance-aware kernel on a log scale)."""
EXACT_SHARE = 0.5
"""Share of an ordered knob's correlation that is "same value" rather than distance: a neighbouring value is alike,
but not as alike as the same value even at a long length-scale."""
NONE_CORRELATION = 0.3
"""Correlation between a knob left at vLLM's default (``None``) and a set value of that knob."""
SHAPE_SCALES: dict[str, float] = {
    "concurrency": 2.0,
    "prompt": 2.0,
    "output": 2.0,
    "repetitiveness": 0.35,
    "prefix": 0.35,
}
"""Length-scale of each shape feature: a factor 4 in concurrency or length (2 in log2) is one length-scale."""


def shape_features(shape: TrafficShape | None) -> np.ndarray:
    """(concurrency, prompt, output) on a log2 scale, repetitiveness and prefix share; divided by their scales."""
    if shape is None:
        return np.zeros(len(SHAPE_SCALES))
    raw = (
        math.log2(max(shape.concurrency, 1.0)),
        math.log2(max(shape.prompt_tokens.mean, 1.0)),
        math.log2(max(shape.output_tokens.mean, 1.0)),
        shape.repetitiveness,
        shape.prefix_share,
    )
    return np.array([v / s for v, s in zip(raw, SHAPE_SCALES.values(), strict=True)])


def _ordered_position(knob: str, value: Any) -> float:
    if knob == "num_speculative_tokens":
        return math.log2(1 + int(value))
    if knob == "gpu_memory_utilization":
        return float(value)
    return math.log2(max(float(value), 1e-9))


class KnobEncoding:
    """The varied knobs of a finite space: per config, a position per ordered knob and a code per unordered one."""

    def __init__(self, configs: Sequence[EngineConfig], ordered: frozenset[str] = ORDERED) -> None:
        """``ordered``: the knobs to treat as ordered (empty: every knob unordered, a "knobs in common" kernel)."""
        dumps = [c.model_dump() for c in configs]
        self.knobs = [k for k in EngineConfig.model_fields if len({repr(d[k]) for d in dumps}) > 1]
        self.ordered = [k for k in self.knobs if k in ordered]
        self.unordered = [k for k in self.knobs if k not in ordered]
        self.categories: dict[str, list[str]] = {
            k: list(dict.fromkeys(repr(d[k]) for d in dumps)) for k in self.unordered
        }
        self.span: dict[str, tuple[float, float]] = {}
        for k in self.ordered:
            pos = [_ordered_position(k, d[k]) for d in dumps if d[k] is not None]
            lo, hi = (min(pos), max(pos)) if pos else (0.0, 1.0)
            self.span[k] = (lo, hi - lo if hi > lo else 1.0)
        self.pos, self.unset, self.cat = self.encode(configs)

    @property
    def inputs(self) -> int:
        """Number of knob inputs (ordered + unordered), without the shape."""
        return len(self.knobs)

    def encode(self, configs: Sequence[EngineConfig]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in [0, 1] (n, ordered), ``None`` flags (n, ordered), codes (n, unordered); -1 = not in space)."""
        n = len(configs)
        pos = np.zeros((n, len(self.ordered)))
        unset = np.zeros((n, len(self.ordered)), dtype=bool)
        cat = np.full((n, len(self.unordered)), -1, dtype=np.int64)
        for r, c in enumerate(configs):
            d = c.model_dump()
            for j, k in enumerate(self.ordered):
                if d[k] is None:
                    unset[r, j] = True
                else:
                    lo, width = self.span[k]
                    pos[r, j] = (_ordered_position(k, d[k]) - lo) / width
            for j, k in enumerate(self.unordered):
                value = repr(d[k])
                cats = self.categories[k]
                cat[r, j] = cats.index(value) if value in cats else -1
        return pos, unset, cat


class Inputs:
    """Encoded points (configs, each at a traffic shape) for the kernel."""

    def __init__(
        self, pos: np.ndarray, unset: np.ndarray, cat: np.ndarray, shape: np.ndarray, prior: np.ndarray | None = None
    ) -> None:
        """``prior``: the prior's value at each point's own traffic shape where known (NaN: not given)."""
        self.pos, self.unset, self.cat, self.shape = pos, unset, cat, shape
        self.prior = prior if prior is not None else np.full(int(shape.shape[0]), np.nan)

    def __len__(self) -> int:
        return int(self.shape.shape[0])

    def take(self, rows: np.ndarray | Sequence[int]) -> Inputs:
        idx = np.asarray(rows, dtype=np.int64)
        return Inputs(self.pos[idx], self.unset[idx], self.cat[idx], self.shape[idx], self.prior[idx])

    @staticmethod
    def stack(parts: Sequence[Inputs]) -> Inputs:
        return Inputs(
            np.concatenate([p.pos for p in parts]),
            np.concatenate([p.unset for p in parts]),
            np.concatenate([p.cat for p in parts]),
            np.concatenate([p.shape for p in parts]),
            np.concatenate([p.prior for p in parts]),
        )


def correlations(a: Inputs, b: Inputs, length: float, *, with_shape: bool) -> np.ndarray:
    """Per-input correlations ``k_i`` between every row of ``a`` and of ``b`` -> (len(a), len(b), inputs)."""
    parts: list[np.ndarray] = []
    if a.pos.shape[1]:
        d = a.pos[:, None, :] - b.pos[None, :, :]
        k = EXACT_SHARE * (np.abs(d) < 1e-9) + (1 - EXACT_SHARE) * np.exp(-0.5 * (d / length) ** 2)
        ua, ub = a.unset[:, None, :], b.unset[None, :, :]
        k = np.where(ua & ub, 1.0, np.where(ua | ub, NONE_CORRELATION, k))
        parts.append(k)
    if a.cat.shape[1]:
        same = (a.cat[:, None, :] == b.cat[None, :, :]) & (a.cat[:, None, :] >= 0)
        parts.append(same.astype(float))
    if with_shape:
        d2 = ((a.shape[:, None, :] - b.shape[None, :, :]) ** 2).sum(axis=2)
        parts.append(np.exp(-0.5 * d2)[:, :, None])
    if not parts:
        return np.zeros((len(a), len(b), 0))
    return np.concatenate(parts, axis=2)


def covariance(k: np.ndarray, main: np.ndarray, s_pair: float, s_shape_pair: float | None = None) -> np.ndarray:
    """``sum_i main_i * k_i + s_pair^2 * sum_{i<j} k_i k_j`` from per-input correlations ``k`` (..., inputs) and
    per-input main-effect variances ``main`` (inputs,). With ``s_shape_pair`` the last input is the traffic shape,
    and its pairs with the knobs (how much a knob's effect differs between shapes) have that amplitude instead."""
    if s_shape_pair is None:
        s1 = k.sum(axis=-1)
        s2 = (k * k).sum(axis=-1)
        out: np.ndarray = k @ main + s_pair**2 * (s1 * s1 - s2) / 2
        return out
    knobs, shape = k[..., :-1], k[..., -1]
    s1 = knobs.sum(axis=-1)
    s2 = (knobs * knobs).sum(axis=-1)
    out = k @ main + s_pair**2 * (s1 * s1 - s2) / 2 + s_shape_pair**2 * shape * s1
    return out


def self_covariance(main: np.ndarray, s_pair: float, s_shape_pair: float | None = None) -> float:
    """The covariance of a point with itself (every ``k_i`` is 1)."""
    n = len(main)
    if s_shape_pair is None:
        return float(main.sum()) + s_pair**2 * n * (n - 1) / 2
    return float(main.sum()) + s_pair**2 * (n - 1) * (n - 2) / 2 + s_shape_pair**2 * (n - 1)


#: Gradient steps of the amplitude fit; prior sd and bound of each log amplitude multiplier.
_ARD_STEPS, _ARD_SD, _ARD_BOUND = 40, 1.0, 2.0


def fit_amplitudes(
    corr: np.ndarray, fixed: np.ndarray, r: np.ndarray, w0: np.ndarray, s_pair: float, sp: float | None
) -> np.ndarray:
    """Per-input main-effect variances (ARD) by maximum a posteriori marginal likelihood: ``w0`` scaled per input
    by ``exp(2 theta_i)``, ``theta_i`` with a normal prior (sd ``_ARD_SD``) and bounded by ``_ARD_BOUND``, fitted
    by normalised gradient ascent on the log marginal likelihood (analytic gradient). ``corr``: the per-input
    correlations among the observations (n, n, inputs); ``fixed``: the covariance terms that do not scale."""
    base = fixed + covariance(corr, np.zeros_like(w0), s_pair, sp)
    theta = np.zeros(len(w0))
    step = 0.5
    for _ in range(_ARD_STEPS):
        w = w0 * np.exp(2 * theta)
        K = base + corr @ w
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            break
        inv = np.linalg.solve(L.T, np.linalg.solve(L, np.eye(len(r))))
        alpha = inv @ r
        a = np.outer(alpha, alpha) - inv
        grad = w * np.einsum("ab,abi->i", a, corr) - theta / _ARD_SD**2
        top = float(np.abs(grad).max())
        if top < 1e-4:
            break
        theta = np.clip(theta + step * grad / max(top, 1.0), -_ARD_BOUND, _ARD_BOUND)
        step *= 0.93
    out: np.ndarray = w0 * np.exp(2 * theta)
    return out


__all__ = [
    "NONE_CORRELATION",
    "ORDERED",
    "SHAPE_SCALES",
    "Inputs",
    "KnobEncoding",
    "correlations",
    "covariance",
    "self_covariance",
    "shape_features",
]
