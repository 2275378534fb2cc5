"""The optimizer's candidates: the policy's valid configs (or a bounded pool of them), encoded for the surrogate, and
the process-wide cache that bounds the memory every optimizer's pools and encoded sets hold together. Pure."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from controller.decide.search.kernel import ORDERED, Inputs, KnobEncoding, shape_features
from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape
from controller.policy.models import Policy
from controller.policy.space import MAX_POOL_CONFIGS, Feasibility, SearchSpace

Prior = Callable[[EngineConfig], float]


class CandidateSet:
    """The finite valid space, encoded for the surrogate (one integer code per varied knob)."""

    def __init__(
        self,
        configs: Sequence[EngineConfig],
        prior: Prior | None = None,
        shape: TrafficShape | None = None,
        *,
        structured: bool = True,
    ) -> None:
        """``shape``: the traffic shape the candidates are judged on (an input of the surrogate; optional).
        ``structured=False`` treats every knob as unordered (the plain "knobs in common" kernel, for comparison)."""
        if not configs:
            raise ValueError("the search space has no valid config")
        self.configs = list(configs)
        self.shape = shape
        self.encoding = KnobEncoding(self.configs, ORDERED if structured else frozenset())
        pos, unset, cat = self.encoding.pos, self.encoding.unset, self.encoding.cat
        self.inputs = Inputs(pos, unset, cat, np.tile(shape_features(shape), (len(self.configs), 1)))
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


def candidate_configs(
    space: Policy | SearchSpace | Sequence[EngineConfig], feasibility: Feasibility | None = None
) -> list[EngineConfig]:
    """The valid configs of a policy / space / explicit list (policy constraints and memory fit applied). A space
    of more than ``MAX_POOL_CONFIGS`` combinations gives a pool of at most that many (``sampled_configs``), never
    the whole space."""
    if isinstance(space, Policy):
        return space.space.sampled_configs(feasibility or space.feasibility)
    if isinstance(space, SearchSpace):
        return space.sampled_configs(feasibility)
    return [c for c in space if feasibility is None or feasibility(c) is None]


#: Most encoded candidate sets one optimizer keeps (one per traffic shape it was asked about).
MAX_SETS_PER_OPTIMIZER = 16

#: Most candidates that the pools and encoded sets of every optimizer in the process hold together (the least
#: recently used goes first). A TunedService at the combination limit holds a pool of ``MAX_POOL_CONFIGS`` and a set
#: of as many per shape; this bound keeps all of them within a fixed amount of memory however many TunedServices
#: the operator tunes (a dropped one is rebuilt, the same, when next needed).
MAX_CACHED_CANDIDATES = 16 * MAX_POOL_CONFIGS


class CandidateCache:
    """Each optimizer's pool of valid configs and its encoded candidate sets (one per traffic shape), bounded per
    optimizer and in total; least recently used first out. A pure cache: whatever it drops is rebuilt the same on
    the next call. Thread-safe."""

    def __init__(
        self, *, max_candidates: int = MAX_CACHED_CANDIDATES, max_per_owner: int = MAX_SETS_PER_OPTIMIZER
    ) -> None:
        self.max_candidates = max_candidates
        self.max_per_owner = max_per_owner
        self._entries: OrderedDict[tuple[int, str | None], CandidateSet | list[EngineConfig]] = OrderedDict()
        self._lock = threading.Lock()
        self._configs: dict[EngineConfig, EngineConfig] = {}
        """One instance of each config the pools hold: TunedServices on the same space (most of a fleet's, on one
        policy preset) share their configs instead of each holding a copy (about 1 KB each)."""

    def _get(self, key: tuple[int, str | None]) -> CandidateSet | list[EngineConfig] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def _put(self, key: tuple[int, str | None], value: CandidateSet | list[EngineConfig]) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            sets = [k for k in self._entries if k[0] == key[0] and k[1] is not None]
            for old in sets[: max(0, len(sets) - self.max_per_owner)]:
                del self._entries[old]
            while len(self._entries) > 1 and self._total() > self.max_candidates:
                self._entries.popitem(last=False)

    def pool(self, owner: int) -> list[EngineConfig] | None:
        found = self._get((owner, None))
        return found if isinstance(found, list) else None

    def put_pool(self, owner: int, configs: list[EngineConfig]) -> None:
        """Keep ``configs`` as ``owner``'s pool; each is replaced, in the list itself, by the equal config already
        held, so the candidate sets later built from the list share them too."""
        with self._lock:
            if len(self._configs) > self.max_candidates:  # forget those no pool holds any more
                self._configs = {c: c for e in self._entries.values() if isinstance(e, list) for c in e}
            configs[:] = [self._configs.setdefault(c, c) for c in configs]
        self._put((owner, None), configs)

    def candidate_set(self, owner: int, shape: str) -> CandidateSet | None:
        found = self._get((owner, shape))
        return found if isinstance(found, CandidateSet) else None

    def put_candidate_set(self, owner: int, shape: str, candidates: CandidateSet) -> None:
        self._put((owner, shape), candidates)

    def _total(self) -> int:
        return sum(len(c) for c in self._entries.values())

    def shared_configs(self) -> int:
        """How many distinct configs the table shared by the pools holds."""
        with self._lock:
            return len(self._configs)

    def candidates(self) -> int:
        """Configs held in all pools and sets."""
        with self._lock:
            return self._total()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


#: The process's cache: every optimizer shares it unless given its own, so the operator's bound holds for all of
#: its TunedServices together.
SHARED_CANDIDATES = CandidateCache()


__all__ = [
    "MAX_CACHED_CANDIDATES",
    "MAX_SETS_PER_OPTIMIZER",
    "SHARED_CANDIDATES",
    "CandidateCache",
    "CandidateSet",
    "Prior",
    "candidate_configs",
]
