"""optuna's TPE sampler as the optimizer's other search strategy (``strategy="tpe"``): ask/tell over the knob codes,
warm-started from the prior's top picks. Pure given its seed; the benchmark compares it with the Gaussian process."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import optuna

from controller.decide.search.candidates import CandidateSet
from controller.decide.search.gp import Suggestion
from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape


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
        noise: float | None = None,  # the common interface; TPE does not model measurement noise
        shapes: Sequence[TrafficShape | None] | None = None,  # nor the traffic shape
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


__all__ = ["TpeSearch"]
