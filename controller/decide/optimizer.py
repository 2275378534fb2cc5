"""Sample-efficient, deterministic search over the policy's (finite, constrained) config space.

Canary trials cost GPU-minutes, so the optimizer works on the *enumerated* set of valid configs
(``Policy.space.configs()``: every config it can propose is in policy by construction) and picks each next trial
by Bayesian optimisation:

* **Surrogate**: a Gaussian process over configs with an exponential Hamming kernel (configs that share more knob
  values behave alike), whose mean function is a fitted multiple of the **prior** (e.g. the simulator's
  performance-model estimate of tokens/s; any ``EngineConfig -> float``). Without a prior the mean is the
  observed mean. The kernel length-scale is chosen by marginal likelihood on a small grid.
* **Acquisition**: expected improvement over the best measurement; batches use the "kriging believer" trick.
* **Warm start**: the first trial is the prior's top pick (or the baseline, or a seeded random config).
* **Noise**: the surrogate's measurement noise is the one the trials measured: every tuning round measures its
  baseline twice, and :class:`OptimizerAdvisor` takes the spread of such repeats in ``AdvisorContext.history``
  (``controller.decide.noise``, clamped to 1-25 %); without a repeat it assumes 4 %.

``strategy="tpe"`` runs optuna's TPE sampler instead (ask/tell, warm-started with ``enqueue_trial`` from the
prior's top picks); a suggestion that is invalid or already tried is snapped to the nearest untried valid
config. The benchmark (``bench/search_efficiency.py``) reports both.

Everything is deterministic for a given seed, and :class:`OptimizerAdvisor` keeps no state between calls: it
rebuilds the surrogate from ``AdvisorContext.history``, so a restarted operator continues where it stopped.

Public API::

    result = optimize(objective, policy_or_space_or_configs, budget=16, seed=0, prior=estimate_fn)
    result.best, result.trials, result.trials_used
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import optuna

from controller.decide import noise as noises
from controller.domain.config import EngineConfig
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.policy.models import Policy
from controller.policy.space import Feasibility, SearchSpace

Prior = Callable[[EngineConfig], float]
ShapePrior = Callable[[EngineConfig, TrafficShape], float]
Objective = Callable[[EngineConfig], TrialResult]
Score = Callable[[TrialResult], float]
Strategy = Literal["gp", "tpe"]

_NOISE = noises.ASSUMED  # relative measurement noise (log space) when the trials hold no repeat to measure it
_FLOOR = 0.5  # failed / SLO-violating trials are modelled as 50% of the best (keeps the log finite)
_SCALES = (0.5, 1.0, 2.0)  # kernel amplitude multipliers tried by marginal likelihood
_S_BIAS = 0.3  # prior sd of the overall level (log space, around the offset)
_S_PRIOR_SCALE = 0.3  # prior sd of the log-prior's exponent around 1
_S_MAIN, _S_PAIR = 0.3, 0.25  # prior sd of one knob's main effect / one pair's interaction (log space)
_S_MAIN_PRIOR, _S_PAIR_PRIOR = 0.12, 0.05  # the same, as corrections on top of a prior


def default_score(result: TrialResult) -> float:
    """Goodput under the SLO (output tokens/s of requests that met it); 0 for failed or infeasible trials."""
    return result.objective()


@dataclass(frozen=True)
class Suggestion:
    config: EngineConfig
    rationale: str
    predicted: float | None = None


@dataclass(frozen=True)
class OptimizationResult:
    """``best`` is the trial with the highest score (None if the budget was 0); ``trials`` in run order."""

    best: TrialResult | None
    trials: tuple[TrialResult, ...]
    trials_used: int
    rationales: tuple[str, ...] = ()


class CandidateSet:
    """The finite valid space, encoded for the surrogate (one integer code per varied knob)."""

    def __init__(self, configs: Sequence[EngineConfig], prior: Prior | None = None) -> None:
        if not configs:
            raise ValueError("the search space has no valid config")
        self.configs = list(configs)
        self.index = {c.key(): i for i, c in enumerate(self.configs)}
        dumps = [c.model_dump() for c in self.configs]
        self.knobs = [k for k in EngineConfig.model_fields if len({repr(d[k]) for d in dumps}) > 1]
        self.values: dict[str, list[Any]] = {}
        for k in self.knobs:
            self.values[k] = list(dict.fromkeys(d[k] for d in dumps))
        self.codes = np.array([self.encode(c) for c in self.configs], dtype=np.int64).reshape(
            len(self.configs), len(self.knobs)
        )
        raw = np.array([max(0.0, float(prior(c))) for c in self.configs]) if prior is not None else None
        if raw is not None and (not np.all(np.isfinite(raw)) or raw.max() <= 0):
            raw = None
        self.prior: np.ndarray | None = raw / raw.max() if raw is not None else None
        self.prior_raw = raw
        self.prior_rank = (
            {int(i): r + 1 for r, i in enumerate(np.argsort(-raw, kind="stable"))} if raw is not None else {}
        )

    def __len__(self) -> int:
        return len(self.configs)

    def encode(self, config: EngineConfig) -> list[int]:
        """Value index per knob; -1 for a value the space does not have (e.g. the stock baseline)."""
        d = config.model_dump()
        out = []
        for k in self.knobs:
            vals = self.values[k]
            out.append(vals.index(d[k]) if d[k] in vals else -1)
        return out

    def distance(self, codes: np.ndarray) -> np.ndarray:
        """Hamming fraction between every candidate and each row of ``codes`` -> (N, len(codes))."""
        if not self.knobs:
            return np.zeros((len(self.configs), len(codes)))
        diff = self.codes[:, None, :] != codes[None, :, :]
        result: np.ndarray = diff.mean(axis=2)
        return result


def _norm_pdf(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return out


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    return out


_erf = np.vectorize(math.erf, otypes=[float])


class GpSearch:
    """Expected-improvement search with a prior-mean Gaussian process over a :class:`CandidateSet`."""

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
        noise: float = _NOISE,
    ) -> list[Suggestion]:
        """``noise``: the relative standard deviation of one measurement (log space) the surrogate assumes."""
        c = self.c
        blocked = np.zeros(len(c), dtype=bool)
        for key in exclude:
            if key in c.index:
                blocked[c.index[key]] = True
        for cfg, _ in observed:
            if cfg.key() in c.index:
                blocked[c.index[cfg.key()]] = True
        rng = np.random.default_rng([self.seed, len(observed)])
        obs = [(np.array(c.encode(cfg)), float(y)) for cfg, y in observed]
        out: list[Suggestion] = []
        for _ in range(n):
            if blocked.all():
                break
            if not observed and out:
                idx, why, pred = self._diverse(out, blocked, rng)
                out.append(Suggestion(c.configs[idx], why, pred))
                blocked[idx] = True
                continue
            idx, why, pred = self._one(obs, blocked, rng, baseline, noise)
            out.append(Suggestion(c.configs[idx], why, pred))
            blocked[idx] = True
            believed = pred if pred is not None else (max((y for _, y in obs), default=0.0))
            obs.append((c.codes[idx], believed))  # kriging believer for the rest of the batch
        return out

    def _one(
        self,
        obs: list[tuple[np.ndarray, float]],
        blocked: np.ndarray,
        rng: np.random.Generator,
        baseline: EngineConfig | None,
        noise: float = _NOISE,
    ) -> tuple[int, str, float | None]:
        c = self.c
        jitter = rng.random(len(c)) * 1e-9
        if not obs:
            if baseline is not None and baseline.key() in c.index and not blocked[c.index[baseline.key()]]:
                return c.index[baseline.key()], "baseline: measure the starting point first", None
            if c.prior is not None:
                idx = int(np.argmax(np.where(blocked, -np.inf, c.prior + jitter)))
                return idx, f"warm start: the prior's top pick (prior rank {c.prior_rank.get(idx, '?')})", None
            idx = int(np.argmax(np.where(blocked, -np.inf, rng.random(len(c)))))
            return idx, "cold start: seeded random config (no prior)", None
        ys = np.array([y for _, y in obs])
        scale = float(ys.max()) if ys.max() > 0 else 1.0
        # log space: knob effects on throughput are multiplicative; failures count as 30% of the best
        t = np.log(np.maximum(ys / scale, _FLOOR))
        X = np.stack([o for o, _ in obs])
        nk = max(len(c.knobs), 1)
        m_oo = (X[:, None, :] == X[None, :, :]).sum(axis=2) if c.knobs else np.zeros((len(obs), len(obs)))
        m_co = len(c.knobs) - c.distance(X) * len(c.knobs)
        if c.prior is not None:
            lp_all = np.log(np.maximum(c.prior, _FLOOR))
            lp_obs = np.log(np.maximum(self._prior_at(X), _FLOOR))
            offset = float(np.mean(t - lp_obs))
            mean_all, mean_obs = lp_all + offset, lp_obs + offset
            s_main, s_pair = _S_MAIN_PRIOR, _S_PAIR_PRIOR
        else:
            offset = float(np.mean(t))
            mean_all, mean_obs = np.full(len(c), offset), np.full(len(obs), offset)
            lp_all, lp_obs = np.zeros(len(c)), np.zeros(len(obs))
            s_main, s_pair = _S_MAIN, _S_PAIR
        r = t - mean_obs

        def kern(m: np.ndarray, lpa: np.ndarray, lpb: np.ndarray, mult: float) -> np.ndarray:
            main = (mult * s_main) ** 2 * m
            pair = (mult * s_pair) ** 2 * m * (m - 1) / 2
            out: np.ndarray = _S_BIAS**2 + _S_PRIOR_SCALE**2 * np.outer(lpa, lpb) + main + pair
            return out

        sn2 = noise * noise
        best_mult, best_ll = 1.0, -np.inf
        if len(obs) >= 4:
            for mult in _SCALES:
                K = kern(m_oo, lp_obs, lp_obs, mult) + sn2 * np.eye(len(obs))
                try:
                    L = np.linalg.cholesky(K)
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(L.T, np.linalg.solve(L, r))
                ll = -0.5 * float(r @ alpha) - float(np.log(np.diag(L)).sum())
                if ll > best_ll:
                    best_mult, best_ll = mult, ll
        K = kern(m_oo, lp_obs, lp_obs, best_mult) + sn2 * np.eye(len(obs))
        Ks = kern(m_co, lp_all, lp_obs, best_mult)
        kss = _S_BIAS**2 + _S_PRIOR_SCALE**2 * lp_all**2 + (best_mult * s_main) ** 2 * nk
        kss = kss + (best_mult * s_pair) ** 2 * nk * (nk - 1) / 2
        L = np.linalg.cholesky(K + 1e-9 * np.eye(len(obs)))
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, r))
        mu = mean_all + Ks @ alpha
        v = np.linalg.solve(L, Ks.T)
        sd = np.sqrt(np.maximum(kss - (v * v).sum(axis=0), 1e-12))
        best = float(t.max())
        z = (mu - best - 0.005) / sd
        ei = (mu - best - 0.005) * _norm_cdf(z) + sd * _norm_pdf(z)
        ei = np.where(blocked, -np.inf, ei + jitter)
        idx = int(np.argmax(ei))
        pred = float(math.exp(mu[idx]) * scale)
        why = (
            f"GP-EI: predicted {pred:,.0f} (x{math.exp(sd[idx]):.2f} uncertainty) vs best measured {scale:,.0f}"
            + (f", prior rank {c.prior_rank.get(idx, '?')}" if c.prior is not None else "")
            + f"; {len(obs)} trials observed"
        )
        return idx, why, pred

    def _diverse(
        self, chosen: list[Suggestion], blocked: np.ndarray, rng: np.random.Generator
    ) -> tuple[int, str, float | None]:
        """Before any measurement: the config farthest from those already chosen (prior breaks ties)."""
        c = self.c
        X = np.array([c.encode(s.config) for s in chosen], dtype=np.int64)
        spread = c.distance(X).min(axis=1)
        tie = c.prior if c.prior is not None else rng.random(len(c))
        score = np.where(blocked, -np.inf, spread + 1e-3 * tie)
        idx = int(np.argmax(score))
        return idx, f"initial design: differs from the other picks in {spread[idx]:.0%} of the knobs", None

    def _prior_at(self, X: np.ndarray) -> np.ndarray:
        """Prior at observed points (exact match, else the nearest candidate's prior)."""
        c = self.c
        assert c.prior is not None
        d = c.distance(X)  # (N, n)
        return np.array([c.prior[int(np.argmin(d[:, j]))] for j in range(X.shape[0])])


class TpeSearch:
    """optuna TPE (ask/tell) over the knob codes; suggestions snapped to the nearest untried valid config."""

    def __init__(self, candidates: CandidateSet, *, seed: int = 0, warm_start: int = 3) -> None:
        self.c = candidates
        self.seed = seed
        self.warm_start = warm_start

    def suggest(
        self,
        observed: Sequence[tuple[EngineConfig, float]],
        *,
        exclude: Iterable[str] = (),
        n: int = 1,
        baseline: EngineConfig | None = None,
        noise: float = _NOISE,  # the common interface; TPE does not model measurement noise
    ) -> list[Suggestion]:
        c = self.c
        optuna.logging.set_verbosity(logging.WARNING)
        dists: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(list(range(len(c.values[k])))) for k in c.knobs
        }
        sampler = optuna.samplers.TPESampler(seed=self.seed + 7919 * len(observed), n_startup_trials=5)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        blocked = {*exclude, *(cfg.key() for cfg, _ in observed)}
        for cfg, y in observed:
            codes = c.encode(cfg)
            if min(codes, default=0) < 0:
                continue
            params = dict(zip(c.knobs, codes, strict=True))
            study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=float(y)))
        if baseline is not None and not observed and baseline.key() in c.index:
            study.enqueue_trial(dict(zip(c.knobs, c.encode(baseline), strict=True)))
        if c.prior is not None and len(observed) < self.warm_start:
            top = [int(i) for i in np.argsort(-c.prior, kind="stable") if c.configs[int(i)].key() not in blocked]
            for idx in top[: self.warm_start - len(observed)]:
                if c.configs[idx].key() not in blocked:
                    study.enqueue_trial(dict(zip(c.knobs, c.codes[idx].tolist(), strict=True)))
        out: list[Suggestion] = []
        for _ in range(n):
            trial = study.ask(dists)
            want = np.array([trial.params[k] for k in c.knobs], dtype=np.int64)
            d = c.distance(want[None, :])[:, 0]
            tie = -c.prior if c.prior is not None else np.zeros(len(c))
            order = np.lexsort((tie, d))
            found = next((int(i) for i in order if c.configs[int(i)].key() not in blocked), None)
            if found is None:
                break
            idx = found
            snapped = float(d[idx]) > 0
            blocked.add(c.configs[idx].key())
            why = (
                "TPE"
                + (" (snapped to the nearest untried valid config)" if snapped else "")
                + (f"; prior rank {c.prior_rank.get(idx, '?')}" if c.prior is not None else "")
            )
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            out.append(Suggestion(c.configs[idx], why))
        return out


def candidate_configs(
    space: Policy | SearchSpace | Sequence[EngineConfig], feasibility: Feasibility | None = None
) -> list[EngineConfig]:
    """The valid configs of a policy / space / explicit list (policy constraints and memory fit applied)."""
    if isinstance(space, Policy):
        return list(space.space.configs(feasibility or space.feasibility))
    if isinstance(space, SearchSpace):
        return list(space.configs(feasibility))
    return [c for c in space if feasibility is None or feasibility(c) is None]


def _mean_of_repeats(observed: Sequence[tuple[EngineConfig, float]]) -> list[tuple[EngineConfig, float]]:
    """One observation per config, in first-seen order: repeated measurements of a config (a round measures its
    baseline twice) enter the surrogate as their mean; their spread is the noise figure instead."""
    values: dict[str, tuple[EngineConfig, list[float]]] = {}
    for config, value in observed:
        values.setdefault(config.key(), (config, []))[1].append(value)
    return [(config, sum(v) / len(v)) for config, v in values.values()]


def _search(candidates: CandidateSet, strategy: Strategy, seed: int) -> GpSearch | TpeSearch:
    return GpSearch(candidates, seed=seed) if strategy == "gp" else TpeSearch(candidates, seed=seed)


def optimize(
    objective: Objective,
    space: Policy | SearchSpace | Sequence[EngineConfig],
    *,
    budget: int,
    seed: int = 0,
    prior: Prior | None = None,
    baseline: EngineConfig | None = None,
    score: Score = default_score,
    strategy: Strategy = "gp",
    feasibility: Feasibility | None = None,
) -> OptimizationResult:
    """Maximise ``score(objective(config))`` over the valid configs of ``space`` within ``budget`` trials.

    ``objective`` runs one trial (any surface: simulator, a real canary, a synthetic function) and returns a
    :class:`TrialResult`; ``score`` turns it into the number to maximise (default: goodput under the SLO).
    ``prior`` (optional) scores a config without running it, e.g. a performance model's tokens/s estimate.
    ``baseline`` (optional) is measured first and counts against the budget. Never runs a config twice.
    """
    cands = CandidateSet(candidate_configs(space, feasibility), prior)
    search = _search(cands, strategy, seed)
    trials: list[TrialResult] = []
    observed: list[tuple[EngineConfig, float]] = []
    rationales: list[str] = []
    done: set[str] = set()
    if baseline is not None and budget > 0 and baseline.key() not in cands.index:
        result = objective(baseline)
        trials.append(result)
        observed.append((baseline, score(result)))
        rationales.append("baseline")
        done.add(baseline.key())
    while len(trials) < budget:
        picks = search.suggest(observed, exclude=done, n=1, baseline=baseline)
        if not picks:
            break
        cfg = picks[0].config
        result = objective(cfg)
        trials.append(result)
        observed.append((cfg, score(result)))
        rationales.append(picks[0].rationale)
        done.add(cfg.key())
    best = max(trials, key=score) if trials else None
    return OptimizationResult(best, tuple(trials), len(trials), tuple(rationales))


class OptimizerAdvisor:
    """The optimizer behind the Advisor port. Stateless between calls: the state is ``context.history``.

    ``prior(config, shape)`` may be the simulator's performance estimate; the optimizer never imports it.
    Trials whose shape bucket differs from the context's still count as tried (never proposed again) but do not
    feed the surrogate unless no trial matches the current bucket.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        prior: ShapePrior | None = None,
        seed: int = 0,
        strategy: Strategy = "gp",
        feasibility: Feasibility | None = None,
        score: Score = default_score,
        name: str = "optimizer",
    ) -> None:
        self.policy = policy
        self.prior = prior
        self.seed = seed
        self.strategy: Strategy = strategy
        self.feasibility = feasibility or policy.feasibility
        self.score = score
        self.name = name
        self._configs: list[EngineConfig] | None = None  # a pure cache of the enumerated space
        self._sets: dict[str, CandidateSet] = {}  # pure cache: encoded space + prior per traffic shape

    def configs(self) -> list[EngineConfig]:
        if self._configs is None:
            self._configs = candidate_configs(self.policy, self.feasibility)
        return self._configs

    def suggest(self, context: AdvisorContext, n: int | None = None) -> list[Suggestion]:
        shape = context.shape
        prior_fn: Prior | None = None
        if self.prior is not None:
            shape_prior = self.prior

            def prior_fn(cfg: EngineConfig) -> float:
                return shape_prior(cfg, shape)

        cache_key = shape.model_dump_json()
        cands = self._sets.get(cache_key)
        if cands is None:
            cands = CandidateSet(self.configs(), prior_fn)
            if len(self._sets) >= 16:
                self._sets.pop(next(iter(self._sets)))
            self._sets[cache_key] = cands
        bucket = shape.bucket()
        same = [r for r in context.history if r.shape.bucket() == bucket] or list(context.history)
        observed = _mean_of_repeats([(r.config, self.score(r)) for r in same if r.status is not TrialStatus.INVALID])
        exclude = {r.config.key() for r in context.history} | {context.active.key()}
        repeats = noises.measured(same)
        return _search(cands, self.strategy, self.seed).suggest(
            observed,
            exclude=exclude,
            n=n if n is not None else context.max_proposals,
            noise=noises.clamped(repeats[0] if repeats else None),
        )

    def propose(self, context: AdvisorContext) -> list[Proposal]:
        if context.max_proposals <= 0:
            return []
        return [Proposal(s.config, s.rationale, self.name) for s in self.suggest(context)]


__all__ = [
    "CandidateSet",
    "GpSearch",
    "OptimizationResult",
    "OptimizerAdvisor",
    "Prior",
    "ShapePrior",
    "Suggestion",
    "TpeSearch",
    "candidate_configs",
    "default_score",
    "optimize",
]
