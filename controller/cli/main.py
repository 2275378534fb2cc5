"""`shiftlight`: the operator and demo entry point."""

from __future__ import annotations

from pathlib import Path

import typer

from controller.cli.app import DEBUG_ENV, DEBUG_FLAG, App

app = App(
    name="shiftlight",
    help="Keeps a self-hosted vLLM fleet on the fastest safe engine configuration for its traffic.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"shiftlight {version('shiftlight')}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
    debug: bool = typer.Option(
        False,
        DEBUG_FLAG,
        help=f"on an error, print its traceback instead of one line (any position; also {DEBUG_ENV}=1)",
    ),
) -> None:
    """Keeps a self-hosted vLLM fleet on the fastest safe engine configuration for its traffic."""


@app.command()
def demo(
    out: Path = typer.Option(Path("out/demo"), "--out", help="folder for the report, chart (PNG + HTML) and status"),
    seed: int = typer.Option(7, help="seed of the simulated day (traffic, trials, noise)"),
    policy: Path = typer.Option(
        Path("policies/v1/hybrid-mtp-workstation.yaml"), help="tuning policy (YAML) the demo runs under"
    ),
    hours: float = typer.Option(24.0, min=1.0, max=168.0, help="simulated hours"),
) -> None:
    """Tune a simulated vLLM fleet through a simulated day and report what Shiftlight did (a line per simulated hour
    on stderr as it goes, then the report)."""
    from controller.demo.model import DemoSettings
    from controller.demo.progress import HourProgress
    from controller.demo.run import run_demo
    from controller.errors import InvalidInput

    if not policy.is_file():
        raise InvalidInput(
            f"no policy file {policy} in {Path.cwd()} (the presets are in the repository's policies/v1: run the demo "
            "from the repository's root, or give --policy FILE)",
            field="--policy",
        )

    def show(hour: HourProgress) -> None:
        typer.echo(hour.line(), err=True)  # echo flushes: each hour shows as soon as it is simulated

    report = run_demo(DemoSettings(out_dir=out, seed=seed, policy_path=policy, hours=hours), on_hour=show)
    typer.echo(report.text)
    typer.echo(f"report: {report.paths.text}  chart: {report.paths.png}  html: {report.paths.html}")
    typer.echo(report.summary_line)


def watched_namespaces(all_namespaces: bool | None, namespaces: list[str]) -> tuple[str, ...]:
    """The namespaces ``shiftlight operator`` watches: ``()`` for all of them. ``--namespace`` alone means only
    those; ``--all-namespaces`` together with ``--namespace``, or ``--namespaced`` without one, is refused."""
    if all_namespaces and namespaces:
        raise typer.BadParameter("give either --all-namespaces or --namespace, not both", param_hint="--namespace")
    if all_namespaces is False and not namespaces:
        raise typer.BadParameter("--namespaced needs at least one --namespace", param_hint="--namespace")
    return tuple(dict.fromkeys(namespaces))


@app.command()
def operator(
    all_namespaces: bool | None = typer.Option(
        None, "--all-namespaces/--namespaced", help="watch every namespace (the default without --namespace)"
    ),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="a namespace to watch (repeat for more)"),
) -> None:
    """Run the Kubernetes operator (kopf) with Lease-based leader election."""
    from controller.reactor.run import main as run_operator

    namespaces = watched_namespaces(all_namespaces, namespace)
    run_operator(all_namespaces=not namespaces, namespaces=namespaces)


@app.command()
def trial(
    config: str = typer.Option("{}", help="EngineConfig as JSON (default: stock vLLM)"),
    vllm_model_dir: Path | None = typer.Option(
        None, help="run a real vLLM server on this model folder (engine from SHIFTLIGHT_ENGINE_PYTHON)"
    ),
    simulate_model: str | None = typer.Option(None, "--simulate-model", help="simulate this model profile instead"),
    simulate_gpu: str = typer.Option("gb300-dgx-station", help="GPU profile for --simulate-model"),
    speedup: float = typer.Option(
        1.0, min=0.1, help="simulated seconds per second (simulator only; above ~5 the client's own overhead shows)"
    ),
    concurrency: float = typer.Option(8.0, min=1, help="streams in flight (closed loop)"),
    prompt_tokens: float = typer.Option(256.0, min=1),
    output_tokens: float = typer.Option(128.0, min=1),
    requests: int = typer.Option(64, min=1, help="measured requests"),
    duration: float = typer.Option(60.0, min=1, help="longest measured time, seconds"),
    ttft_slo: float = typer.Option(2.0, min=0.001, help="TTFT SLO, seconds"),
    tpot_slo: float = typer.Option(0.1, min=0.0001, help="TPOT SLO, seconds"),
    output: str = typer.Option("table", "-o", help="table | json"),
) -> None:
    """Run one canary trial of a config on a replayed traffic shape, with progress, and print the result."""
    from controller.cli.trial import run_trial_command

    raise typer.Exit(
        run_trial_command(
            config_json=config,
            vllm_model_dir=vllm_model_dir,
            simulate_model=simulate_model,
            simulate_gpu=simulate_gpu,
            speedup=speedup,
            concurrency=concurrency,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            requests=requests,
            duration=duration,
            ttft_slo=ttft_slo,
            tpot_slo=tpot_slo,
            output=output,
        )
    )


@app.command()
def simulate(
    model: str = typer.Option(..., help="model profile name"),
    gpu: str = typer.Option(..., help="GPU profile name"),
    port: int = typer.Option(8000, help="loopback port"),
    config: str = typer.Option("{}", help="EngineConfig as JSON"),
    speedup: float = typer.Option(1.0, min=0.01, help="run simulated time this many times faster than real time"),
) -> None:
    """Serve one simulated vLLM replica (OpenAI API, /health, /metrics) on loopback."""
    from controller.simulator.server import main as serve

    raise typer.Exit(
        serve(["--model", model, "--gpu", gpu, "--port", str(port), "--config", config, "--speedup", str(speedup)])
    )


@app.command()
def calibrate(
    gpu: str = typer.Option(..., help="GPU profile name the measurements are for (calibration-<gpu>.yaml)"),
    model: str = typer.Option("llama-3.1-8b", help="dense model profile: GEMM, attention and end-to-end shapes"),
    extra_model: list[str] = typer.Option([], "--extra-model", help="model profile whose MoE / Mamba parts to time"),
    moe_latent: list[str] = typer.Option([], "--moe-latent", help="MODEL=WIDTH: expert input width (latent MoE)"),
    out: Path = typer.Option(Path("calibration"), "--out", help="folder for calibration-<gpu>.yaml and raw points"),
    raw: Path | None = typer.Option(None, "--raw", help="fit an earlier probe's raw.json instead of measuring"),
    quick: bool = typer.Option(False, "--quick", help="tiny sweeps: check that the probe runs"),
    e2e: bool = typer.Option(True, "--e2e/--no-e2e", help="also time end-to-end decode steps of the dense stack"),
    prepare: Path | None = typer.Option(
        None, "--prepare", help="only write shapes.json and the probe scripts here (to run the probe in another image)"
    ),
    stdout: bool = typer.Option(False, "--stdout", help="also print the profile (for kubectl logs)"),
) -> None:
    """Measure this node's GPU (PyTorch only, a few minutes) and write a calibration profile for the simulator."""
    from controller.calibrate.run import calibrate as run_calibration
    from controller.calibrate.run import prepare_probe

    if prepare is not None:
        typer.echo(f"probe input: {prepare_probe(prepare, model, extra_model, moe_latent)}")
        return
    path, cal = run_calibration(
        gpu=gpu,
        dense_model=model,
        other_models=extra_model,
        moe_latent=moe_latent,
        out_dir=out,
        raw_path=raw,
        quick=quick,
        e2e=e2e,
    )
    if stdout:
        typer.echo(path.read_text(), nl=False)
    typer.echo(f"calibration profile: {path} ({cal.measured_on.device}, {len(cal.points)} points)", err=stdout)


if __name__ == "__main__":
    app()
