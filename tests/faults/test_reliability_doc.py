"""docs/reliability.md carries the table a fresh run of the fault scenarios prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.faults import render_table, run_all

pytestmark = pytest.mark.faults

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN, END = "<!-- faults-table:begin -->\n", "<!-- faults-table:end -->"


def test_committed_table_matches_a_fresh_run() -> None:
    text = DOC.read_text(encoding="utf-8")
    committed = text.split(BEGIN, 1)[1].split(END, 1)[0]
    fresh = render_table(run_all())
    assert committed == fresh, "docs/reliability.md is stale: run `python -m tests.support.faults --table`"
