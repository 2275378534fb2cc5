"""The Gaussian-process search behind the optimizer: expected improvement over the candidate set. Pure.

The candidate set is :mod:`controller.decide.search.candidates`; the kernel, the knob encoding and the fit of the
kernel's amplitudes are :mod:`controller.decide.search.kernel`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from controller.decide.search.candidates import CandidateSet
from controller.decide.search.kernel import (
    Inputs,
    correlations,
    covariance,
    fit_amplitudes,
    self_covariance,
    shape_features,
)
from controller.decide.signals import noise as noises
from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape

_FLOOR = 0.5  # failed / SLO-violating trials are modelled as 50% of the best (keeps the log finite)
_PRIOR_FLOOR = 0.05  # the prior keeps its ranking down to 5% of its best (below, configs are alike to it)
_S_FAILED = 0.3  # ... give or take this much (log space)
_SCALES = (0.5, 1.0, 2.0)  # kernel amplitude multipliers tried by marginal likelihood
_S_BIAS = 0.3  # prior sd of the overall level (log space, around the offset)
_S_PRIOR_SCALE = 0.3  # prior sd of the log-prior's exponent around 1
_S_MAIN, _S_PAIR = 0.3, 0.1  # prior sd of one knob's main effect / one pair's interaction (log space)
_S_MAIN_PRIOR, _S_PAIR_PRIOR = 0.12, 0.05  # the same, as corrections on top of a prior
_S_SHAPE_PAIR = 0.3  # prior sd of how much one knob's effect differs between distant shapes (log space)
_S_SHAPE = 1.5  # prior sd of the traffic shape's main effect: goodput levels differ far more between shapes
_LENGTH, _LENGTHS = 0.7, (0.35, 0.7, 1.4)  # ordered knobs' length-scale (share of the knob's log range): default, grid
_NOISES = (0.01, 0.02, 0.04, 0.08)  # noise figures tried by marginal likelihood when no repeat measured the noise
_ARD_MIN = 4  # without a prior, per-input amplitudes fitted by marginal likelihood from this many observations on
_XI = 0.005  # expected improvement's margin (log space)
_FAIL_MODEL = True  # without a prior, failures modelled apart (a failure-chance regression), not as a low goodput
_FAIL_MAIN, _FAIL_PAIR, _FAIL_NOISE = 0.35, 0.1, 0.2  # its per-knob amplitude, pair amplitude and noise
_INIT = 3  # without a prior, the first this many trials each differ most from the configs tried so far


@dataclass(frozen=True)
class Suggestion:
    config: EngineConfig
    rationale: str
    predicted: float | None = None
    uncertainty: float | None = None
    """The posterior standard deviation of log goodput at the config (None for a pick the model did not make)."""
    success_chance: float = 1.0
    """The failure model's chance that the config runs (1 without failed trials)."""


def _norm_pdf(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return out


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    return out


_erf = np.vectorize(math.erf, otypes=[float])


@dataclass(frozen=True)
class _Posterior:
    mu: np.ndarray  # posterior mean of log(goodput / scale) per candidate
    sd: np.ndarray
    t: np.ndarray  # the observations, on the same scale
    here: np.ndarray  # which observations are on the candidates' shape bucket
    scale: float
    noise: float
    length: float = _LENGTH


class GpSearch:
    """Expected-improvement search with a structured Gaussian process over a :class:`CandidateSet`.

    The kernel (``controller.decide.search.kernel``) knows which knobs are ordered, treats speculation as a
    method plus a depth, and takes the traffic shape as an input. The measurement noise is pooled from repeated
    measurements in ``observed`` (one config measured more than once on one shape); without a repeat it is the
    ``noise`` figure given (e.g. what the tuning round measured), else chosen by marginal likelihood."""

    def __init__(self, candidates: CandidateSet, *, seed: int = 0) -> None:
        self.c = candidates
        self.seed = seed

    def suggest(
        self,
        observed: Sequence[tuple[EngineConfig, float]],
        *,
        exclude: Iterable[str] = (),
        n: int = 1,
        baseline: EngineConfig | None = None,
        noise: float | None = None,
        shapes: Sequence[TrafficShape | None] | None = None,
        priors: Sequence[float] | None = None,
    ) -> list[Suggestion]:
        """``noise``: the relative standard deviation of one measurement (log space) to assume when ``observed``
        holds no repeat; ``shapes``: the traffic shape each observation was measured on (default: the
        candidates' own shape); ``priors``: the prior's value of each observation at the shape it was measured on
        (default: the candidates' prior, i.e. at the candidates' shape). Observations of another shape need it:
        their residual from the prior is what the surrogate carries over to this shape, and a residual taken
        against this shape's prior would credit another window's winner with this window's gain."""
        c = self.c
        blocked = np.zeros(len(c), dtype=bool)
        for key in exclude:
            if key in c.index:
                blocked[c.index[key]] = True
        here = c.shape.bucket() if c.shape is not None else None
        for i, (cfg, _) in enumerate(observed):
            at = shapes[i] if shapes is not None else None
            if cfg.key() in c.index and (at is None or here is None or at.bucket() == here):
                blocked[c.index[cfg.key()]] = True  # tried on this shape (another shape's trials may be redone)
        rng = np.random.default_rng([self.seed, len(observed)])
        pts, ys, current, repeats = self._points(observed, shapes, priors)
        measured = noises.pooled(repeats)
        figure = noises.clamped(measured[0]) if measured else (noises.clamped(noise) if noise is not None else None)
        out: list[Suggestion] = []
        for _ in range(n):
            if blocked.all():
                break
            tried = [cfg for cfg, _ in observed] + [s.config for s in out]
            if tried and (not observed or (c.prior is None and len(ys) < _INIT)):
                idx, why, pred = self._diverse(tried, blocked, rng)
                out.append(Suggestion(c.configs[idx], why, pred))
                blocked[idx] = True
                continue
            idx, why, pred, sd, success = self._one(pts, ys, current, blocked, rng, baseline, figure)
            out.append(Suggestion(c.configs[idx], why, pred, sd, success))
            blocked[idx] = True
            believed = pred if pred is not None else (max(ys, default=0.0))
            pts = Inputs.stack([pts, c.inputs.take([idx])]) if len(ys) else c.inputs.take([idx])
            ys, current = [*ys, believed], [*current, True]  # kriging believer for the rest of the batch
        return out

    def _points(
        self,
        observed: Sequence[tuple[EngineConfig, float]],
        shapes: Sequence[TrafficShape | None] | None,
        priors: Sequence[float] | None = None,
    ) -> tuple[Inputs, list[float], list[bool], list[list[float]]]:
        """Observations merged per (config, shape): encoded inputs (with the prior at their shape where given),
        mean value, at the candidates' shape bucket, and the groups of repeated values (for the noise)."""
        c = self.c
        groups: dict[tuple[str, str], tuple[EngineConfig, TrafficShape | None, list[float]]] = {}
        at: dict[tuple[str, str], float] = {}
        for i, (cfg, y) in enumerate(observed):
            shape = shapes[i] if shapes is not None else None
            key = (cfg.key(), shape.model_dump_json() if shape is not None else "")
            groups.setdefault(key, (cfg, shape, []))[2].append(float(y))
            if priors is not None:
                at.setdefault(key, max(0.0, float(priors[i])))
        cfgs = [g[0] for g in groups.values()]
        ys = [sum(g[2]) / len(g[2]) for g in groups.values()]
        here = c.shape.bucket() if c.shape is not None else None
        current = [g[1] is None or here is None or g[1].bucket() == here for g in groups.values()]
        pos, unset, cat = c.encoding.encode(cfgs)
        feats = np.stack([shape_features(g[1] or c.shape) for g in groups.values()]) if groups else c.inputs.shape[:0]
        prior = np.array([at.get(key, np.nan) for key in groups])
        return Inputs(pos, unset, cat, feats, prior), ys, current, [g[2] for g in groups.values()]

    def _one(
        self,
        X: Inputs,
        ys_list: list[float],
        current_list: list[bool],
        blocked: np.ndarray,
        rng: np.random.Generator,
        baseline: EngineConfig | None,
        noise: float | None,
    ) -> tuple[int, str, float | None, float | None, float]:
        """The next pick: its index, why, the predicted goodput, the posterior sd of its log goodput and the
        chance that it runs (the last three only for a pick the model made)."""
        c = self.c
        jitter = rng.random(len(c)) * 1e-9
        if not ys_list:
            if baseline is not None and baseline.key() in c.index and not blocked[c.index[baseline.key()]]:
                return c.index[baseline.key()], "baseline: measure the starting point first", None, None, 1.0
            if c.prior is not None:
                idx = int(np.argmax(np.where(blocked, -np.inf, c.prior + jitter)))
                why = f"warm start: the prior's top pick (prior rank {c.prior_rank.get(idx, '?')})"
                return idx, why, None, None, 1.0
            idx = int(np.argmax(np.where(blocked, -np.inf, rng.random(len(c)))))
            return idx, "cold start: seeded random config (no prior)", None, None, 1.0
        failed = np.array(ys_list) <= 0
        risk = np.zeros(len(c))
        if _FAIL_MODEL and c.prior is None and failed.any():
            if failed.all():
                unlike = [c.configs[c.index[k]] for k in self._keys(X) if k in c.index]
                if unlike:
                    idx = self._diverse(unlike, blocked, rng)[0]
                    return idx, "every trial failed: the config most unlike them", None, None, 1.0
            risk = self._failure(X, failed)
            keep = np.flatnonzero(~failed)
            X = X.take(keep)
            ys_list = [ys_list[i] for i in keep]
            current_list = [current_list[i] for i in keep]
        post = self._posterior(X, ys_list, current_list, noise)
        mu, sd, t, here, scale, sn = post.mu, post.sd, post.t, post.here, post.scale, post.noise
        if here.any():
            best = float(t[here].max())
        else:  # nothing measured on this shape yet: the best predicted among the configs measured elsewhere
            tried = [c.index[k] for k in self._keys(X) if k in c.index]
            best = float(mu[tried].max()) if tried else float(mu.max())
        z = (mu - best - _XI) / sd
        ei = (mu - best - _XI) * _norm_cdf(z) + sd * _norm_pdf(z)
        ei = np.where(blocked, -np.inf, ei * (1 - risk) + jitter)
        idx = int(np.argmax(ei))
        pred = float(math.exp(mu[idx]) * scale)
        why = (
            f"GP-EI: predicted {pred:,.0f} (x{math.exp(sd[idx]):.2f} uncertainty) vs best measured {scale:,.0f}"
            + (f", prior rank {c.prior_rank.get(idx, '?')}" if c.prior is not None else "")
            + f"; {len(ys_list)} configs observed, noise {sn:.1%}"
        )
        return idx, why, pred, float(sd[idx]), float(1 - risk[idx])

    def _posterior(self, X: Inputs, ys_list: list[float], current_list: list[bool], noise: float | None) -> _Posterior:
        """The GP posterior (log goodput relative to the best measured on this shape) at every candidate."""
        c = self.c
        ys, here = np.array(ys_list), np.array(current_list)
        t, scale = _log_targets(X.shape, ys, here)
        # a failure says "bad here", not by how much: it enters as the floor with a wide error bar, so it does
        # not drag its ordered neighbours (the next depth, the next batch limit) down with it
        extra = np.where(ys <= 0, _S_FAILED**2, 0.0)
        # the shape is an input only when the observations span more than one shape (else it is a constant)
        with_shape = c.shape is not None and not np.allclose(X.shape, c.inputs.shape[0])
        lp_all, lp_obs, mean_all, mean_obs, s_main, s_pair = self._prior_mean(X, t, here)
        r = t - mean_obs
        base_oo = _S_BIAS**2 + _S_PRIOR_SCALE**2 * np.outer(lp_obs, lp_obs)

        sp = _S_SHAPE_PAIR if with_shape else None

        def mains(mult: float) -> np.ndarray:
            w = np.full(c.encoding.inputs + (1 if with_shape else 0), (mult * s_main) ** 2)
            if with_shape:
                w[-1] = _S_SHAPE**2
            return w

        sns = (noise,) if noise else _NOISES
        grid = [(m, ell, sn) for m in _SCALES for ell in _LENGTHS for sn in sns]
        best_h, best_ll = (1.0, _LENGTH, noise or noises.ASSUMED), -np.inf
        if len(ys) >= 4:
            corr = {ell: correlations(X, X, ell, with_shape=with_shape) for ell in _LENGTHS}
            for mult, ell, sn in grid:
                K = base_oo + covariance(corr[ell], mains(mult), mult * s_pair, sp) + np.diag(sn * sn + extra)
                try:
                    L = np.linalg.cholesky(K)
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(L.T, np.linalg.solve(L, r))
                ll = -0.5 * float(r @ alpha) - float(np.log(np.diag(L)).sum())
                if ll > best_ll:
                    best_h, best_ll = (mult, ell, sn), ll
        mult, ell, sn = best_h
        w = mains(mult)
        corr_oo = correlations(X, X, ell, with_shape=with_shape)
        if c.prior is None and len(ys) >= _ARD_MIN:
            w = fit_amplitudes(corr_oo, base_oo + np.diag(sn * sn + 1e-9 + extra), r, w, mult * s_pair, sp)
        K = base_oo + covariance(corr_oo, w, mult * s_pair, sp)
        K = K + np.diag(sn * sn + 1e-9 + extra)
        Ks = _S_BIAS**2 + _S_PRIOR_SCALE**2 * np.outer(lp_all, lp_obs)
        Ks = Ks + covariance(correlations(c.inputs, X, ell, with_shape=with_shape), w, mult * s_pair, sp)
        kss = _S_BIAS**2 + _S_PRIOR_SCALE**2 * lp_all**2 + self_covariance(w, mult * s_pair, sp)
        L = np.linalg.cholesky(K)
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, r))
        mu = mean_all + Ks @ alpha
        v = np.linalg.solve(L, Ks.T)
        sd = np.sqrt(np.maximum(kss - (v * v).sum(axis=0), 1e-12))
        return _Posterior(mu, sd, t, here, scale, sn, ell)

    def _prior_mean(
        self, X: Inputs, t: np.ndarray, here: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
        """The GP's mean (log prior, offset to the observations) at every candidate and at the observed points,
        with the log priors themselves and the main and pair amplitudes that go with them."""
        c = self.c
        if c.prior is not None:
            lp_all = np.log(np.maximum(c.prior, _PRIOR_FLOOR))
            lp_obs = np.log(np.maximum(self._prior_at(X), _PRIOR_FLOOR))
            offset = float(np.mean((t - lp_obs)[here])) if here.any() else float(np.mean(t - lp_obs))
            return lp_all, lp_obs, lp_all + offset, lp_obs + offset, _S_MAIN_PRIOR, _S_PAIR_PRIOR
        offset = float(np.mean(t[here])) if here.any() else float(np.mean(t))
        n = len(t)
        return np.zeros(len(c)), np.zeros(n), np.full(len(c), offset), np.full(n, offset), _S_MAIN, _S_PAIR

    def predict(
        self,
        observed: Sequence[tuple[EngineConfig, float]],
        *,
        shapes: Sequence[TrafficShape | None] | None = None,
        noise: float | None = None,
        priors: Sequence[float] | None = None,
    ) -> np.ndarray:
        """The surrogate's predicted goodput of every candidate (in ``CandidateSet.configs`` order); ``shapes`` and
        ``priors`` as for :meth:`suggest`."""
        pts, ys, current, repeats = self._points(observed, shapes, priors)
        if not ys:
            raise ValueError("nothing observed to predict from")
        measured = noises.pooled(repeats)
        figure = noises.clamped(measured[0]) if measured else (noises.clamped(noise) if noise is not None else None)
        post = self._posterior(pts, ys, current, figure)
        out: np.ndarray = np.exp(post.mu) * post.scale
        return out

    def _failure(self, X: Inputs, failed: np.ndarray) -> np.ndarray:
        """The chance each candidate fails: a Gaussian-process regression of the failure indicator over the same
        kernel (one main effect per knob, so a value every failed trial shares, e.g. a dtype the engine refuses,
        takes the blame), clipped to [0, 1]."""
        c = self.c
        with_shape = c.shape is not None and not np.allclose(X.shape, c.inputs.shape[0])
        y = failed.astype(float)
        mean = float(np.clip(y.mean(), 0.05, 0.95))
        n_in = c.encoding.inputs + (1 if with_shape else 0)
        w = np.full(n_in, _FAIL_MAIN**2)
        K = covariance(correlations(X, X, _LENGTH, with_shape=with_shape), w, _FAIL_PAIR)
        K = K + np.diag(np.full(len(y), _FAIL_NOISE**2))
        Ks = covariance(correlations(c.inputs, X, _LENGTH, with_shape=with_shape), w, _FAIL_PAIR)
        p = mean + Ks @ np.linalg.solve(K, y - mean)
        out: np.ndarray = np.clip(p, 0.0, 1.0)
        return out

    def _keys(self, X: Inputs) -> list[str]:
        """Config keys of the candidates whose encoding equals each row of ``X`` (a row outside the space: none)."""
        c = self.c
        out = []
        for j in range(len(X)):
            same = np.all(np.isclose(c.inputs.pos, X.pos[j]), axis=1) & np.all(c.inputs.unset == X.unset[j], axis=1)
            same &= np.all(c.inputs.cat == X.cat[j], axis=1)
            hits = np.flatnonzero(same)
            if len(hits):
                out.append(c.configs[int(hits[0])].key())
        return out

    def _diverse(
        self, chosen: list[EngineConfig], blocked: np.ndarray, rng: np.random.Generator
    ) -> tuple[int, str, float | None]:
        """Initial design: the config farthest from those already chosen (prior breaks ties)."""
        c = self.c
        X = np.array([c.encode(cfg) for cfg in chosen], dtype=np.int64)
        spread = c.distance(X).min(axis=1)
        tie = c.prior if c.prior is not None else rng.random(len(c))
        score = np.where(blocked, -np.inf, spread + 1e-3 * tie)
        idx = int(np.argmax(score))
        return idx, f"initial design: differs from the other picks in {spread[idx]:.0%} of the knobs", None

    def _prior_at(self, X: Inputs) -> np.ndarray:
        """Prior at observed points (exact match, else the most alike candidate's prior)."""
        c = self.c
        assert c.prior is not None
        k = correlations(c.inputs, X, _LENGTH, with_shape=False).sum(axis=2)  # (N, n)
        top = float(c.prior_raw.max()) if c.prior_raw is not None else 1.0
        return np.array(
            [X.prior[j] / top if np.isfinite(X.prior[j]) else c.prior[int(np.argmax(k[:, j]))] for j in range(len(X))]
        )


def _log_targets(feats: np.ndarray, ys: np.ndarray, here: np.ndarray) -> tuple[np.ndarray, float]:
    """Log goodput relative to the best measured on the current shape (``here``), and that best. Log space: knob
    effects on throughput are multiplicative; failures count as _FLOOR of their shape's best."""
    ref = ys[here] if here.any() else ys
    scale = float(ref.max()) if ref.max() > 0 else 1.0
    floor = np.empty(len(ys))
    for i in range(len(ys)):
        same = np.all(np.isclose(feats, feats[i]), axis=1)
        best_i = float(ys[same].max())
        floor[i] = _FLOOR * (best_i if best_i > 0 else scale)
    return np.log(np.maximum(ys, floor) / scale), scale


__all__ = ["GpSearch", "Suggestion"]
