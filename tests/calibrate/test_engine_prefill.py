"""The replica engine passes each prompt chunk's attention to its cached context when the prefill fixes are on."""

from __future__ import annotations

from typing import Any

from controller.domain.config import EngineConfig
from controller.simulator.engine import ReplicaEngine
from controller.simulator.perf import PerformanceModel, StepTiming
from controller.simulator.profiles import load_gpu, load_model


class RecordingModel(PerformanceModel):
    """The real model, remembering the prefill work of every step it was asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.works: list[tuple[int, float | None]] = []

    def step(self, config: EngineConfig, **kwargs: Any) -> StepTiming:
        if kwargs["prefill_tokens"]:
            self.works.append((kwargs["prefill_tokens"], kwargs.get("prefill_attention_work")))
        return super().step(config, **kwargs)


def _prefill_works(fixes: bool) -> list[tuple[int, float | None]]:
    pm = RecordingModel(load_model("llama-3.1-8b"), load_gpu("h200"), None, prefill_fixes=fixes)
    engine = ReplicaEngine(pm, EngineConfig(max_num_batched_tokens=2048))
    engine.add_request(6000, 4)  # three chunks of 2048 tokens (the last one smaller)
    while engine.step() is not None:
        pass
    return pm.works


def test_each_chunk_attends_to_the_chunks_before_it() -> None:
    works = _prefill_works(True)
    chunks = [n for n, _ in works]
    assert sum(chunks) == 6000
    cached = 0
    for n, work in works:
        assert work == n * (cached + n / 2)
        cached += n


def test_without_the_fixes_the_engine_passes_no_work() -> None:
    assert all(work is None for _, work in _prefill_works(False))
