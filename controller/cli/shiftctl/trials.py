"""`shiftctl trials [-w]`: a TunedService's Trial CRs, and following the running ones with a progress bar.

The rows come from each Trial's status (phase, progress, result), each text field made one safe line by the
sanitiser (:func:`controller.domain.text.one_line`: a canary's log line in a reason cannot drive the terminal);
``watch_trials`` polls them through an injected ``fetch`` and sleeps through an injected ``sleep``/``now``, so it is
driven without waiting in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import TaskID

from controller.cli.progress_bar import trial_progress
from controller.cli.shiftctl.table import Columns, columns
from controller.crd import models as crd
from controller.domain.text import one_line
from controller.errors import InvalidInput

JSON = dict[str, Any]
Fetch = Callable[[], list[JSON]]

#: Seconds between two reads of the Trial CRs while watching.
DEFAULT_WATCH_INTERVAL_S = 2.0


@dataclass(frozen=True)
class TrialRow:
    name: str
    config: str
    phase: str
    stage: str
    done: int
    planned: int
    elapsed_s: float | None
    tokens_per_s: float | None
    result: str

    @property
    def running(self) -> bool:
        return self.phase in ("Pending", "Running")


def _elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


def trial_row(body: Mapping[str, Any]) -> TrialRow:
    """One Trial CR as a row; a status that does not parse shows as ``Unknown`` with the reason."""
    name = str((body.get("metadata") or {}).get("name", "?"))
    try:
        spec, status = crd.parse_trial(body)
    except (InvalidInput, ValidationError, ValueError) as exc:
        why = one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return TrialRow(one_line(name), "?", "Unknown", "", 0, 0, None, None, f"unreadable: {why}")
    progress = status.progress
    result = status.result
    if result is not None:
        summary = result.status.value
        if result.ok:
            summary += f", goodput {result.goodput_tokens_per_s:,.0f} tok/s"
        elif result.reason:
            summary += f": {result.reason}"
    else:
        summary = status.message
    rate = progress.output_tokens_per_s if progress is not None else None
    if rate is None and result is not None and result.ok:
        rate = result.output_tokens_per_s
    return TrialRow(
        name=one_line(name),
        config=one_line(status.config_label or spec.config.label()),
        phase=one_line(status.phase),
        stage=one_line(progress.stage) if progress is not None else "",
        done=progress.requests_done if progress is not None else (result.completed if result is not None else 0),
        planned=progress.requests_planned if progress is not None else 0,
        elapsed_s=progress.elapsed_seconds if progress is not None else None,
        tokens_per_s=rate,
        result=one_line(summary),
    )


def rows_of(items: Sequence[Mapping[str, Any]]) -> list[TrialRow]:
    """Running trials first, then by name."""
    rows = [trial_row(b) for b in items]
    return sorted(rows, key=lambda r: (not r.running, r.name))


def trial_crs_table(rows: Sequence[TrialRow]) -> Columns:
    """The Trial CRs, each under its name (the trial's one identifier); nothing cut."""
    cells_of = []
    for r in rows:
        cells = (
            r.name,
            r.config,
            r.phase,
            r.stage or "-",
            f"{r.done}/{r.planned}" if r.planned else (str(r.done) if r.done else "-"),
            _elapsed(r.elapsed_s),
            f"{r.tokens_per_s:,.0f}" if r.tokens_per_s is not None else "-",
            r.result or "-",
        )
        cells_of.append(cells)
    return columns(("NAME", "CONFIG", "PHASE", "STAGE", "DONE", "ELAPSED", "TOK/S", "RESULT"), cells_of)


def watch_trials(
    fetch: Fetch,
    console: Console,
    *,
    interval_s: float = DEFAULT_WATCH_INTERVAL_S,
    timeout_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> tuple[bool, list[TrialRow]]:
    """Follow the trials with a bar each until none is running (True) or ``timeout_s`` passed (False); the rows
    as last read."""
    started = now()
    with trial_progress(console) as bar:  # its elapsed column is the watcher's; each row carries the trial's
        tasks: dict[str, TaskID] = {}
        while True:
            rows = rows_of(fetch())
            for r in rows:
                if r.name not in tasks and not r.running:
                    continue  # finished before the watch began: in the table, not on a bar
                label = f"{r.config} {r.stage or r.phase.lower()}" if r.running else f"{r.config} {r.phase}"
                label = escape(one_line(label))  # the bar's description column reads rich markup
                total = r.planned or None
                if r.name not in tasks:
                    tasks[r.name] = bar.add_task(label, total=total, completed=r.done)
                else:
                    done = r.done if r.running or not r.planned else r.planned
                    bar.update(tasks[r.name], description=label, completed=done, total=total)
            if not any(r.running for r in rows):
                return True, rows
            if timeout_s is not None and now() - started >= timeout_s:
                return False, rows
            sleep(interval_s)


__all__ = ["DEFAULT_WATCH_INTERVAL_S", "TrialRow", "rows_of", "trial_crs_table", "trial_row", "watch_trials"]
