"""Bounds on engine log tails wherever they are stored (Trial CR status, TunedService status, cache entries, Events).

A canary engine's log lines are outside input: a line can be any length, and a launcher's tail any number of
lines. Every place that stores one bounds it here, in lines and in UTF-8 bytes, keeping the newest lines (the
ones that say why an engine stopped): at most :data:`MAX_LINES` lines, each at most :data:`MAX_LINE_BYTES`
bytes, and :data:`MAX_BYTES` in all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: The most lines of a log tail that are stored.
MAX_LINES = 40
#: The most UTF-8 bytes of one stored log line (a longer line keeps its start and says it was cut).
MAX_LINE_BYTES = 512
#: The most UTF-8 bytes of a whole stored log tail (the oldest lines go first).
MAX_BYTES = 8 * 1024

_CUT = " [...]"


def clip_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, never inside a character."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= max_bytes:
        return text
    return raw[: max(0, max_bytes)].decode("utf-8", errors="ignore")


def _line(line: str) -> str:
    if len(line.encode("utf-8", errors="replace")) <= MAX_LINE_BYTES:
        return line
    return clip_utf8(line, MAX_LINE_BYTES - len(_CUT)) + _CUT


def bounded_tail(lines: Iterable[str]) -> tuple[str, ...]:
    """The newest lines of ``lines`` within :data:`MAX_LINES` lines and :data:`MAX_BYTES` bytes."""
    kept: list[str] = []
    size = 0
    for line in reversed(list(lines)[-MAX_LINES:]):
        clipped = _line(str(line))
        cost = len(clipped.encode("utf-8", errors="replace")) + 1  # the newline it had
        if size + cost > MAX_BYTES:
            break
        kept.append(clipped)
        size += cost
    return tuple(reversed(kept))


def bounded_log_tails(wire: Any) -> Any:
    """A copy of a JSON document (a status, a stored result) with every ``log_tail`` list in it bounded."""
    if isinstance(wire, dict):
        return {
            k: list(bounded_tail(v)) if k == "log_tail" and isinstance(v, list) else bounded_log_tails(v)
            for k, v in wire.items()
        }
    if isinstance(wire, list):
        return [bounded_log_tails(v) for v in wire]
    return wire


__all__ = ["MAX_BYTES", "MAX_LINES", "MAX_LINE_BYTES", "bounded_log_tails", "bounded_tail", "clip_utf8"]
