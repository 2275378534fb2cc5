"""The error tree drawn in ``controller/errors.py`` names every subclass of ``ShiftlightError`` that the package
defines, wherever it is defined, under its real parent and with the module that defines it."""

from __future__ import annotations

import importlib
import pkgutil
import re

import controller
from controller import errors
from controller.errors import ShiftlightError

#: One drawn class: its indentation (the tree's depth), its name, then the note (module first, for classes defined
#: outside controller.errors).
LINE = re.compile(r"^(?P<indent>(?:    |│   )*)(?:├── |└── )?(?P<name>[A-Z]\w+)(?:\([^)]*\))?\s*(?P<note>.*)$")


def drawn() -> dict[str, tuple[str | None, str]]:
    """``{class name: (parent name, note)}`` from the docstring's tree."""
    doc = errors.__doc__ or ""
    lines = [line[4:] for line in doc.splitlines() if line.startswith("    ")]
    tree: dict[str, tuple[str | None, str]] = {}
    stack: list[str] = []
    for line in lines:
        match = LINE.match(line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match["indent"]) // 4 + (1 if line[len(match["indent"]) :].startswith(("├", "└")) else 0)
        del stack[depth:]
        tree[match["name"]] = (stack[-1] if stack else None, match["note"])
        stack.append(match["name"])
    return tree


def every_subclass() -> list[type[ShiftlightError]]:
    for module in pkgutil.walk_packages(controller.__path__, "controller."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[ShiftlightError]] = []
    todo: list[type[ShiftlightError]] = [ShiftlightError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_the_tree_draws_every_error_under_its_parent_with_its_module() -> None:
    tree = drawn()
    classes = every_subclass()
    assert {c.__name__ for c in classes} == set(tree), "drawn but not defined, or defined but not drawn"
    for cls in classes:
        parent, note = tree[cls.__name__]
        expected = None if cls is ShiftlightError else cls.__bases__[0].__name__
        assert parent == expected, f"{cls.__name__} is drawn under {parent}, but its parent is {expected}"
        if cls.__module__ != "controller.errors":
            where = cls.__module__.removeprefix("controller.")
            assert note.startswith(f"{where}:"), f"{cls.__name__} is defined in {cls.__module__}: {note!r}"


def test_the_tree_reader_sees_depth() -> None:
    tree = drawn()
    assert tree["ShiftlightError"][0] is None
    assert tree["GrafanaUnavailable"][0] == "MetricsUnavailable"
    assert tree["PolicyError"][0] == "InvalidInput"
    assert tree["LoadClientFailed"][0] == "ShiftlightError"
