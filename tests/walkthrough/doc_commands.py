"""The walkthrough's commands, read from the docs at run time.

Convention: a fenced ``sh``, ``bash`` or ``console`` block whose previous non-blank line is ``<!-- walkthrough -->``
is part of the walkthrough; its commands run in document order, ``docs/install.md`` first, then
``docs/operator.md``. In ``sh``/``bash`` blocks every line that is not a comment is a command (a trailing ``\\``
continues it on the next line) and the ``# ...`` lines right after a command are its sample output. In ``console``
blocks the ``$ ...`` lines are commands and the other lines their sample output. A command's own trailing
``# ...`` is its note (``kubectl auth can-i ...   # yes``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

MARKER = "<!-- walkthrough -->"
FENCE = re.compile(r"^```(sh|bash|console)\s*$")


@dataclass(frozen=True)
class DocCommand:
    doc: str
    line: int
    text: str
    argv: tuple[str, ...]
    note: str
    sample: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def _comment_start(text: str) -> int | None:
    """Where the shell comment of ``text`` starts: a ``#`` outside quotes, at a word's start."""
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return i
    return None


def _command(doc: str, line: int, text: str, sample: list[str]) -> DocCommand:
    start = _comment_start(text)
    code, note = (text, "") if start is None else (text[:start], text[start + 1 :].strip())
    return DocCommand(doc, line, text, tuple(shlex.split(code)), note, tuple(sample))


def _block_commands(doc: str, kind: str, lines: list[tuple[int, str]]) -> list[DocCommand]:
    commands: list[DocCommand] = []
    pending: tuple[int, str] | None = None  # a command and its start line, while it continues or collects output
    sample: list[str] = []
    continued = False

    def flush() -> None:
        nonlocal pending, sample
        if pending is not None:
            commands.append(_command(doc, pending[0], pending[1], sample))
        pending, sample = None, []

    for number, raw in lines:
        line = raw.rstrip()
        if continued and pending is not None:
            pending = (pending[0], pending[1] + " " + line.rstrip("\\").strip())
            continued = line.endswith("\\")
            continue
        is_command = line.startswith("$ ") if kind == "console" else bool(line) and not line.startswith("#")
        if is_command:
            flush()
            text = line[2:] if kind == "console" else line
            pending = (number, text.rstrip("\\").strip())
            continued = text.endswith("\\")
        elif line and pending is not None:
            sample.append(line[2:] if kind != "console" and line.startswith("# ") else line)
    flush()
    return commands


def walkthrough_commands(docs: list[Path], root: Path) -> list[DocCommand]:
    """Every command of the marked blocks of ``docs``, in order."""
    commands: list[DocCommand] = []
    for path in docs:
        name = str(path.relative_to(root))
        lines = path.read_text().splitlines()
        marked, block, kind, start = False, False, "", 0
        body: list[tuple[int, str]] = []
        for number, line in enumerate(lines, start=1):
            if block:
                if line.strip() == "```":
                    commands.extend(_block_commands(name, kind, body))
                    block, body = False, []
                else:
                    body.append((number, line))
                continue
            fence = FENCE.match(line)
            if fence and marked:
                block, kind, start = True, fence.group(1), number
            if line.strip():
                marked = line.strip() == MARKER
        assert not block, f"{name}:{start}: a walkthrough block is not closed"
    return commands
