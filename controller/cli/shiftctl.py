"""`shiftctl` (also the kubectl plugin `kubectl shift`): watch, explain and steer Shiftlight's TunedServices.

Reads go to the TunedService objects; approvals, pauses and aborts are JSON patches on the ``status``
subresource, guarded by the resourceVersion that was read (see :mod:`controller.cli.shiftctl_patches`).
Not found, forbidden, conflict and connection errors print one line on stderr and exit non-zero.

Nothing reaches the terminal unsanitised: tables and texts come from :mod:`controller.cli.shiftctl_render` (each field
made one safe line), and every other line goes through :func:`echo` (the sanitiser's
:func:`~controller.domain.text.block`); the rich console interprets no markup or emoji codes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from kubernetes import client, config
from rich.console import Console

from controller.adapters.kube import KubeForbidden, KubeUnauthorized, KubeUnavailable, kube_errors, load_api_client
from controller.cli import shiftctl_patches as patches
from controller.cli import shiftctl_render as render
from controller.cli import shiftctl_trials as trials_view
from controller.cli.shiftctl_reads import Conn, events_for, get_body, list_bodies, trial_crs
from controller.crd import models as crd
from controller.decide.economics import ApiPrice
from controller.domain.status import TargetStatus
from controller.domain.text import block, one_line
from controller.errors import ClusterConflict, InvalidInput, NotFound, ShiftlightError

JSON = dict[str, Any]

app = typer.Typer(
    name="shiftctl",
    help="Watch, explain and steer Shiftlight TunedServices (kubectl conventions; also `kubectl shift`).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class Output(StrEnum):
    table = "table"
    wide = "wide"
    yaml = "yaml"
    json = "json"


NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="namespace (default: the kubeconfig context's)")
]
AllNamespacesOpt = Annotated[bool, typer.Option("--all-namespaces", "-A", help="list across all namespaces")]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="path to the kubeconfig file")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context to use")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, wide, yaml or json")]
AsOpt = Annotated[str | None, typer.Option("--as", help="act as (impersonate) this user; recorded as the approver")]
NameArg = Annotated[str, typer.Argument(help="TunedService name")]


# ----- connection and errors ------------------------------------------------------------------------


def _context_info(kubeconfig: str | None, context: str | None) -> tuple[str | None, str | None]:
    """(namespace, user) of the kubeconfig context in use, when there is a kubeconfig."""
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, TypeError):
        return None, None
    chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
    ctx = (chosen or {}).get("context") or {}
    return ctx.get("namespace"), ctx.get("user")


def connect(kubeconfig: str | None, context: str | None, namespace: str | None, as_user: str | None = None) -> Conn:
    api = load_api_client(kubeconfig, context)
    if as_user:
        api.set_default_header("Impersonate-User", as_user)  # type: ignore[no-untyped-call]
    ctx_ns, ctx_user = _context_info(kubeconfig, context)
    return Conn(api, namespace or ctx_ns or "default", ctx_user, kubeconfig, context, as_user)


def whoami(conn: Conn) -> str:
    """The caller's identity: ``--as``, else the API server's SelfSubjectReview, else the kubeconfig user."""
    if conn.impersonate:
        return conn.impersonate
    try:
        with kube_errors("selfsubjectreview"):
            review = client.AuthenticationV1Api(conn.api).create_self_subject_review(client.V1SelfSubjectReview())
        user = review.status.user_info.username if review.status and review.status.user_info else None
        if user:
            return str(user)
    except (NotFound, KubeForbidden, KubeUnauthorized, ShiftlightError):
        pass
    return conn.user or "unknown"


_PREFIX: list[tuple[type[Exception], str]] = [
    (NotFound, "Error from server (NotFound)"),
    (KubeForbidden, "Error from server (Forbidden)"),
    (KubeUnauthorized, "Error from server (Unauthorized)"),
    (ClusterConflict, "Error from server (Conflict)"),
    (KubeUnavailable, "error"),
    (InvalidInput, "error: invalid object"),
]


def echo(text: str, *, err: bool = False) -> None:
    """Print ``text`` sanitised (controls, escape sequences and bidi controls removed; line breaks kept)."""
    typer.echo(block(text), err=err)


def fail(message: str, code: int = 1) -> typer.Exit:
    echo(one_line(message.splitlines()[0]) if message else "error", err=True)
    return typer.Exit(code)


@contextmanager
def cli_errors() -> Iterator[None]:
    """The error boundary: one clear line on stderr and a non-zero exit."""
    try:
        yield
    except patches.VerbRefused as exc:
        raise fail(f"error: {exc}") from None
    except ShiftlightError as exc:
        prefix = next((p for cls, p in _PREFIX if isinstance(exc, cls)), "error")
        raise fail(f"{prefix}: {exc}") from None


def console() -> Console:
    tty = sys.stdout.isatty()
    return Console(
        file=sys.stdout,
        width=None if tty else 200,
        soft_wrap=not tty,  # piped: one logical line per line, as written (tables are laid out to the width)
        markup=False,
        emoji=False,
        highlight=False,
    )


# ----- reads ----------------------------------------------------------------------------------------


def _status_of(body: JSON) -> TargetStatus:
    _spec, status, error = render.parsed(body)
    if status is None:
        raise InvalidInput(error)
    return status


def dump(data: Any, output: Output) -> None:
    if output is Output.json:
        echo(json.dumps(data, indent=2, sort_keys=False, default=str))
    else:
        echo(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip())


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
        status = _status_of(get_body(conn, name))  # the TunedService must exist
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
        status = _status_of(get_body(conn, name))
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
        status = _status_of(body)
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

Builder = Callable[[TargetStatus, str, JSON], list[dict[str, Any]]]


def patch_status(conn: Conn, name: str, build: Builder, *, attempts: int = 3) -> JSON:
    """Read, build a guarded patch, send; on a conflict (someone wrote in between) re-read and rebuild."""
    for attempt in range(attempts):
        body = get_body(conn, name)
        status = _status_of(body)
        ops = build(status, str(body["metadata"]["resourceVersion"]), body.get("status") or {})
        try:
            with kube_errors():
                written: JSON = conn.custom.patch_namespaced_custom_object_status(  # type: ignore[assignment]
                    crd.GROUP,
                    crd.VERSION,
                    conn.namespace,
                    crd.PLURAL_TUNED_SERVICE,
                    name,
                    ops,
                    _content_type="application/json-patch+json",
                )
            return written
        except ClusterConflict:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _write(conn: Conn, name: str, build: Builder, done: str) -> None:
    try:
        patch_status(conn, name, build)
    except patches.AlreadyDone as exc:
        echo(f"{name}: {exc} (nothing changed)")
        return
    echo(done)


def _decide(
    name: str,
    decision: str,
    step: int | None,
    comment: str,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    as_user: str | None,
) -> None:
    with cli_errors():
        conn = connect(kubeconfig, context, namespace, as_user)
        who = whoami(conn)
        now = datetime.now(UTC)

        def build(status: TargetStatus, rv: str, raw: JSON) -> list[dict[str, Any]]:
            return patches.build_approval_patch(
                status,
                resource_version=rv,
                by=who,
                at=now,
                decision="approved" if decision == "approved" else "rejected",
                step=None if step is None else step - 1,
                comment=comment,
                raw_status=raw,
            )

        verb = "approved" if decision == "approved" else "rejected"
        _write(conn, name, build, f"tunedservice.shiftlight.dev/{name} {verb} by {who}")


@app.command()
def approve(
    name: NameArg,
    step: Annotated[int | None, typer.Option("--step", min=1, help="step number (default: the one waiting)")] = None,
    comment: Annotated[str, typer.Option("--comment", "-m", help="note stored with the approval")] = "",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_user: AsOpt = None,
) -> None:
    """Approve the rollout step that is waiting; your identity is recorded with the approval."""
    _decide(name, "approved", step, comment, namespace, kubeconfig, context, as_user)


@app.command()
def reject(
    name: NameArg,
    comment: Annotated[str, typer.Option("--comment", "-m", help="why")] = "",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_user: AsOpt = None,
) -> None:
    """Reject the rollout: it stops (and rolls back if traffic already moved); your identity is recorded."""
    _decide(name, "rejected", None, comment, namespace, kubeconfig, context, as_user)


def _toggle(name: str, paused: bool, namespace: str | None, kubeconfig: str | None, context: str | None) -> None:
    with cli_errors():
        conn = connect(kubeconfig, context, namespace)

        def build(status: TargetStatus, rv: str, raw: JSON) -> list[dict[str, Any]]:
            return patches.build_pause_patch(status, resource_version=rv, paused=paused)

        _write(conn, name, build, f"tunedservice.shiftlight.dev/{name} {'paused' if paused else 'resumed'}")


@app.command()
def pause(
    name: NameArg, namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None, context: ContextOpt = None
) -> None:
    """Hold the rollout at its current weight."""
    _toggle(name, True, namespace, kubeconfig, context)


@app.command()
def resume(
    name: NameArg, namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None, context: ContextOpt = None
) -> None:
    """Continue a paused rollout."""
    _toggle(name, False, namespace, kubeconfig, context)


def _abort(
    name: str,
    verb: str,
    reason: str,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    as_user: str | None,
) -> None:
    with cli_errors():
        conn = connect(kubeconfig, context, namespace, as_user)
        who = whoami(conn)
        why = f"{verb} by {who}" + (f": {reason}" if reason else "")

        def build(status: TargetStatus, rv: str, raw: JSON) -> list[dict[str, Any]]:
            return patches.build_abort_patch(status, resource_version=rv, reason=why, verb=verb)

        _write(conn, name, build, f"tunedservice.shiftlight.dev/{name} {verb} requested ({why})")


@app.command()
def abort(
    name: NameArg,
    reason: Annotated[str, typer.Option("--reason", "-m", help="why")] = "",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_user: AsOpt = None,
) -> None:
    """Abort the rollout: all traffic back to stable, the candidate retired (on the operator's next cycle)."""
    _abort(name, "abort", reason, namespace, kubeconfig, context, as_user)


@app.command()
def rollback(
    name: NameArg,
    reason: Annotated[str, typer.Option("--reason", "-m", help="why")] = "",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_user: AsOpt = None,
) -> None:
    """Roll the rollout in progress back to the stable config."""
    _abort(name, "rollback", reason, namespace, kubeconfig, context, as_user)


if __name__ == "__main__":
    app()
