"""`shiftlight trial`: one canary trial from the command line, with a rich progress bar and a clean Ctrl-C."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import FrameType

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from controller.cli.app import validation_line
from controller.cli.progress_bar import trial_progress
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.trials.engine.launchers import Launcher, LocalProcessLauncher
from controller.trials.engine.simulator_launcher import SimulatorLauncher
from controller.trials.runner import TrialRunner


def run_trial_command(
    *,
    config_json: str,
    vllm_model_dir: Path | None,
    simulate_model: str | None,
    simulate_gpu: str,
    speedup: float,
    concurrency: float,
    prompt_tokens: float,
    output_tokens: float,
    requests: int,
    duration: float,
    ttft_slo: float,
    tpot_slo: float,
    output: str,
) -> int:
    err = Console(stderr=True)
    try:
        config = EngineConfig.model_validate(json.loads(config_json))
    except (json.JSONDecodeError, ValidationError) as exc:
        why = validation_line(exc) if isinstance(exc, ValidationError) else str(exc)
        err.print(f"error: --config: {why}", soft_wrap=True, markup=False, highlight=False)
        return 2
    if (vllm_model_dir is None) == (simulate_model is None):
        err.print("error: give exactly one of --vllm-model-dir or --simulate-model")
        return 2
    if output not in ("table", "json"):
        err.print(f"error: -o: '{output}' is not one of table, json")
        return 2
    launcher: Launcher
    if vllm_model_dir is not None:
        if not vllm_model_dir.is_dir():
            err.print(f"error: --vllm-model-dir: {vllm_model_dir} is not a folder")
            return 2
        launcher = LocalProcessLauncher(vllm_model_dir)
        model, gpu = vllm_model_dir.name, "local"
    else:
        assert simulate_model is not None
        launcher = SimulatorLauncher(simulate_model, simulate_gpu, speedup=speedup)
        model, gpu = simulate_model, simulate_gpu
    shape = TrafficShape(
        arrival_rate_rps=0.0,
        concurrency=concurrency,
        prompt_tokens=LengthDistribution(mean=prompt_tokens),
        output_tokens=LengthDistribution(mean=output_tokens),
    )
    request = TrialRequest(
        target=TargetRef("local", "trial", model),
        config=config,
        shape=shape,
        slo=SLO(ttft_seconds=ttft_slo, tpot_seconds=tpot_slo),
        budget=TrialBudget(duration_s=duration, warmup_s=0.0, max_requests=requests),
    )
    with trial_progress(err) as progress:
        task = progress.add_task("starting", total=None)

        def on_progress(phase: str, done: int, total: int) -> None:
            progress.update(task, description=phase, completed=done, total=total or None)

        runner = TrialRunner(launcher, model=model, gpu_type=gpu, engine_version="cli", progress=on_progress)

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            progress.update(task, description="cancelling")
            runner.cancel()

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            result = runner.run(request)
        finally:
            signal.signal(signal.SIGINT, previous)
    if output == "json":
        print(result.model_dump_json(indent=2))
    else:
        Console().print(result_table(result))
    return 0 if result.ok else 1


def result_table(result: TrialResult) -> Table:
    table = Table(title=f"trial of {result.config.label()} ({result.source}): {result.status.value}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    if not result.ok:
        table.add_row("reason", result.reason)
        for line in result.log_tail[-5:]:
            table.add_row("log", line)
        return table
    rows = [
        ("output tokens/s", f"{result.output_tokens_per_s:,.1f}"),
        ("goodput tokens/s (SLO)", f"{result.goodput_tokens_per_s:,.1f}"),
        ("requests/s", f"{result.request_throughput:.2f}"),
        ("completed / failed", f"{result.completed} / {result.failed}"),
        ("start-up", f"{result.startup_s:.1f} s"),
    ]
    for name, p in (("TTFT", result.ttft_s), ("TPOT", result.tpot_s), ("e2e", result.e2e_s)):
        if p is not None:
            rows.append((f"{name} p50 / p95 / p99", f"{p.p50 * 1000:.1f} / {p.p95 * 1000:.1f} / {p.p99 * 1000:.1f} ms"))
    if result.spec_decode is not None:
        rows.append(("spec-decode acceptance", f"{result.spec_decode.acceptance_rate:.2f}"))
    for name, value in rows:
        table.add_row(name, value)
    return table
