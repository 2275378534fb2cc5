"""Sample-efficient, deterministic search over the policy's (finite, constrained) config space.

Canary trials cost GPU-minutes, so the optimizer works on the *enumerated* set of valid configs
(``Policy.space.sampled_configs()``: every valid config of a space of up to ``MAX_POOL_CONFIGS`` combinations, else
a pool of that many drawn from it; every config it can propose is in policy by construction) and picks each next
trial by Bayesian optimisation:

* **Surrogate** (``search.gp``, kernel in ``search.kernel``, candidates in ``search.candidates``): a Gaussian
  process on log goodput whose kernel knows what the knobs are: ordered knobs (depth, ``max_num_seqs``, batched
  tokens, capture size, ...) on a log scale with a distance-aware correlation, unordered ones equal-or-not,
  speculation as one structured knob (method, then depth), and the traffic shape (concurrency, lengths,
  repetitiveness) as an input when the trials span several shapes. One main effect per input and one interaction per
  pair of inputs (so depth x concurrency and batch limits x prompt length are representable). Its mean is a fitted
  multiple of the **prior** (e.g. the simulator's performance-model estimate of tokens/s; any ``EngineConfig ->
  float``), else the observed mean. Amplitude, length-scale and (without a repeat) the noise are chosen by marginal
  likelihood on a small grid. Without a prior, each knob's amplitude is then fitted by marginal likelihood (ARD),
  failed trials leave the goodput regression for a failure-chance regression that scales the acquisition, and the
  first three trials are spread over the knobs.
* **Acquisition**: expected improvement over the best measurement; batches use the "kriging believer" trick.
* **Warm start**: the first trial is the prior's top pick (or the baseline, or a seeded random config).
* **Noise**: pooled from repeated measurements of one config on one shape among the observations (every tuning
  round measures its baseline twice, ``controller.decide.signals.noise``, clamped to 1-25 %); :class:`OptimizerAdvisor`
  falls back to the figure of the whole history (the round's ``status.noise``), else assumes 4 %.

``strategy="tpe"`` runs optuna's TPE sampler instead (``search.tpe``: ask/tell, warm-started with ``enqueue_trial``
from the prior's top picks); a suggestion that is invalid or already tried is snapped to the nearest untried valid
config. The benchmark (``bench/search_efficiency.py``) reports both.

Everything is deterministic for a given seed, and :class:`OptimizerAdvisor` keeps no state between calls: it
rebuilds the surrogate from ``AdvisorContext.history``, so a restarted operator continues where it stopped.

Public API::

    result = optimize(objective, policy_or_space_or_configs, budget=16, seed=0, prior=estimate_fn)
    result.best, result.trials, result.trials_used
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from controller.decide.search.candidates import (
    SHARED_CANDIDATES,
    CandidateCache,
    CandidateSet,
    Prior,
    candidate_configs,
)
from controller.decide.search.gp import GpSearch, Suggestion
from controller.decide.search.tpe import TpeSearch
from controller.decide.signals import noise as noises
from controller.domain.config import EngineConfig
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.policy.models import Policy
from controller.policy.space import Feasibility, SearchSpace

ShapePrior = Callable[[EngineConfig, TrafficShape], float]
Objective = Callable[[EngineConfig], TrialResult]
Score = Callable[[TrialResult], float]
Strategy = Literal["gp", "tpe"]


def default_score(result: TrialResult) -> float:
    """Goodput under the SLO (output tokens/s of requests that met it); 0 for failed or infeasible trials."""
    return result.objective()


@dataclass(frozen=True)
class OptimizationResult:
    """``best`` is the trial with the highest score (None if the budget was 0); ``trials`` in run order."""

    best: TrialResult | None
    trials: tuple[TrialResult, ...]
    trials_used: int
    rationales: tuple[str, ...] = ()


_owners = itertools.count()


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
    The trials of the context's shape bucket feed the surrogate as measured on its shape; while the bucket has
    none, every trial of the history does, each at the traffic shape it was measured on (the shape is then one
    of the GP's inputs, so trials of neighbouring shapes inform it more than those of distant ones). Every
    trialled config counts as tried (never proposed again). The noise is pooled from the bucket's repeats of
    one config on one shape, else from the whole history's, else the assumed figure.
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
        cache: CandidateCache | None = None,
    ) -> None:
        """``cache``: where the pool and the encoded candidate sets are kept (default: the process's
        :data:`SHARED_CANDIDATES`)."""
        self.policy = policy
        self.prior = prior
        self.seed = seed
        self.strategy: Strategy = strategy
        self.feasibility = feasibility or policy.feasibility
        self.score = score
        self.name = name
        # pure caches: the enumerated space (or its pool), and the encoded space + prior per traffic shape
        self._cache = cache if cache is not None else SHARED_CANDIDATES
        self._owner = next(_owners)

    def configs(self) -> list[EngineConfig]:
        """The valid configs the optimizer searches (a pool of at most ``MAX_POOL_CONFIGS`` of a larger space)."""
        found = self._cache.pool(self._owner)
        if found is None:
            found = candidate_configs(self.policy, self.feasibility)
            self._cache.put_pool(self._owner, found)
        return found

    def suggest(self, context: AdvisorContext, n: int | None = None) -> list[Suggestion]:
        shape = context.shape
        prior_fn: Prior | None = None
        if self.prior is not None:
            shape_prior = self.prior

            def prior_fn(cfg: EngineConfig) -> float:
                return shape_prior(cfg, shape)

        cache_key = shape.model_dump_json()
        cands = self._cache.candidate_set(self._owner, cache_key)
        if cands is None:
            # the structured kernel without a prior; on top of a prior the plain one (with the structured kernel on
            # the simulator prior, the demo's day round settled on the night's config)
            cands = CandidateSet(self.configs(), prior_fn, shape, structured=self.prior is None)
            self._cache.put_candidate_set(self._owner, cache_key, cands)
        exclude = {r.config.key() for r in context.history} | {context.active.key()}
        n_pick = n if n is not None else context.max_proposals
        usable = [r for r in context.history if r.status is not TrialStatus.INVALID]
        bucket = shape.bucket()
        own = [r for r in usable if r.shape.bucket() == bucket]
        same = own or usable
        # the noise: the repeats of one config on one exact shape in the bucket, else the whole history's figure
        # (what the planner records), else the assumed one
        measured = noises.measured(own) or noises.measured(context.history)
        figure = noises.clamped(measured[0] if measured else None)
        if self.strategy == "gp" and not own:
            # nothing measured on this bucket yet: every trial, each at the shape it was measured on, with the
            # prior's value at that shape (its residual from the prior is what carries over to this shape)
            at = self.prior
            return GpSearch(cands, seed=self.seed).suggest(
                [(r.config, self.score(r)) for r in same],
                shapes=[r.shape for r in same],
                priors=[at(r.config, r.shape) for r in same] if at is not None else None,
                exclude=exclude,
                n=n_pick,
                noise=figure,
            )
        observed = _mean_of_repeats([(r.config, self.score(r)) for r in same])
        if self.strategy == "gp":  # the bucket's own trials, as measured on its shape; repeats enter as their mean
            return GpSearch(cands, seed=self.seed).suggest(observed, exclude=exclude, n=n_pick, noise=figure)
        return TpeSearch(cands, seed=self.seed).suggest(observed, exclude=exclude, n=n_pick)

    def propose(self, context: AdvisorContext) -> list[Proposal]:
        """The next configs to trial, each with the gain the surrogate expects of it over the best goodput measured
        on the context's shape bucket (what decides whether the trial is worth its GPU time)."""
        if context.max_proposals <= 0:
            return []
        best = best_measured(context, self.score)
        return [
            Proposal(
                s.config,
                s.rationale,
                self.name,
                expected_gain=(gain := expected_gain(s.predicted, best)),
                gain_uncertainty=s.uncertainty if gain is not None else None,
                success_chance=s.success_chance,
            )
            for s in self.suggest(context)
        ]


def best_measured(context: AdvisorContext, score: Score = default_score) -> float | None:
    """The best score measured on the context's shape bucket (None when nothing there scored above 0)."""
    bucket = context.shape.bucket()
    scores = [score(r) for r in context.history if r.status is not TrialStatus.INVALID and r.shape.bucket() == bucket]
    top = max(scores, default=0.0)
    return top if top > 0 else None


def expected_gain(predicted: float | None, best: float | None) -> float | None:
    """The surrogate's predicted score over the best measured one, less 1; None when either is unknown (a warm
    start, a spread-out opening pick, or nothing measured yet)."""
    if predicted is None or best is None or best <= 0:
        return None
    return predicted / best - 1.0


__all__ = [
    "OptimizationResult",
    "OptimizerAdvisor",
    "ShapePrior",
    "best_measured",
    "default_score",
    "expected_gain",
    "optimize",
]
