"""The simulator as a trial engine: a :class:`~controller.trials.engine.launchers.LocalProcessLauncher` that starts a
simulated vLLM replica instead of vLLM (``shiftlight trial --simulate-model``)."""

from __future__ import annotations

import os
import sys
from typing import Any

from controller.domain.config import EngineConfig
from controller.trials.engine.launchers import LocalProcessLauncher


class SimulatorLauncher(LocalProcessLauncher):
    """Runs the candidate as a simulated vLLM replica (``python -m controller.simulator.server``): the same HTTP
    surface and metrics as vLLM, the speed of ``model`` on ``gpu`` from the performance model, ``speedup`` times
    faster than real time. An infeasible config exits at start-up with the reason, like a refusing vLLM server."""

    source = "simulator"

    def __init__(self, model: str, gpu: str, *, speedup: float = 1.0, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(model, engine_python=sys.executable, env={}, **kwargs)
        self.gpu = gpu
        self.speedup = speedup
        self.seed = seed

    @property
    def time_scale(self) -> float:
        """Engine seconds per wall-clock second: the runner reports results in engine time."""
        return self.speedup

    def command(self, config: EngineConfig, port: int) -> list[str]:
        return [
            self.engine_python,
            "-m",
            "controller.simulator.server",
            "--model",
            self.model_path,
            "--gpu",
            self.gpu,
            "--config",
            config.model_dump_json(),
            "--port",
            str(port),
            "--speedup",
            f"{self.speedup:g}",
            "--seed",
            str(self.seed),
            "--served-model-name",
            self.served_model_name,
        ]

    def process_env(self, config: EngineConfig) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        return env
