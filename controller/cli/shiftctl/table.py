"""kubectl's tables: each column as wide as its widest cell, three spaces between columns, nothing cut.

A name, a number or a reason is never truncated or folded to fit the terminal: a table wider than the terminal
makes long lines, as ``kubectl get`` does. Each cell is made one safe line by the sanitiser
(:func:`~controller.domain.text.one_line`), so no field starts a line or drives the terminal."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.cells import cell_len
from rich.text import Text

from controller.domain.text import one_line

GAP = "   "


class Columns(Text):
    """A laid-out table (rows of padded cells); printed as is, never wrapped or cropped by the renderer."""

    @property
    def lines(self) -> list[str]:
        return self.plain.splitlines()


def columns(headers: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Iterable[int] = ()) -> Columns:
    """The table of ``rows`` under ``headers``; the columns at the indexes in ``numeric`` are right-aligned."""
    cells = [[one_line(h) for h in headers]] + [[one_line(c) for c in r] for r in rows]
    widths = [max(cell_len(r[i]) for r in cells if i < len(r)) for i in range(len(headers))]
    right = frozenset(numeric)
    out = Columns(no_wrap=True, overflow="ignore", end="")
    for n, r in enumerate(cells):
        padded = []
        for i, value in enumerate(r):
            pad = " " * (widths[i] - cell_len(value))
            padded.append(pad + value if i in right and n else value + pad)
        out.append(GAP.join(padded).rstrip() + "\n")
    return out


__all__ = ["GAP", "Columns", "columns"]
