"""Golden sequences: what the real reconcile cycle did in a scenario, step by step, against a committed file.

A :class:`RecordingReconciler` stands in front of the real :class:`~controller.reconcile.Reconciler` and records,
for each action of each cycle, the simulated time, the phase after the cycle, the action's code, its type and what
it sets (the candidate's weight, a replica count); a cycle that changes the phase without acting is a row with no
action. :func:`check_golden` compares the rows with ``tests/scenarios/golden/<name>.json`` (one row a line) and
fails with a unified diff; ``SHIFTLIGHT_UPDATE_GOLDEN=1`` writes the file from the run instead.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from controller.domain import DeployCandidate, Scale, SetWeights, TargetRef, TargetStatus
from controller.domain.phases import Phase
from controller.ports import Clock
from controller.reconcile import CycleResult, Reconciler

#: Where the golden files live.
GOLDEN = Path(__file__).resolve().parents[1] / "scenarios" / "golden"
#: Set to ``1`` to rewrite the golden files from the runs.
UPDATE = "SHIFTLIGHT_UPDATE_GOLDEN"


@dataclass(frozen=True)
class Row:
    """One action of one cycle (or a phase change without one)."""

    at: str
    phase: str
    code: str | None
    action: str | None
    weight: int | None = None
    """The candidate's traffic weight a ``SetWeights`` sets."""
    replicas: int | None = None
    """The replica count a ``Scale`` or ``DeployCandidate`` asks for."""

    def line(self) -> str:
        return json.dumps(asdict(self))


def rows_of(at: datetime, phase_before: Phase, result: CycleResult) -> list[Row]:
    """The rows of one cycle that ended at ``at``."""
    phase = result.status.phase.value
    rows = []
    for action in result.plan.actions:
        code = action.code.value if action.code is not None else None
        weight = action.candidate_weight if isinstance(action, SetWeights) else None
        replicas = action.replicas if isinstance(action, Scale | DeployCandidate) else None
        rows.append(Row(at.isoformat(), phase, code, type(action).__name__, weight, replicas))
    if not rows and result.status.phase is not phase_before:
        code = result.plan.codes[0].value if result.plan.codes else None
        rows.append(Row(at.isoformat(), phase, code, None))
    return rows


@dataclass
class RecordingReconciler:
    """The real reconciler, with the rows of every cycle it ran."""

    inner: Reconciler
    clock: Clock
    rows: list[Row] = field(default_factory=list)

    def reconcile(self, target: TargetRef, status: TargetStatus) -> CycleResult:
        result = self.inner.reconcile(target, status)
        self.rows.extend(rows_of(self.clock.now(), status.phase, result))
        return result


def render(rows: Sequence[Row]) -> str:
    """The golden file's text: a JSON list, one row a line (a diff then shows whole rows)."""
    return "[\n" + ",\n".join(f"  {row.line()}" for row in rows) + "\n]\n"


def load(path: Path) -> list[Row]:
    return [Row(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))]


def check_golden(name: str, rows: Sequence[Row], *, folder: Path = GOLDEN) -> None:
    """Fail with a readable diff unless ``rows`` are those of ``folder/<name>.json``; with
    ``SHIFTLIGHT_UPDATE_GOLDEN=1``, write them there instead."""
    path = folder / f"{name}.json"
    text = render(rows)
    if os.environ.get(UPDATE) == "1":
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8") if path.is_file() else ""
    if text == expected:
        return
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True), text.splitlines(keepends=True), f"{path.name} (committed)", "this run"
        )
    )
    pytest.fail(f"the run differs from {path}; if the change is meant, rerun with {UPDATE}=1\n{diff}", pytrace=False)
