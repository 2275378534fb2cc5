"""Search efficiency of the decide layer: how many canary trials each strategy needs to find a near-best config.

Two regimes, each judged by trials until the incumbent (the config with the best *measured* goodput) is within 3%
of the exact optimum by its *true* goodput; measurements carry seeded Gaussian noise (sd 2.5%):

1. **No prior, foreign surfaces** (``bench/foreign_surfaces.py``: objectives built from published measurements and
   from structure drawn at random, not from the project's performance model), 6 surfaces x 6 shapes: the
   optimizer's structured GP against the same GP with the plain "knobs in common" kernel, optuna TPE and random
   order; up to 24 trials, a run stops once it is within 3%. Each shape is searched cold (no trial of any other
   shape): the headline no-prior figure. A second figure, ``optimizer-earlier-shapes``, searches the six shapes of
   a surface one after another, each starting with the earlier shapes' trials (the operator's situation: one
   window after another on the same target; only a shape's own trials count).
2. **With a prior**: the simulator's performance model (``PerformanceModel.estimate``, the exact optimum by
   exhaustive evaluation) on 2 model/GPU profiles x 6 shapes, every strategy below; and the H200 calibration's
   measured decode steps with the calibrated model as the prior (the cases of ``bench/calibration.py``).

Simulator strategies:

* ``optimizer``           our GP-EI optimizer, prior = the perf model for a *mis-specified* setting (the other GPU
                          profile, half the concurrency): an honest stand-in for "simulator prior, real canary"
* ``optimizer-noisyprior`` the same prior with a further per-config log-normal error (sd 20%)
* ``optimizer-noprior``   the same without any prior
* ``optimizer-simprior``  prior = the same perf model's tokens/s (optimistic: the prior shares the surface)
* ``optuna-tpe``          optuna TPE with the mis-specified prior's top picks enqueued
* ``agent``               the LangGraph agent with the scripted field-notes model (guardrails, optimizer fallback)
* ``random``              uniform random order over the valid space
* ``grid``                auto_tune-style grid over max-num-seqs x max-num-batched-tokens only (other knobs stock)
* ``one-knob``            one-knob-at-a-time coordinate search from the config nearest to stock

Run: ``.venv/bin/python -m bench.search_efficiency [--seeds N] [--quick] [--only foreign|simulator|calibration]``.
``--libraries [--library-seeds N]`` adds well-kept libraries' GPs on the foreign surfaces (``LIBRARY_STRATEGIES``:
optuna's ``GPSampler``, scikit-learn's ``GaussianProcessRegressor``); they need torch and scikit-learn, in the
environment ``scripts/install-search-libs.sh`` builds (``.venv-search/bin/python``).
Ends with one line::

    search: no-prior median M, worst W over F foreign surfaces; with prior median M2, worst W2; random median R;
    no-prior with the earlier shapes' trials median T, worst U

(no prior: the optimizer over the foreign surfaces, each shape cold; with prior: the simulator's ``optimizer`` runs
and the calibration runs together; random: random order over the foreign surfaces; the last pair: each shape
starting with the earlier shapes' trials).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import logging
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from bench import foreign_surfaces as fs
from bench.common import (
    NOISE,
    PRIORS_MIS,
    PRIORS_NOISY,
    PRIORS_SIM,
    RAW,
    STOP,
    e2e_points,
    measured_trial,
    model_search,
    trace,
)
from controller.advisor import AgentAdvisor
from controller.advisor.scripted import heuristic_model
from controller.decide.search.candidates import CandidateSet
from controller.decide.search.gp import GpSearch
from controller.decide.search.kernel import ORDERED
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.policy import Policy, load_policy
from controller.simulator.perf import PerformanceModel

ROOT = Path(__file__).resolve().parents[1]
MAX_TRIALS = 40


@dataclass(frozen=True)
class Case:
    profile: str
    policy: Policy
    model: str
    gpu: str
    prior_gpu: str
    shape_name: str
    shape: TrafficShape
    slo: SLO


def _shape(c: float, prompt: float, out: float, rep: float = 0.0, prefix: float = 0.0) -> TrafficShape:
    return TrafficShape(
        arrival_rate_rps=max(c / 20.0, 0.05),
        concurrency=c,
        prompt_tokens=LengthDistribution(mean=prompt, cv=0.5),
        output_tokens=LengthDistribution(mean=out, cv=0.5),
        repetitiveness=rep,
        prefix_share=prefix,
    )


SHAPES: dict[str, TrafficShape] = {
    "agents-256x512/512": _shape(256, 512, 512),
    "chat-64x1k/256": _shape(64, 1024, 256),
    "rag-32x4k/256": _shape(32, 4096, 256, prefix=0.5),
    "code-128x2k/1k-rep": _shape(128, 2048, 1024, rep=0.6),
    "docs-4x8k/512": _shape(4, 8192, 512, rep=0.3),
    "single-1x512/1k": _shape(1, 512, 1024),
}

PROFILES: list[tuple[str, str, str, str, str]] = [
    # name, policy file, model, gpu, GPU used for the mis-specified prior
    (
        "hybrid-mtp@gb300",
        "policies/v1/hybrid-mtp-workstation.yaml",
        "nemotron-3-super-nvfp4",
        "gb300-dgx-station",
        "h200",
    ),
    ("dense-8b@h200", "policies/v1/dense-8b-h200.yaml", "llama-3.1-8b", "h200", "gb300-dgx-station"),
]


def _share_within(p: Percentiles | None, bound: float) -> float:
    """Share of requests at or under ``bound``, interpolated through (p50, p95, p99)."""
    if p is None:
        return 0.0
    pts = [(0.0, 0.0), (p.p50, 0.5), (p.p95, 0.95), (p.p99, 0.99), (p.p99 * 1.5 + 1e-12, 1.0)]
    if bound <= 0:
        return 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if bound <= x1:
            return y0 + (y1 - y0) * ((bound - x0) / (x1 - x0) if x1 > x0 else 1.0)
    return 1.0


class Surface:
    """True goodput of every config of one case (memoised) and seeded noisy measurements."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.perf = PerformanceModel.named(case.model, case.gpu)
        self._true: dict[str, float] = {}

    def true(self, cfg: EngineConfig) -> float:
        key = cfg.key()
        if key not in self._true:
            self._true[key] = self._goodput(cfg)
        return self._true[key]

    def _goodput(self, cfg: EngineConfig) -> float:
        if self.perf.feasibility(cfg) is not None:
            return 0.0
        est = self.perf.estimate(cfg, self.case.shape)
        if not est.feasible:
            return 0.0
        slo = self.case.slo
        share = min(_share_within(est.ttft_s, slo.ttft_seconds), _share_within(est.tpot_s, slo.tpot_seconds))
        return est.output_tokens_per_s * share

    def trial(self, cfg: EngineConfig, rng: random.Random) -> TrialResult:
        value = self.true(cfg)
        shape, slo = self.case.shape, self.case.slo
        if value <= 0 and self.perf.feasibility(cfg) is not None:
            reason = self.perf.feasibility(cfg) or "infeasible"
            return TrialResult(config=cfg, shape=shape, slo=slo, status=TrialStatus.INFEASIBLE, reason=reason)
        return measured_trial(cfg, shape, slo, max(0.0, value * (1 + rng.gauss(0, NOISE))))


def _mis_prior(case: Case) -> Callable[[EngineConfig], float]:
    """Perf-model tokens/s on the wrong GPU at half the concurrency (a stale, mis-calibrated model)."""
    perf = PerformanceModel.named(case.model, case.prior_gpu)
    shape = case.shape.model_copy(update={"concurrency": max(1.0, case.shape.concurrency / 2)})

    memo: dict[str, float] = {}

    def prior(cfg: EngineConfig) -> float:
        key = cfg.key()
        if key not in memo:
            memo[key] = 0.0 if perf.feasibility(cfg) is not None else perf.estimate(cfg, shape).output_tokens_per_s
        return memo[key]

    return prior


def _noisy_prior(case: Case) -> Callable[[EngineConfig], float]:
    """The mis-specified prior, further off by a per-config log-normal error (sd 20%): a badly calibrated model."""
    base = PRIORS_MIS[case.profile + case.shape_name]

    def prior(cfg: EngineConfig) -> float:
        return base(cfg) * math.exp(random.Random(int(cfg.key(), 16)).gauss(0, 0.2))

    return prior


def _sim_prior(case: Case, surface: Surface) -> Callable[[EngineConfig], float]:
    memo: dict[str, float] = {}

    def prior(cfg: EngineConfig) -> float:
        key = cfg.key()
        if key not in memo:
            ok = surface.true(cfg) > 0
            memo[key] = surface.perf.estimate(cfg, case.shape).output_tokens_per_s if ok else 0.0
        return memo[key]

    return prior


Strategy = Callable[[Case, Surface, list[EngineConfig], int, int], list[TrialResult]]


def random_search(case: Case, surface: Surface, cands: list[EngineConfig], seed: int, budget: int) -> list[TrialResult]:
    rng = random.Random(seed * 7919 + 1)
    order = list(cands)
    random.Random(seed).shuffle(order)
    return [surface.trial(c, rng) for c in order[:budget]]


def grid_search(case: Case, surface: Surface, cands: list[EngineConfig], seed: int, budget: int) -> list[TrialResult]:
    rng = random.Random(seed * 7919 + 1)
    space = case.policy.space
    grid = [
        STOCK.model_copy(update={"max_num_seqs": s, "max_num_batched_tokens": m})
        for s in space.allowed("max_num_seqs")
        for m in space.allowed("max_num_batched_tokens")
        if s is not None and m is not None and m >= s
    ]
    return [surface.trial(c, rng) for c in grid[:budget]]


def one_knob(case: Case, surface: Surface, cands: list[EngineConfig], seed: int, budget: int) -> list[TrialResult]:
    rng = random.Random(seed * 7919 + 1)
    valid = {c.key(): c for c in cands}
    stock = STOCK.model_dump()
    start = min(cands, key=lambda c: sum(1 for k, v in c.model_dump().items() if v != stock[k]))
    trials = [surface.trial(start, rng)]
    best, best_val = start, trials[0].objective()
    knobs = case.policy.space.knob_names()
    improved = True
    while len(trials) < budget and improved:
        improved = False
        for knob in knobs:
            for value in case.policy.space.allowed(knob):
                if len(trials) >= budget:
                    break
                d = best.model_dump()
                d[knob] = value
                if d["speculative_method"] != "none" and not d["num_speculative_tokens"]:
                    d["num_speculative_tokens"] = 1
                if d["speculative_method"] == "none":
                    d["num_speculative_tokens"] = 0
                try:
                    cand = EngineConfig.model_validate(d)
                except ValueError:
                    continue
                if cand.key() not in valid or any(t.config.key() == cand.key() for t in trials):
                    continue
                r = surface.trial(cand, rng)
                trials.append(r)
                if r.objective() > best_val:
                    best, best_val, improved = cand, r.objective(), True
    return trials


def agent_search(case: Case, surface: Surface, cands: list[EngineConfig], seed: int, budget: int) -> list[TrialResult]:
    rng = random.Random(seed * 7919 + 1)
    prior = PRIORS_MIS[case.profile + case.shape_name]
    policy = case.policy.model_copy()
    policy = policy.model_validate(
        policy.model_dump() | {"llm": policy.llm.model_dump() | {"enabled": True, "token_budget": 10_000_000}}
    ).with_feasibility(surface.perf.feasibility)
    policy = policy.model_validate(
        policy.model_dump() | {"trial_budget": {"max_trials": budget, "canary_gpu_minutes": 100_000}}
    ).with_feasibility(surface.perf.feasibility)
    optimizer = OptimizerAdvisor(policy, prior=lambda c, _s: prior(c), seed=seed)
    advisor = AgentAdvisor(policy, chat_model=heuristic_model(), optimizer=optimizer)
    target = TargetRef("bench", f"{case.profile}-{seed}", case.model)
    trials: list[TrialResult] = []
    while len(trials) < budget:
        ctx = AdvisorContext(target, case.shape, case.slo, STOCK, tuple(trials), max_proposals=1)
        props = advisor.propose(ctx)
        if not props:
            break
        trials.append(surface.trial(props[0].config, rng))
    return trials


STRATEGIES: dict[str, Strategy] = {
    "optimizer": model_search("gp", "mis"),
    "optimizer-noisyprior": model_search("gp", "noisy"),
    "optimizer-noprior": model_search("gp", "none"),
    "optimizer-simprior": model_search("gp", "sim"),
    "optuna-tpe": model_search("tpe", "mis"),
    "agent": agent_search,
    "random": random_search,
    "grid": grid_search,
    "one-knob": one_knob,
}


def _regret_at(regrets: list[float], t: int) -> float:
    return regrets[min(t, len(regrets)) - 1] if regrets else 1.0


class ForeignTrials:
    """The search loop's surface interface (``true``, ``trial``) over one foreign surface at one shape."""

    def __init__(self, surface: fs.ForeignSurface, shape: TrafficShape, slo: SLO) -> None:
        self.surface, self.shape, self.slo = surface, shape, slo
        self._true: dict[str, float] = {}

    def true(self, cfg: EngineConfig) -> float:
        key = cfg.key()
        if key not in self._true:
            self._true[key] = self.surface.goodput(cfg, self.shape)
        return self._true[key]

    def trial(self, cfg: EngineConfig, rng: random.Random) -> TrialResult:
        value = self.true(cfg)
        if value <= 0:
            return TrialResult(config=cfg, shape=self.shape, slo=self.slo, status=TrialStatus.FAILED, reason="fails")
        return measured_trial(cfg, self.shape, self.slo, max(0.0, value * (1 + rng.gauss(0, NOISE))))


FOREIGN_MAX_TRIALS = 24
TRANSFER = "optimizer-earlier-shapes"
"""The optimizer, no prior, each shape's search starting with the earlier shapes' trials (``transfer_runs``)."""
FOREIGN_STRATEGIES: dict[str, Strategy] = {
    "optimizer": model_search("gp", "none"),
    "gp-knobs-in-common": model_search("gp", "none", structured=False),
    "optuna-tpe": model_search("tpe", "none"),
    "random": random_search,
}
"""No prior on the foreign surfaces: the structured GP (the product's), the same GP with the plain kernel of
knobs in common, optuna's TPE and uniform random order."""


LIBRARY_ENV = "scripts/install-search-libs.sh"
"""Builds the environment (``.venv-search``, ``make search-libs``) with the libraries ``--libraries`` compares."""


class LibraryEncoding:
    """The knob encoding the library baselines share with the TPE strategy: one code per varied knob of the
    :class:`CandidateSet`. An ordered knob's code is the rank of its value (vLLM's default ``None`` lowest), so a
    library can treat it as an integer; any other knob's code is a category."""

    def __init__(self, cands: CandidateSet) -> None:
        self.c = cands
        self.knobs = list(cands.knobs)
        self.ordered = {k for k in self.knobs if k in ORDERED}
        self.levels = {k: len(cands.values[k]) for k in self.knobs}
        self._rank: dict[str, np.ndarray] = {}
        for k in self.knobs:
            vals = cands.values[k]
            if k in self.ordered:
                order = sorted(range(len(vals)), key=lambda i, v=vals: (v[i] is not None, v[i] or 0))  # type: ignore[misc]
                rank = np.empty(len(vals), dtype=np.int64)
                rank[order] = np.arange(len(vals))
            else:
                rank = np.arange(len(vals), dtype=np.int64)
            self._rank[k] = rank
        self.codes = np.stack([self._rank[k][cands.codes[:, j]] for j, k in enumerate(self.knobs)], axis=1).reshape(
            len(cands), len(self.knobs)
        )

    def snap(self, codes: Sequence[int], blocked: set[str]) -> tuple[int, bool] | None:
        """The candidate a library's suggestion stands for: the nearest untried valid config by knobs in common
        (the TPE strategy's snapping; ties to the first in the candidate set), and whether it had to move."""
        want = np.empty(len(self.knobs), dtype=np.int64)
        for j, k in enumerate(self.knobs):
            want[j] = int(np.flatnonzero(self._rank[k] == int(codes[j]))[0])
        d = self.c.distance(want[None, :])[:, 0]
        for i in np.argsort(d, kind="stable"):
            if self.c.configs[int(i)].key() not in blocked:
                return int(i), bool(d[int(i)] > 0)
        return None

    def features(self) -> np.ndarray:
        """Per candidate: each ordered knob's rank scaled to [0, 1], each other knob one-hot."""
        cols: list[np.ndarray] = []
        for j, k in enumerate(self.knobs):
            n = self.levels[k]
            if k in self.ordered:
                cols.append((self.codes[:, j] / max(n - 1, 1))[:, None])
            else:
                cols.append(np.eye(n)[self.codes[:, j]])
        return np.concatenate(cols, axis=1) if cols else np.zeros((len(self.c), 1))


def library_targets(values: Sequence[float]) -> np.ndarray:
    """What the library baselines model: log goodput; a failed or unusable trial (0) at half the best measured
    (the product's floor) or the lowest measured if lower, at 1 token/s when nothing ran."""
    v = np.asarray(values, dtype=float)
    ran = v[v > 0]
    floor = min(0.5 * float(ran.max()), float(ran.min())) if len(ran) else 1.0
    out: np.ndarray = np.log(np.where(v > 0, v, floor))
    return out


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float, xi: float = 0.01) -> np.ndarray:
    """Expected improvement over ``best`` of a normal posterior (``sd`` 0: the plain excess)."""
    sd = np.maximum(sd, 1e-12)
    z = (mu - best - xi) / sd
    cdf = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[float])(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    out: np.ndarray = (mu - best - xi) * cdf + sd * pdf
    return out


def _library_loop(
    surface: Surface, cands: list[EngineConfig], seed: int, budget: int, pick: Callable[[list[TrialResult]], int | None]
) -> list[TrialResult]:
    """Runs ``pick``'s choices (an index into ``cands``) until the budget, no pick or the surface's stop."""
    rng = random.Random(seed * 7919 + 1)
    trials: list[TrialResult] = []
    stop = STOP.get(id(surface))
    while len(trials) < budget:
        idx = pick(trials)
        if idx is None:
            break
        trials.append(surface.trial(cands[idx], rng))
        if stop is not None and stop(trials):
            break
    return trials


def optuna_gp(startup: int = 10) -> Strategy:
    """optuna's ``GPSampler`` (``startup`` seeded random trials, its default 10, then its GP's log EI), ask/tell over
    the TPE strategy's knob codes (an ordered knob as an integer by rank, the rest categorical); a new study per
    trial holding every trial so far (seed + 7919 x trials, as TPE), its suggestion snapped like TPE's."""

    def run(case: Case, surface: Surface, cands: list[EngineConfig], seed: int, budget: int) -> list[TrialResult]:
        torch: Any = importlib.import_module("torch")
        torch.set_num_threads(1)
        optuna.logging.set_verbosity(logging.WARNING)
        enc = LibraryEncoding(CandidateSet(cands))
        dists: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.IntDistribution(0, enc.levels[k] - 1)
            if k in enc.ordered
            else optuna.distributions.CategoricalDistribution(list(range(enc.levels[k])))
            for k in enc.knobs
        }
        index = {c.key(): i for i, c in enumerate(cands)}

        def pick(trials: list[TrialResult]) -> int | None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sampler = optuna.samplers.GPSampler(seed=seed + 7919 * len(trials), n_startup_trials=startup)
                study = optuna.create_study(direction="maximize", sampler=sampler)
                for t, y in zip(trials, library_targets([t.objective() for t in trials]), strict=True):
                    params = dict(zip(enc.knobs, enc.codes[index[t.config.key()]].tolist(), strict=True))
                    study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=float(y)))
                asked = study.ask(dists)
            found = enc.snap([int(asked.params[k]) for k in enc.knobs], {t.config.key() for t in trials})
            return found[0] if found else None

        return _library_loop(surface, cands, seed, budget, pick)

    return run


def sklearn_gp_search(
    case: Case, surface: Surface, cands: list[EngineConfig], seed: int, budget: int
) -> list[TrialResult]:
    """scikit-learn's ``GaussianProcessRegressor``: ConstantKernel x Matern 5/2 with one length-scale per feature
    (ARD) + WhiteKernel, on the ordered knobs' ranks and the others one-hot, log goodput (``library_targets``),
    ``normalize_y``, 3 optimizer restarts seeded; the first trial a seeded uniform random config, then expected
    improvement over the untried configs."""
    gp_mod: Any = importlib.import_module("sklearn.gaussian_process")
    kernels: Any = importlib.import_module("sklearn.gaussian_process.kernels")
    x = LibraryEncoding(CandidateSet(cands)).features()
    index = {c.key(): i for i, c in enumerate(cands)}
    first = random.Random(seed).randrange(len(cands))

    def pick(trials: list[TrialResult]) -> int | None:
        if not trials:
            return first
        rows = [index[t.config.key()] for t in trials]
        y = library_targets([t.objective() for t in trials])
        kernel = kernels.ConstantKernel(1.0, (1e-3, 1e3)) * kernels.Matern(
            length_scale=np.ones(x.shape[1]), length_scale_bounds=(0.05, 20.0), nu=2.5
        ) + kernels.WhiteKernel(1e-2, (1e-6, 1.0))
        gp = gp_mod.GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=3, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(x[rows], y)
            mu, sd = gp.predict(x, return_std=True)
        ei = expected_improvement(np.asarray(mu), np.asarray(sd), float(y.max()))
        ei[rows] = -np.inf
        return int(np.argmax(ei)) if len(rows) < len(cands) else None

    return _library_loop(surface, cands, seed, budget, pick)


LIBRARY_STRATEGIES: dict[str, tuple[Strategy, tuple[str, ...]]] = {
    "optuna-gp": (optuna_gp(), ("optuna", "torch")),
    "optuna-gp-start5": (optuna_gp(startup=5), ("optuna", "torch")),
    "sklearn-gp": (sklearn_gp_search, ("sklearn",)),
}
"""No prior, with ``--libraries``: well-kept libraries' GPs (the strategy, the modules it needs); optuna's GP as it
comes and with 5 random start-up trials instead of 10 (as the TPE strategy starts)."""


def importable_libraries() -> tuple[dict[str, Strategy], list[str]]:
    """The library strategies whose modules import here, and the names of those that do not."""
    ok: dict[str, Strategy] = {}
    missing: list[str] = []
    for name, (strategy, modules) in LIBRARY_STRATEGIES.items():
        if all(importlib.util.find_spec(m) is not None for m in modules):
            ok[name] = strategy
        else:
            missing.append(name)
    return ok, missing


def transfer_runs(surface: fs.ForeignSurface, slo: SLO, seed: int) -> dict[str, float]:
    """No prior, the shapes searched one after another on one surface (the operator's situation: the product
    tunes one window after another on the same target). Each shape's search starts with every trial of the
    earlier shapes in the surrogate, each at the shape it was measured on; its own trials count, and it stops
    once its incumbent is within 3%. Returns trials to 3% per shape (inf: not within the budget)."""
    cands = list(surface.configs)
    history: list[tuple[EngineConfig, float, TrafficShape]] = []
    out: dict[str, float] = {}
    for shape_name, shape in SHAPES.items():
        trials_of = ForeignTrials(surface, shape, slo)
        opt = max(trials_of.true(c) for c in cands)
        search = GpSearch(CandidateSet(cands, None, shape), seed=seed)
        rng = random.Random(seed * 7919 + 1)
        trials: list[TrialResult] = []
        hit: int | None = None
        while len(trials) < FOREIGN_MAX_TRIALS and hit is None:
            mine = [(t.config, t.objective(), shape) for t in trials]
            seen = history + mine
            picks = search.suggest([(c, y) for c, y, _ in seen], n=1, shapes=[sh for _, _, sh in seen])
            if not picks:
                break
            trials.append(trials_of.trial(picks[0].config, rng))
            hit, _ = trace(trials, trials_of, opt)  # type: ignore[arg-type]
        history += [(t.config, t.objective(), shape) for t in trials]
        out[shape_name] = _as_num(hit)
    return out


def _as_num(h: int | None) -> float:
    return float(h) if h is not None else math.inf


def _fmt(x: float, cap: int = MAX_TRIALS) -> str:
    return f">{cap}" if math.isinf(x) else f"{x:g}"


def _summary(h: Sequence[float], cap: int) -> tuple[str, str, str, str]:
    h = sorted(h)
    p90 = h[min(len(h) - 1, math.ceil(0.9 * len(h)) - 1)]
    reached = sum(1 for x in h if not math.isinf(x)) / len(h)
    return _fmt(statistics.median(h), cap), _fmt(p90, cap), _fmt(h[-1], cap), f"{reached:.0%}"


def foreign_section(
    seeds: int, tpe_seeds: int, libraries: dict[str, Strategy] | None = None, library_seeds: int = 3
) -> dict[str, dict[str, list[float]]]:
    """No prior, on the foreign surfaces: trials to 3% per strategy and surface. ``libraries``: the library
    strategies to run as well (``library_seeds`` seeds each; their wall time per run is printed)."""
    strategies = FOREIGN_STRATEGIES | (libraries or {})
    hits: dict[str, dict[str, list[float]]] = {s: {} for s in strategies}
    wall: dict[str, list[float]] = {s: [] for s in libraries or {}}
    slo = SLO()
    print(
        f"no prior, foreign surfaces (bench/foreign_surfaces.py), up to {FOREIGN_MAX_TRIALS} trials, noise {NOISE:.1%}"
    )
    print(f"{'surface':24s} {'shape':20s} {'space':>5s} {'optimum':>9s}  best config")
    for surface in fs.surfaces():
        cands = list(surface.configs)
        for shape_name, shape in SHAPES.items():
            trials_of = ForeignTrials(surface, shape, slo)
            values = [trials_of.true(c) for c in cands]
            opt = max(values)
            print(
                f"{surface.name:24s} {shape_name:20s} {len(cands):5d} {opt:9,.0f}  {cands[values.index(opt)].label()}"
            )
            case = Case(surface.name, Policy(), "", "", "", shape_name, shape, slo)
            STOP[id(trials_of)] = lambda ts, o=opt, t=trials_of: trace(ts, t, o)[0] is not None  # type: ignore[misc]
            for name, strategy in strategies.items():
                n = tpe_seeds if name == "optuna-tpe" else library_seeds if name in wall else seeds
                for seed in range(n):
                    started = time.perf_counter()
                    trials = strategy(case, trials_of, cands, seed, FOREIGN_MAX_TRIALS)  # type: ignore[arg-type]
                    if name in wall:
                        wall[name].append(time.perf_counter() - started)
                    hit, _ = trace(trials, trials_of, opt)  # type: ignore[arg-type]
                    hits[name].setdefault(surface.name, []).append(_as_num(hit))
            del STOP[id(trials_of)]
    for surface in fs.surfaces():
        for seed in range(seeds):
            for got in transfer_runs(surface, slo, seed).values():
                hits.setdefault(TRANSFER, {}).setdefault(surface.name, []).append(got)
    _print_foreign(hits, wall, library_seeds)
    return hits


def _print_foreign(hits: dict[str, dict[str, list[float]]], wall: dict[str, list[float]], library_seeds: int) -> None:
    """The foreign surfaces' table: trials to 3% per strategy, the libraries' wall time, then by surface."""
    print(f"\n{'no prior: strategy':28s} {'runs':>5s} {'median':>7s} {'p90':>6s} {'worst':>6s} {'reached':>8s}")
    for name, per in hits.items():
        allh = [x for v in per.values() for x in v]
        if not allh:
            continue
        print(
            f"{name:28s} {len(allh):5d} "
            + " ".join(f"{x:>{w}s}" for x, w in zip(_summary(allh, FOREIGN_MAX_TRIALS), (7, 6, 6, 8), strict=True))
        )
    for name, times in wall.items():
        if times:
            print(
                f"{name:28s} wall per run: median {statistics.median(times):.1f} s, max {max(times):.1f} s, "
                f"total {sum(times):.0f} s ({library_seeds} seeds)"
            )
    for name in ("optimizer", TRANSFER, *wall):
        if not hits.get(name):
            continue
        print(f"\n{name + ' by surface':28s} {'runs':>5s} {'median':>7s} {'p90':>6s} {'worst':>6s} {'reached':>8s}")
        for sname, h in hits.get(name, {}).items():
            print(
                f"{sname:28s} {len(h):5d} "
                + " ".join(f"{x:>{w}s}" for x, w in zip(_summary(h, FOREIGN_MAX_TRIALS), (7, 6, 6, 8), strict=True))
            )


def calibration_section(seeds: int) -> list[float]:
    """With the calibrated prior, against goodput computed from the H200 calibration's measured steps: the
    calibration bench's cases (context x repetitiveness x TPOT bound over B x q), searched by this bench's loop."""
    from bench import calibration as cb  # its measured-step objective and its calibrated model
    from controller.calibrate.profile import load_calibration
    from controller.simulator.profiles import load_gpu, load_model

    raw = json.loads(RAW.read_text())
    cal = load_calibration("h200")
    if cal is None:
        return []
    stack = cb.stack_profile(load_model("llama-3.1-8b"))
    measured = {(p["batch"], p["query"], p["context"]): p["seconds"] for p in e2e_points(raw)}
    pm_unc = PerformanceModel(stack, load_gpu("h200"), None, prefill_fixes=False)
    pm_cal = PerformanceModel(stack, load_gpu("h200"), cal, small_kernels_per_layer=cb.STACK_SMALL_KERNELS_PER_LAYER)
    batches, queries = sorted({b for b, _, _ in measured}), sorted({q for _, q, _ in measured})
    cands = [cb.decode_config(q).model_copy(update={"max_num_seqs": b}) for b in batches for q in queries]
    hits: list[float] = []
    for ctx, rep, bound in itertools.product(sorted({c for _, _, c in measured}), (0.0, 0.6, 0.9), (8e-3, 12e-3, 1.0)):

        def truth(cfg: EngineConfig, ctx: int = ctx, rep: float = rep, bound: float = bound) -> float:
            t = measured[(cfg.max_num_seqs or 1, 1 + cfg.k, ctx)]
            return cb.measured_goodput(t, cfg.max_num_seqs or 1, pm_unc.tokens_per_step(cfg, rep), bound)

        def prior(cfg: EngineConfig, ctx: int = ctx, rep: float = rep, bound: float = bound) -> float:
            b = cfg.max_num_seqs or 1
            st = pm_cal.step(cb.decode_config(1 + cfg.k), decode_seqs=b, prefill_tokens=0, mean_context_tokens=ctx)
            return cb.measured_goodput(st.gpu_seconds, b, pm_unc.tokens_per_step(cfg, rep), bound)

        if max(truth(c) for c in cands) <= 0:
            continue
        surface = cb.MeasuredSurface(truth, bound)
        for seed in range(seeds):
            hit = cb.search_hits(f"cal/{ctx}/{rep}/{bound}", cands, surface, prior, seed)
            hits.append(_as_num(hit))
    return hits


def simulator_section(seeds: int, agent_seeds: int) -> dict[str, list[int | None]]:
    """The simulator surface: every strategy, with and without priors (the product's setting: a mis-specified
    simulator prior)."""
    cases: list[Case] = []
    for name, path, model, gpu, prior_gpu in PROFILES:
        policy = load_policy(ROOT / path)
        for shape_name, shape in SHAPES.items():
            cases.append(Case(name, policy, model, gpu, prior_gpu, shape_name, shape, policy.slo))
    hits: dict[str, list[int | None]] = {s: [] for s in STRATEGIES}
    r8: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    r16: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    print(f"simulator surface (the performance model), up to {MAX_TRIALS} trials, noise {NOISE:.1%}")
    print(f"{'case':44s} {'space':>5s} {'optimum':>9s} {'stock':>8s}  best config")
    for case in cases:
        surface = Surface(case)
        cands = list(case.policy.space.configs(surface.perf.feasibility))
        values = [surface.true(c) for c in cands]
        opt = max(values)
        best = cands[values.index(opt)]
        PRIORS_MIS[case.profile + case.shape_name] = _mis_prior(case)
        PRIORS_SIM[case.profile + case.shape_name] = _sim_prior(case, surface)
        PRIORS_NOISY[case.profile + case.shape_name] = _noisy_prior(case)
        print(
            f"{case.profile + ' ' + case.shape_name:44s} {len(cands):5d} {opt:9,.0f} {surface.true(STOCK):8,.0f}  "
            f"{best.label()}"
        )
        # a run stops once it has reached 3% and run the 16 trials the regret columns read
        STOP[id(surface)] = lambda ts, o=opt, sf=surface: len(ts) >= 16 and trace(ts, sf, o)[0] is not None  # type: ignore[misc]
        for name, strategy in STRATEGIES.items():
            n_seeds = agent_seeds if name == "agent" else seeds
            for seed in range(n_seeds):
                trials = strategy(case, surface, cands, seed, MAX_TRIALS)
                hit, regrets = trace(trials, surface, opt)
                hits[name].append(hit)
                r8[name].append(_regret_at(regrets, 8))
                r16[name].append(_regret_at(regrets, 16))
        del STOP[id(surface)]
    print(
        f"\n{'simulator: strategy':20s} {'runs':>5s} {'median':>7s} {'p90':>6s} {'worst':>6s} {'reached':>8s} "
        f"{'regret@8':>9s} {'regret@16':>10s}"
    )
    for name in STRATEGIES:
        med, p90, worst, reached = _summary([_as_num(x) for x in hits[name]], MAX_TRIALS)
        print(
            f"{name:20s} {len(hits[name]):5d} {med:>7s} {p90:>6s} {worst:>6s} {reached:>8s} "
            f"{statistics.mean(r8[name]):9.1%} {statistics.mean(r16[name]):10.1%}"
        )
    return hits


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--agent-seeds", type=int, default=2)
    ap.add_argument("--tpe-seeds", type=int, default=3, help="seeds for optuna TPE on the foreign surfaces (slow)")
    ap.add_argument("--quick", action="store_true", help="fewer seeds (a smoke run)")
    ap.add_argument("--only", choices=("foreign", "simulator", "calibration"), help="run one section")
    ap.add_argument(
        "--libraries",
        action="store_true",
        help=f"also optuna's GPSampler and scikit-learn's GP on the foreign surfaces (needs torch and scikit-learn: "
        f"{LIBRARY_ENV} builds .venv-search)",
    )
    ap.add_argument("--library-seeds", type=int, default=3, help="seeds for each library on the foreign surfaces")
    args = ap.parse_args(argv)
    libraries: dict[str, Strategy] = {}
    if args.libraries:
        libraries, missing = importable_libraries()
        if missing:
            print(
                f"--libraries: {', '.join(missing)} not run: torch / scikit-learn do not import here; "
                f"bash {LIBRARY_ENV} (make search-libs) builds .venv-search, "
                f"then .venv-search/bin/python -m bench.search_efficiency --libraries",
                file=sys.stderr,
            )
    seeds = 3 if args.quick else args.seeds
    agent_seeds = 1 if args.quick else args.agent_seeds
    tpe_seeds = 1 if args.quick else args.tpe_seeds
    t0 = time.time()
    library_seeds = 1 if args.quick else args.library_seeds
    foreign = foreign_section(seeds, tpe_seeds, libraries, library_seeds) if args.only in (None, "foreign") else {}
    print()
    sim = simulator_section(seeds, agent_seeds) if args.only in (None, "simulator") else {}
    cal = calibration_section(seeds) if args.only in (None, "calibration") else []
    if cal:
        med, _, worst, _ = _summary(cal, 12)
        print(f"\ncalibrated prior, H200 measured steps: {len(cal)} runs, median {med}, worst {worst}")
    print(
        f"\n{seeds} seeds ({agent_seeds} for the agent, {tpe_seeds} for TPE on foreign surfaces), "
        f"{time.time() - t0:.0f}s"
    )
    no_prior = [x for v in foreign.get("optimizer", {}).values() for x in v]
    rnd = [x for v in foreign.get("random", {}).values() for x in v]
    with_prior = sorted([_as_num(x) for x in sim.get("optimizer", [])] + cal)

    def stat(h: Sequence[float], cap: int) -> tuple[str, str]:
        return (_fmt(statistics.median(h), cap), _fmt(max(h), cap)) if h else ("-", "-")

    m, w = stat(no_prior, FOREIGN_MAX_TRIALS)
    m2, w2 = stat(with_prior, MAX_TRIALS)
    r, _ = stat(rnd, FOREIGN_MAX_TRIALS)
    m3, w3 = stat([x for v in foreign.get(TRANSFER, {}).values() for x in v], FOREIGN_MAX_TRIALS)
    print(
        f"search: no-prior median {m}, worst {w} over {len(foreign.get('optimizer', {}))} foreign surfaces; "
        f"with prior median {m2}, worst {w2}; random median {r}; "
        f"no-prior with the earlier shapes' trials median {m3}, worst {w3}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
