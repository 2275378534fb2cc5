"""shiftctl's write verbs: approve, reject, pause, resume, abort and rollback.

Each is a JSON patch on the TunedService's ``status`` subresource, built by the pure functions of
:mod:`controller.cli.shiftctl.patches` and guarded by the resourceVersion that was read; on a conflict the status is
re-read and the patch rebuilt. :mod:`controller.cli.shiftctl.commands` registers these commands on the ``shiftctl`` app.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from controller.adapters.kube import kube_errors
from controller.cli.shiftctl import patches as patches
from controller.cli.shiftctl.reads import Conn, connect, get_body, status_of, whoami
from controller.cli.shiftctl.terminal import AsOpt, ContextOpt, KubeconfigOpt, NameArg, NamespaceOpt, cli_errors, echo
from controller.crd import models as crd
from controller.domain.status import TargetStatus
from controller.errors import ClusterConflict

JSON = dict[str, Any]

Builder = Callable[[TargetStatus, str, JSON], list[dict[str, Any]]]


def patch_status(conn: Conn, name: str, build: Builder, *, attempts: int = 3) -> JSON:
    """Read, build a guarded patch, send; on a conflict (someone wrote in between) re-read and rebuild."""
    for attempt in range(attempts):
        body = get_body(conn, name)
        status = status_of(body)
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


def _toggle(
    name: str, paused: bool, namespace: str | None, kubeconfig: str | None, context: str | None, as_user: str | None
) -> None:
    with cli_errors():
        conn = connect(kubeconfig, context, namespace, as_user)
        who = whoami(conn)

        def build(status: TargetStatus, rv: str, raw: JSON) -> list[dict[str, Any]]:
            return patches.build_pause_patch(status, resource_version=rv, paused=paused)

        verb = "paused" if paused else "resumed"
        _write(conn, name, build, f"tunedservice.shiftlight.dev/{name} {verb} by {who}")


def pause(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_user: AsOpt = None,
) -> None:
    """Hold the rollout at its current weight."""
    _toggle(name, True, namespace, kubeconfig, context, as_user)


def resume(
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_user: AsOpt = None,
) -> None:
    """Continue a paused rollout."""
    _toggle(name, False, namespace, kubeconfig, context, as_user)


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


WRITE_VERBS: tuple[Callable[..., None], ...] = (approve, reject, pause, resume, abort, rollback)
"""The write commands, in the order ``shiftctl --help`` lists them."""
