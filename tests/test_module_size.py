"""No module in ``controller/`` is over 400 lines, except the simulator's performance model and engine.

A module holds one concern, and a concern a reader can take in at once fits in 400 lines; a longer module is split
by concern. The two exceptions are each one model that is read top to bottom: the step-time model
(``simulator/perf.py``) and the replica engine (``simulator/engine.py``).
"""

from __future__ import annotations

from pathlib import Path

CONTROLLER = Path(__file__).resolve().parents[1] / "controller"
LIMIT = 400
#: Modules allowed over the limit, relative to the package folder.
EXCEPTIONS = frozenset({"simulator/perf.py", "simulator/engine.py"})


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def oversized(root: Path, *, limit: int = LIMIT, exceptions: frozenset[str] = EXCEPTIONS) -> dict[str, int]:
    """Every module under ``root`` longer than ``limit`` lines, but the ``exceptions``: relative path -> lines."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name not in exceptions and (count := lines(path)) > limit:
            found[name] = count
    return found


def test_no_module_in_controller_is_over_400_lines() -> None:
    assert oversized(CONTROLLER) == {}


def test_the_exceptions_are_modules_that_exist() -> None:
    assert all((CONTROLLER / name).is_file() for name in EXCEPTIONS)


def test_a_module_one_line_over_the_limit_is_reported_and_an_exception_is_not(tmp_path: Path) -> None:
    (tmp_path / "simulator").mkdir()
    (tmp_path / "at_limit.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "simulator" / "over.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "simulator" / "perf.py").write_text("x = 1\n" * 2 * LIMIT)
    assert oversized(tmp_path) == {"simulator/over.py": LIMIT + 1}
