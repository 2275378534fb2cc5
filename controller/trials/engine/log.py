"""What a candidate engine's log says, kept bounded, and why it did not serve.

vLLM prints a start-up failure's root cause first, in the process that raised it (a worker, the engine core, or the
API server's argument check), and then one wrapper traceback per process above it: "WorkerProc initialization failed
due to an exception in a background process. See stack trace for root cause", "Engine core initialization failed.
See root cause above". The wrappers alone can run past a hundred lines. So:

* :class:`EngineLog` keeps the lines that matter in bounded memory: the first error block, every traceback's
  exception and chaining lines after it, and the last lines; each line is cut to a byte bound.
* :func:`root_cause` reads a log (whole or kept) into one sentence: the exception that started the failure, with
  vLLM's known wrappers and the interpreter's shutdown noise skipped.

Pure text handling: no I/O, no clock.
"""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: How much of an engine's log a trial keeps (lines of each part, and bytes of any one line).
HEAD_LINES = 60
MARKER_LINES = 40
TAIL_LINES = 40
MAX_LINE_BYTES = 500
MAX_REASON_CHARS = 400

#: ``(EngineCore_DP0 pid=123) `` / ``(VllmWorker TP1 pid=9) `` / ``(APIServer pid=7) ``: the process a line came from.
_ORIGIN = re.compile(r"^\((?P<origin>[^()]*?pid=\d+)\)\s?")
#: ``ERROR 08-22 09:46:16 [core.py:700] ``: vLLM's logger prefix.
_LOGGER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+\[[^\]]*\]\s?")
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_CHAINED = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)"
)
#: An exception's summary line: a (dotted) class name, a colon, its message (``KeyError: 'x'``).
_EXCEPTION = re.compile(
    r"^(?P<cls>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|Exception))(?::\s*(?P<msg>.*))?$"
)
#: argparse refusing a flag: ``vllm serve: error: unrecognized arguments: --bogus``.
_ARG_ERROR = re.compile(r"^[\w./ -]*?\b(?:serve|api_server\.py|vllm|main\.py)\S*: error: (?P<msg>.+)$")
#: pydantic's detail line under ``ValidationError: 1 validation error for X``.
_PYDANTIC_DETAIL = re.compile(r"^\s*(?:Value error|Assertion failed),\s*(?P<msg>.+?)(?:\s*\[type=.*)?$")
_OOM = re.compile(r"out of memory|OutOfMemory|\bKilled\b|MemoryError|\boom\b", re.IGNORECASE)
#: vLLM's wrapper exceptions: they point at a cause printed elsewhere and name none themselves.
_WRAPPER = re.compile(
    r"See root cause above|See stack trace for (?:the )?root cause|check the stack trace above for the root cause"
    r"|Engine core initialization failed|WorkerProc initialization failed|Engine process failed to start"
    r"|EngineCore failed to start|died unexpectedly|Worker failed with error",
    re.IGNORECASE,
)
#: Exceptions that are shutdown noise, never a cause.
_NOISE = frozenset({"KeyboardInterrupt", "SystemExit", "CancelledError", "BrokenPipeError", "EOFError"})


def _cut(line: str) -> str:
    raw = line.encode("utf-8", "replace")
    if len(raw) <= MAX_LINE_BYTES:
        return line
    return raw[: MAX_LINE_BYTES - 3].decode("utf-8", "ignore") + "..."


def _split(line: str) -> tuple[str, str]:
    """``(origin, text)``: the process prefix (or "") and the line without it or the logger's prefix."""
    origin = ""
    m = _ORIGIN.match(line)
    if m:
        origin, line = m.group("origin"), line[m.end() :]
    m = _LOGGER.match(line)
    if m:
        line = line[m.end() :]
    return origin, line.rstrip()


def _is_marker(text: str) -> bool:
    """A line a cause is read from: a traceback's start, a chaining line, an exception, an argument error."""
    return bool(
        _TRACEBACK.match(text) or _CHAINED.match(text) or _EXCEPTION.match(text) or _ARG_ERROR.match(text)
        or _PYDANTIC_DETAIL.match(text)
    )  # fmt: skip


def _starts_error(text: str) -> bool:
    return bool(_TRACEBACK.match(text) or _EXCEPTION.match(text) or _ARG_ERROR.match(text))


class EngineLog:
    """An engine's output kept in bounded memory: the first error block, later cause lines, and the last lines."""

    def __init__(self, *, head: int = HEAD_LINES, markers: int = MARKER_LINES, tail: int = TAIL_LINES) -> None:
        self._head_size = head
        self._head: list[tuple[int, str]] = []
        self._in_head = False
        self._markers: collections.deque[tuple[int, str]] = collections.deque(maxlen=markers)
        self._tail: collections.deque[tuple[int, str]] = collections.deque(maxlen=tail)
        self._count = 0
        self._lock = threading.Lock()  # one thread appends (the log pump) while another reads

    @classmethod
    def of(cls, lines: Iterable[str]) -> EngineLog:
        log = cls()
        for line in lines:
            log.append(line)
        return log

    def append(self, line: str) -> None:
        line = _cut(line.rstrip("\r\n"))
        with self._lock:
            self._keep(line)

    def _keep(self, line: str) -> None:
        index = self._count
        self._count += 1
        _, text = _split(line)
        if not self._head and _starts_error(text):
            self._in_head = True
        if self._in_head and len(self._head) < self._head_size:
            self._head.append((index, line))
        elif _is_marker(text):
            self._markers.append((index, line))
        self._tail.append((index, line))

    def lines(self) -> tuple[str, ...]:
        """The kept lines in the engine's order, with one line saying where lines were left out."""
        with self._lock:
            kept = sorted({*self._head, *self._markers, *self._tail})
        out: list[str] = []
        previous = -1
        for index, line in kept:
            if index > previous + 1:
                out.append(f"[... {index - previous - 1} lines not kept ...]")
            out.append(line)
            previous = index
        return tuple(out)


@dataclass(frozen=True)
class _Raised:
    cls: str
    message: str

    def sentence(self) -> str:
        name = self.cls.split(".")[-1]
        return f"{name}: {self.message}" if self.message else name


def _chains(lines: Sequence[str]) -> list[list[_Raised]]:
    """Each process's chains of exceptions (root first), ordered by where each chain's last exception was printed."""
    open_chain: dict[str, list[_Raised]] = {}  # per process: the chain a chaining line would extend
    in_traceback: dict[str, bool] = {}
    last_chain: dict[str, list[_Raised]] = {}  # per process: the chain holding its latest exception
    order: dict[int, tuple[int, list[_Raised]]] = {}  # id(chain) -> (index of its last exception, chain)
    for index, line in enumerate(lines):
        origin, text = _split(line)
        if _TRACEBACK.match(text):
            if not in_traceback.get(origin, False):
                open_chain.pop(origin, None)  # a new traceback with no chaining line: a new chain
            in_traceback[origin] = True
            continue
        if _CHAINED.match(text):
            in_traceback[origin] = True  # the next traceback continues the chain
            continue
        m = _PYDANTIC_DETAIL.match(text)
        chain = last_chain.get(origin)
        if m and chain and chain[-1].cls.endswith("ValidationError"):
            chain[-1] = _Raised(chain[-1].cls, m.group("msg").strip())
            continue
        m = _ARG_ERROR.match(text)
        if m:
            chain = [_Raised("ArgumentError", m.group("msg").strip())]
            order[id(chain)] = (index, chain)
            continue
        m = _EXCEPTION.match(text)
        if not m:
            continue
        raised = _Raised(m.group("cls"), (m.group("msg") or "").strip())
        chain = open_chain.get(origin) if in_traceback.get(origin, False) else None
        if chain is None:
            chain = []
        chain.append(raised)
        open_chain[origin] = last_chain[origin] = chain
        in_traceback[origin] = False
        order[id(chain)] = (index, chain)
    return [chain for _, chain in sorted(order.values(), key=lambda item: item[0])]


def _is_cause(raised: _Raised) -> bool:
    return raised.cls.split(".")[-1] not in _NOISE and not _WRAPPER.search(raised.message)


def root_cause(lines: Sequence[str]) -> str | None:
    """The exception that started the failure, as ``Class: message``; None when the log names none.

    Within one chain of exceptions the first that is not a wrapper is the cause (the rest re-raise it); across
    chains the last chain with a cause wins (the engine's final failure, not an earlier one it recovered from).
    """
    for chain in reversed(_chains(lines)):
        for raised in chain:
            if _is_cause(raised):
                return raised.sentence()[:MAX_REASON_CHARS]
    return None


def engine_reason(error: str, log_tail: Sequence[str]) -> str:
    """Why the engine did not serve, in one line: its log's root cause, else an OOM line, else the launcher's error."""
    cause = root_cause(log_tail)
    if cause:
        return cause
    for line in reversed(log_tail):
        if _OOM.search(line):
            return f"out of memory: {_split(line)[1].strip()}"[:MAX_REASON_CHARS]
    return error or "engine failed"
