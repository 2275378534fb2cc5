"""No test reaches into a private attribute of an object: tests observe the product through its public surface.

A test that reads ``obj._name`` is bound to how the object is built today, not to what it does, and breaks on every
refactoring that keeps the behaviour. What a test legitimately needs to observe gets a public, read-only property
or method on the product class. Scanned: every module under ``tests/``. Not counted: ``self._x`` and ``cls._x``
(a test's own helper class), dunders, and ``super()._x`` (a fake overriding its base's hook calls the base's).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: (module relative to ``tests/``, attribute) pairs allowed, each for a reason a public surface cannot give.
ALLOWED = frozenset(
    {
        # the fake Kubernetes API serves kmock's reactions itself (kmock walks its whole request log per request):
        # it reads the reaction's and the filter view's own state, which kmock keeps private
        ("support/kube_api.py", "_disabled"),
        ("support/kube_api.py", "_source"),
    }
)


def private_reads(source: str) -> list[tuple[int, str]]:
    """(line, ``expression``) of every attribute access to a single-underscore name on something other than
    ``self``, ``cls`` or ``super()``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def private_reads_under(root: Path, *, allowed: frozenset[tuple[str, str]] = ALLOWED) -> list[str]:
    """``module:line: expression`` for every private access in the modules under ``root`` but the ``allowed``."""
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        for line, expression in private_reads(path.read_text(encoding="utf-8")):
            if (name, expression.rsplit(".", 1)[-1]) not in allowed:
                problems.append(f"{name}:{line}: {expression}")
    return problems


def test_no_test_reads_a_private_attribute_of_an_object() -> None:
    assert private_reads_under(TESTS) == []


def test_the_allowed_accesses_are_still_made() -> None:
    """An allowance nobody needs any more goes."""
    for name, attribute in ALLOWED:
        assert any(e.endswith("." + attribute) for _, e in private_reads((TESTS / name).read_text(encoding="utf-8")))


def test_a_private_read_is_found_on_any_object_and_not_on_self_cls_super_or_a_dunder(tmp_path: Path) -> None:
    source = """
class Fake(Base):
    def __init__(self) -> None:
        self._own = 1
        cls._too = 2
        super()._hook()
        print(self.__dict__, type(self).__name__)

def test_it(loop, backend) -> None:
    assert loop._changed == set()
    assert backend.runtime()._plans
    loop._cycle = None
"""
    assert private_reads(source) == [
        (10, "loop._changed"),
        (11, "backend.runtime()._plans"),
        (12, "loop._cycle"),
    ]
    (tmp_path / "support").mkdir()
    (tmp_path / "test_a.py").write_text(source)
    (tmp_path / "support" / "kube_api.py").write_text("view = view._source\n")
    assert private_reads_under(tmp_path) == [
        "test_a.py:10: loop._changed",
        "test_a.py:11: backend.runtime()._plans",
        "test_a.py:12: loop._cycle",
    ]
