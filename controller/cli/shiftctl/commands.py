"""`shiftctl` (also the kubectl plugin `kubectl shift`): watch, explain and steer Shiftlight's TunedServices.

Reads go to the TunedService objects (the read commands are here); approvals, pauses and aborts are JSON patches on the
``status`` subresource, guarded by the resourceVersion that was read (the write commands are in
:mod:`controller.cli.shiftctl.write_verbs`). Not found, forbidden, conflict and connection errors print one line on
stderr and exit non-zero.

Nothing reaches the terminal unsanitised: tables and texts come from :mod:`controller.cli.shiftctl.render` (each field
made one safe line), and every other line goes through :func:`~controller.cli.shiftctl.terminal.echo` (the
sanitiser's :func:`~controller.domain.text.block`); the rich console interprets no markup or emoji codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer

from controller.cli.app import App
from controller.cli.shiftctl import evidence as evidence
from controller.cli.shiftctl import follow as follow
from controller.cli.shiftctl import render as render
from controller.cli.shiftctl import trials as trials_view
from controller.cli.shiftctl.follow import Health
from controller.cli.shiftctl.reads import connect, events_for, get_body, list_bodies, status_of, trial_crs
from controller.cli.shiftctl.terminal import (
    AllNamespacesOpt,
    ContextOpt,
    KubeconfigOpt,
    NameArg,
    NamespaceOpt,
    Output,
    OutputOpt,
    cli_errors,
    complete_names,
    console,
    dump,
    echo,
    fail,
    names,
    show,
)
from controller.cli.shiftctl.write_verbs import WRITE_VERBS
from controller.crd import models as crd
from controller.decide import ApiPrice
from controller.domain.evidence import trial_evidence

JSON = dict[str, Any]


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


app = App(  # one line on stderr for any error (--debug: the traceback)
    name="shiftctl",
    help="Watch, explain and steer Shiftlight TunedServices (kubectl conventions; also `kubectl shift`).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


# ----- commands: read -------------------------------------------------------------------------------

WatchOpt = Annotated[bool, typer.Option("--watch", "-w", help="after the list, print a row each time one changes")]
RequestTimeoutOpt = Annotated[
    str | None, typer.Option("--request-timeout", help="stop watching after this long (e.g. 30s, 5m); exits 0")
]


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return follow.parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _one_of(output: Output, *, kind: str, name: str, data: Any) -> bool:
    """Print ``data`` for ``-o json|yaml`` and the name for ``-o name``; False for the table formats."""
    if output is Output.name:
        names(kind, [name])
    elif output in (Output.json, Output.yaml):
        dump(data, output)
    else:
        return False
    return True


@app.command()
def get(
    name: Annotated[
        str | None, typer.Argument(help="TunedService name (all when omitted)", autocompletion=complete_names)
    ] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: AllNamespacesOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
    watch: WatchOpt = False,
    request_timeout: RequestTimeoutOpt = None,
) -> None:
    """List TunedServices: phase, active config, candidate and its weight, gain, age; `-w` follows changes."""
    timeout_s = _duration(request_timeout)
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        listed = all_namespaces and name is None

        def fetch() -> list[JSON]:
            return [get_body(conn, name)] if name is not None else list_bodies(conn, all_namespaces)

        def emit(bodies: Sequence[JSON], header: bool) -> None:
            if output is Output.name:
                names("tunedservice", bodies)
            elif output in (Output.json, Output.yaml):
                for body in bodies:
                    dump(body, output)
            else:
                table = render.list_table(bodies, wide=output is Output.wide, all_namespaces=listed)
                lines = table.plain.rstrip("\n").splitlines()
                echo("\n".join(lines if header else lines[1:]))

        if watch:
            follow.watch_changes(fetch, emit, timeout_s=timeout_s)
            return
        bodies = fetch()
        if output in (Output.json, Output.yaml):
            dump(bodies[0] if name is not None else {"apiVersion": "v1", "kind": "List", "items": bodies}, output)
        elif not bodies:
            where = "any namespace" if all_namespaces else f"{conn.namespace} namespace"
            echo(f"No resources found in {where}.", err=True)
        else:
            emit(bodies, True)


@app.command()
def describe(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Everything about one TunedService: spec, phase, active config and its vLLM args, rollout, events; while it
    waits for approval, the candidate's flags, their diff, its lossy knobs, the quality gate and the trials."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        body = get_body(conn, name)
        events = events_for(conn, name)
        lossy, rules_from = evidence.lossy_rules(conn, body)
        shown = evidence.evidence_of(body, lossy)
        data = {"object": body, "events": events, "approvalEvidence": shown.as_dict() if shown else None}
        if _one_of(output, kind="tunedservice", name=name, data=data):
            return
        console().print(render.describe_text(body, events))
        if shown is not None:
            console().print(evidence.evidence_text(shown, rules_from))


@app.command()
def explain(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Why this config: the traffic shape, the trials and evidence, who proposed it and who approved it."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        body = get_body(conn, name)
        status = status_of(body)
        lossy, rules_from = evidence.lossy_rules(conn, body)
        shown = evidence.evidence_of(body, lossy)
        data = {
            "name": name,
            "phase": status.phase.value,
            "activeConfig": {"label": status.active_config.label(), "vllmArgs": status.active_config.vllm_args()},
            "rollout": status.rollout.model_dump(mode="json") if status.rollout else None,
            "tuning": status.tuning.model_dump(mode="json") if status.tuning else None,
            "trials": [trial_evidence(name, t).__dict__ for t in sorted(status.trials, key=lambda t: -t.objective())],
            "approvalEvidence": shown.as_dict() if shown else None,
            "lastReasons": [r.model_dump(mode="json") for r in status.last_reasons],
        }
        if _one_of(output, kind="tunedservice", name=name, data=data):
            return
        console().print(render.explain_text(body))
        if shown is not None:
            console().print(evidence.evidence_text(shown, rules_from))


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
    """The TunedService's Trial CRs (phase, progress, result); without any, the trials in its status, best first.
    Each trial is named by its Trial CR's name, the one `explain`, `describe` and Slack use."""
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        status = status_of(get_body(conn, name))  # the TunedService must exist
        items = trial_crs(conn, name)
        ordered = sorted(status.trials, key=lambda t: -t.objective())
        if output is Output.name:
            names("trial", items or [trial_evidence(name, t).name for t in ordered])
        elif output in (Output.json, Output.yaml):
            dump(items if items else [t.model_dump(mode="json") | {"name": trial_evidence(name, t).name}
                                      for t in ordered], output)  # fmt: skip
        elif watch:
            done, rows = trials_view.watch_trials(lambda: trial_crs(conn, name), console(), timeout_s=timeout)
            show(trials_view.trial_crs_table(rows))
            if not done:
                raise fail(f"timed out after {timeout:g} s with trials still running")
        elif items:
            show(trials_view.trial_crs_table(trials_view.rows_of(items)))
        elif status.trials:
            show(render.trials_table(status.trials, service=name, wide=output is Output.wide))
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
        data = {
            "history": list(status.history),
            "rollout": status.rollout.model_dump(mode="json") if status.rollout else None,
        }
        if _one_of(output, kind="tunedservice", name=name, data=data):
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
        data = [s.model_dump(mode="json") | {"gain": s.gain} for s in status.schedule]
        if _one_of(output, kind="tunedservice", name=name, data=data):
            return
        if not status.schedule:
            echo(f"No schedule yet for {name}: nothing has been tuned for any window.", err=True)
            return
        show(render.cost_table(status, gpu_hour_price=gpu_hour_price))
        if gpu_hour_price is not None and api_input_price is not None and api_output_price is not None:
            spec, _ = crd.parse_tuned_service(body)
            api = ApiPrice(input_per_million=api_input_price, output_per_million=api_output_price)
            echo("")
            show(render.economics_table(status, spec.schedule, gpu_hour_price=gpu_hour_price, api=api))


@app.command()
def status(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = Output.table,
    timeout: Annotated[
        str | None, typer.Option("--timeout", "-t", help="give up after this long (e.g. 0s, 90s, 10m); exit 2")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch/--no-watch", help="wait until Healthy or Degraded")] = True,
) -> None:
    """For CI: wait until the TunedService is Healthy (exit 0) or Degraded (exit 1); exit 2 on the timeout.
    Healthy: Observing on a config. Degraded: RolledBack, Frozen, an abort requested, or an invalid object.
    Progressing (tuning, awaiting approval, rolling out, paused) is waited on."""
    timeout_s = 0.0 if not watch else _duration(timeout)
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)
        if output is Output.name:
            names("tunedservice", [get_body(conn, name)])
            return
        quiet = output in (Output.json, Output.yaml)
        state, timed_out = follow.wait_for_health(
            lambda: get_body(conn, name), (lambda _line: None) if quiet else echo, timeout_s=timeout_s
        )
        if quiet:
            dump({"name": name, "health": state.value, "why": follow.health(get_body(conn, name))[1]}, output)
        if timed_out:
            if not quiet:
                echo(
                    f"error: {name} still {state.value}" + (f" after {timeout}" if watch and timeout else ""), err=True
                )
            raise typer.Exit(follow.EXIT_CODES[Health.PROGRESSING])
        raise typer.Exit(follow.EXIT_CODES[state])


@app.command()
def completion(shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish")]) -> None:
    """Print the shell completion script (TunedService names are completed from the API server), e.g.
    `source <(shiftctl completion bash)`."""
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="shiftctl", complete_var="_SHIFTCTL_COMPLETE", shell=shell.value))


# ----- commands: write ------------------------------------------------------------------------------

for _verb in WRITE_VERBS:
    app.command()(_verb)


if __name__ == "__main__":
    app()
