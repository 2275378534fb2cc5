"""The trial progress bar, shared by ``shiftlight trial`` (a local trial) and ``shiftctl trials -w`` (Trial CRs)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


def trial_progress(console: Console, *, get_time: Callable[[], float] | None = None) -> Progress:
    """``<stage or trial>  [bar]  done/total  elapsed``; ``get_time`` is the clock the elapsed column reads."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        get_time=get_time,
    )


__all__ = ["trial_progress"]
