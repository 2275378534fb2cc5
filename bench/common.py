"""What several benchmarks share: the search benches' measured trial and model-based search loop (with its priors
and early stops), the trace that scores a search, and the reader of the H200 calibration's end-to-end steps."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from controller.calibrate.fit import ATTENTION_IMPL
from controller.decide.search.candidates import CandidateSet
from controller.decide.search.gp import GpSearch
from controller.decide.search.tpe import TpeSearch
from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "controller/simulator/profiles/calibration/h200-raw.json"
"""The H200 probe's raw measurements: primitives and end-to-end decode steps."""

NOISE = 0.025
"""The standard deviation of a measured trial's goodput, relative to the true value."""
WITHIN = 0.03
"""A search has found the optimum once its incumbent's true goodput is within this share of it."""


class SearchCase(Protocol):
    """What a search strategy reads of the case it searches: the keys of its priors (and, if set, a shape)."""

    profile: str
    shape_name: str


class TrialSurface(Protocol):
    """An objective a search runs trials on: the true goodput of a config and a seeded noisy measurement of it."""

    def true(self, cfg: EngineConfig) -> float: ...

    def trial(self, cfg: EngineConfig, rng: random.Random) -> TrialResult: ...


ModelSearch = Callable[[Any, Any, list[EngineConfig], int, int], list[TrialResult]]


def measured_trial(cfg: EngineConfig, shape: TrafficShape, slo: SLO, goodput: float) -> TrialResult:
    """A measured trial of ``cfg`` whose output and goodput are ``goodput`` tokens/s (latencies well inside the SLO)."""
    pct = Percentiles(p50=0.01, p95=0.01, p99=0.01)
    return TrialResult(
        config=cfg,
        shape=shape,
        slo=slo,
        status=TrialStatus.MEASURED,
        ttft_s=pct,
        tpot_s=pct,
        output_tokens_per_s=goodput,
        goodput_tokens_per_s=goodput,
        duration_s=120,
        startup_s=60,
    )


STOP: dict[int, Callable[[list[TrialResult]], bool]] = {}
"""Per surface (by id): stop a run early once this says its incumbent is within 3% (the foreign section)."""


PRIORS_MIS: dict[str, Callable[[EngineConfig], float]] = {}
PRIORS_SIM: dict[str, Callable[[EngineConfig], float]] = {}
PRIORS_NOISY: dict[str, Callable[[EngineConfig], float]] = {}


def model_search(kind: str, prior_kind: str, *, structured: bool = True) -> ModelSearch:
    """A model-based search (``kind`` "gp" or "tpe") with the named prior; ``structured=False``: the GP's plain
    "knobs in common" kernel (every knob unordered, no shape input), the surrogate compared against."""

    def run(
        case: SearchCase, surface: TrialSurface, cands: list[EngineConfig], seed: int, budget: int
    ) -> list[TrialResult]:
        prior = None
        if prior_kind == "mis":
            prior = PRIORS_MIS[case.profile + case.shape_name]
        elif prior_kind == "sim":
            prior = PRIORS_SIM[case.profile + case.shape_name]
        elif prior_kind == "noisy":
            prior = PRIORS_NOISY[case.profile + case.shape_name]
        shape = getattr(case, "shape", None) if structured else None
        cs = CandidateSet(cands, prior, shape if isinstance(shape, TrafficShape) else None, structured=structured)
        search = GpSearch(cs, seed=seed) if kind == "gp" else TpeSearch(cs, seed=seed)
        rng = random.Random(seed * 7919 + 1)
        trials: list[TrialResult] = []
        observed: list[tuple[EngineConfig, float]] = []
        stop = STOP.get(id(surface))
        while len(trials) < budget:
            picks = search.suggest(observed, n=1)
            if not picks:
                break
            r = surface.trial(picks[0].config, rng)
            trials.append(r)
            observed.append((r.config, r.objective()))
            if stop is not None and stop(trials):
                break
        return trials

    return run


def trace(trials: Sequence[TrialResult], surface: TrialSurface, opt: float) -> tuple[int | None, list[float]]:
    """First t where the incumbent (best measured) is within 3%, and the regret after each trial."""
    best_meas, inc_true = -1.0, 0.0
    hit: int | None = None
    regrets: list[float] = []
    for i, r in enumerate(trials):
        if r.objective() > best_meas:
            best_meas, inc_true = r.objective(), surface.true(r.config)
        regret = 1 - inc_true / opt
        regrets.append(regret)
        if hit is None and inc_true >= (1 - WITHIN) * opt:
            hit = i + 1
    return hit, regrets


def e2e_points(raw: dict[str, Any], impl: str | None = ATTENTION_IMPL) -> list[dict[str, Any]]:
    """The end-to-end decode steps of the probe's raw measurements (of attention ``impl``; None: every one), by
    context, batch and query length."""
    pts = [p for p in raw["points"] if p["family"] == "e2e" and (impl is None or p.get("impl") == impl)]
    return sorted(pts, key=lambda p: (p["context"], p["batch"], p["query"]))
