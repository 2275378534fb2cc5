"""What shiftctl's commands share at the terminal: the options they take, the output formats, the sanitised
:func:`echo`, the error boundary's one line on stderr, and the console.

Nothing reaches the terminal unsanitised: every line goes through :func:`echo` (the sanitiser's
:func:`~controller.domain.text.block`), and the rich console interprets no markup or emoji codes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.text import Text

from controller.adapters.kube import KubeForbidden, KubeUnauthorized, KubeUnavailable
from controller.cli.shiftctl import patches as patches
from controller.domain.text import block, one_line
from controller.errors import ClusterConflict, InvalidInput, NotFound, ShiftlightError


class Output(StrEnum):
    table = "table"
    wide = "wide"
    yaml = "yaml"
    json = "json"
    name = "name"


def complete_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a TunedService name: those of the namespace (or context) on the command line so far,
    listed from the API server; nothing when it cannot be reached."""
    from controller.cli.shiftctl.reads import connect, list_bodies  # the reads import this module's siblings only

    params = ctx.params
    try:
        conn = connect(params.get("kubeconfig"), params.get("context"), params.get("namespace"))
        names = [str(b["metadata"]["name"]) for b in list_bodies(conn, False)]
    except (ShiftlightError, OSError, ValueError, KeyError, TypeError):
        return []
    return [n for n in names if n.startswith(incomplete)]


NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="namespace (default: the kubeconfig context's)")
]
AllNamespacesOpt = Annotated[bool, typer.Option("--all-namespaces", "-A", help="list across all namespaces")]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="path to the kubeconfig file")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context to use")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, wide, yaml, json or name")]
AsOpt = Annotated[
    str | None, typer.Option("--as", help="act as (impersonate) this user; recorded as the one who acted")
]
NameArg = Annotated[str, typer.Argument(help="TunedService name", autocompletion=complete_names)]


# ----- errors and output ---------------------------------------------------------------------------


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
        width=None if tty or os.environ.get("COLUMNS", "").isdigit() else 200,
        soft_wrap=not tty,  # piped: one logical line per line, as written (tables are laid out to the width)
        markup=False,
        emoji=False,
        highlight=False,
    )


def show(table: Text) -> None:
    """Print a laid-out table (:mod:`controller.cli.shiftctl.table`) as it is: never wrapped or cut to the
    terminal's width."""
    echo(table.plain.rstrip("\n"))


def names(kind: str, items: Sequence[Any]) -> None:
    """``-o name``: ``<kind>.shiftlight.dev/<name>`` per object (a body, or a name)."""
    for item in items:
        name = item if isinstance(item, str) else (item.get("metadata") or {}).get("name", "")
        echo(f"{kind}.shiftlight.dev/{name}")


def dump(data: Any, output: Output) -> None:
    if output is Output.json:
        echo(json.dumps(data, indent=2, sort_keys=False, default=str))
    else:
        echo(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip())
