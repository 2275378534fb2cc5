"""The fleet simulator's performance model: GPU/model profiles and a first-principles vLLM step-time model.

Names are imported lazily so that ``python -m controller.simulator.perf`` runs cleanly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.simulator.perf import Capacity, PerfEstimate, PerformanceModel, StepTiming
    from controller.simulator.profiles import GpuProfile, ModelProfile, gpu_names, load_gpu, load_model, model_names

#: The field-note-1 setup, used as the demo and benchmark default.
DEFAULT_GPU = "gb300-dgx-station"
DEFAULT_MODEL = "nemotron-3-super-fp8"

_WHERE = {
    "Capacity": "perf",
    "PerfEstimate": "perf",
    "PerformanceModel": "perf",
    "StepTiming": "perf",
    "GpuProfile": "profiles",
    "ModelProfile": "profiles",
    "gpu_names": "profiles",
    "load_gpu": "profiles",
    "load_model": "profiles",
    "model_names": "profiles",
}

__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "Capacity",
    "GpuProfile",
    "ModelProfile",
    "PerfEstimate",
    "PerformanceModel",
    "StepTiming",
    "gpu_names",
    "load_gpu",
    "load_model",
    "model_names",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"controller.simulator.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'controller.simulator' has no attribute {name!r}")
