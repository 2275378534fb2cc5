"""`shiftctl` (also the kubectl plugin `kubectl shift`): watch, explain and steer Shiftlight's TunedServices.

Reads go to the TunedService objects (the read commands are here); approvals, pauses and aborts are JSON patches on the
``status`` subresource, guarded by the resourceVersion that was read (the write commands are in
:mod:`controller.cli.shiftctl_write_verbs`). Not found, forbidden, conflict and connection errors print one line on
stderr and exit non-zero.

Nothing reaches the terminal unsanitised: tables and texts come from :mod:`controller.cli.shiftctl_render` (each field
made one safe line), and every other line goes through :func:`~controller.cli.shiftctl_terminal.echo` (the
sanitiser's :func:`~controller.domain.text.block`); the rich console interprets no markup or emoji codes.
"""

from __future__ import annotations

from typing import Annotated

import typer

from controller.cli import shiftctl_render as render
from controller.cli import shiftctl_trials as trials_view
from controller.cli.shiftctl_reads import connect, events_for, get_body, list_bodies, status_of, trial_crs
from controller.cli.shiftctl_terminal import (
    AllNamespacesOpt,
    ContextOpt,
    KubeconfigOpt,
    NameArg,
    NamespaceOpt,
    Output,
    OutputOpt,
    cli_errors,
    console,
    dump,
    echo,
    fail,
)
from controller.cli.shiftctl_write_verbs import WRITE_VERBS
from controller.crd import models as crd
from controller.decide import ApiPrice

app = typer.Typer(
    name="shiftctl",
    help="Watch, explain and steer Shiftlight TunedServices (kubectl conventions; also `kubectl shift`).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


# ----- commands: read -------------------------------------------------------------------------------


@app.command()
def get(
    name: Annotated[str | None, typer.Argument(help="TunedService name (all when omitted)")] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: AllNamespacesOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """List TunedServices: phase, active config, candidate and its weight, gain, age."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        bodies = [get_body(conn, name)] if name is not None else list_bodies(conn, all_namespaces)
        if output in (Output.json, Output.yaml):
            dump(bodies[0] if name is not None else {"apiVersion": "v1", "kind": "List", "items": bodies}, output)
            return
        if not bodies:
            where = "any namespace" if all_namespaces else f"{conn.namespace} namespace"
            echo(f"No resources found in {where}.", err=True)
            return
        console().print(
            render.list_table(bodies, wide=output is Output.wide, all_namespaces=all_namespaces and name is None)
        )


@app.command()
def describe(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Everything about one TunedService: spec, phase, active config and its vLLM args, rollout, events."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        body = get_body(conn, name)
        console().print(render.describe_text(body, events_for(conn, name)))


@app.command()
def explain(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Why this config: the traffic shape, the trials and evidence, who proposed it and who approved it."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        console().print(render.explain_text(get_body(conn, name)))


@app.command()
def trials(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="follow running trials with a progress bar")] = False,
    timeout: Annotated[float | None, typer.Option(help="stop watching after this many seconds (exit 1)")] = None,
) -> None:
    """The TunedService's Trial CRs (phase, progress, result); without any, the trials in its status, best first."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        status = status_of(get_body(conn, name))  # the TunedService must exist
        items = trial_crs(conn, name)
        if output in (Output.json, Output.yaml):
            dump(items if items else [t.model_dump(mode="json") for t in status.trials], output)
        elif watch:
            done, rows = trials_view.watch_trials(lambda: trial_crs(conn, name), console(), timeout_s=timeout)
            console().print(trials_view.trial_crs_table(rows))
            if not done:
                raise fail(f"timed out after {timeout:g} s with trials still running")
        elif items:
            console().print(trials_view.trial_crs_table(trials_view.rows_of(items)))
        elif status.trials:
            console().print(render.trials_table(status.trials, wide=output is Output.wide))
        else:
            echo(f"No trials recorded for {name} yet.", err=True)


@app.command()
def history(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Finished rollouts and rollbacks, and the current rollout's approvals and analyses."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        status = status_of(get_body(conn, name))
        lines = render.history_lines(status)
        if output in (Output.json, Output.yaml):
            dump(
                {
                    "history": list(status.history),
                    "rollout": status.rollout.model_dump(mode="json") if status.rollout else None,
                },
                output,
            )
            return
        echo("\n".join(lines) if lines else f"No rollouts recorded for {name} yet.")


@app.command()
def cost(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
    gpu_hour_price: Annotated[
        float | None, typer.Option("--gpu-hour-price", min=0, help="price of one GPU-hour, to show cost per 1M tokens")
    ] = None,
    api_input_price: Annotated[
        float | None, typer.Option("--api-input-price", min=0, help="API price per 1M input tokens (USD)")
    ] = None,
    api_output_price: Annotated[
        float | None, typer.Option("--api-output-price", min=0, help="API price per 1M output tokens (USD)")
    ] = None,
) -> None:
    """Per schedule window: goodput vs stock and GPU-hours (or cost) per million output tokens; with a GPU-hour
    price and API prices, the cost at the measured load against the API, flagging windows where the API is cheaper."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        body = get_body(conn, name)
        status = status_of(body)
        if output in (Output.json, Output.yaml):
            dump([s.model_dump(mode="json") | {"gain": s.gain} for s in status.schedule], output)
            return
        if not status.schedule:
            echo(f"No schedule yet for {name}: nothing has been tuned for any window.", err=True)
            return
        console().print(render.cost_table(status, gpu_hour_price=gpu_hour_price))
        if gpu_hour_price is not None and api_input_price is not None and api_output_price is not None:
            spec, _ = crd.parse_tuned_service(body)
            api = ApiPrice(input_per_million=api_input_price, output_per_million=api_output_price)
            console().print()
            console().print(render.economics_table(status, spec.schedule, gpu_hour_price=gpu_hour_price, api=api))


# ----- commands: write ------------------------------------------------------------------------------

for _verb in WRITE_VERBS:
    app.command()(_verb)


if __name__ == "__main__":
    app()
