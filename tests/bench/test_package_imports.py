"""``bench`` is a package whose modules import each other without a cycle, use only each other's public names (shared
code lives in ``bench.common``) and leave ``sys.path`` alone; planted violations show the check finds each."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_imports(tree: ast.Module) -> dict[str, set[str]]:
    """The bench modules one module imports (at any depth, lazy imports too), each with the names it takes from
    them or reads off them as attributes."""
    aliases: dict[str, str] = {}
    used: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("bench."):
                    module = a.name.split(".")[1]
                    used.setdefault(module, set())
                    if a.asname:
                        aliases[a.asname] = module
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bench":
            parts = (node.module or "").split(".")
            if len(parts) == 1:
                for a in node.names:
                    used.setdefault(a.name, set())
                    aliases[a.asname or a.name] = a.name
            else:
                used.setdefault(parts[1], set()).update(a.name for a in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used[aliases[node.value.id]].add(node.attr)
    return used


def edits_sys_path(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
        for node in ast.walk(tree)
    )


def problems(sources: dict[str, str]) -> list[str]:
    """What breaks the package's rules among ``sources`` (module name -> source): private names taken from a sibling,
    ``sys.path`` edits, and import cycles."""
    found: list[str] = []
    graph: dict[str, set[str]] = {}
    for name, source in sorted(sources.items()):
        tree = ast.parse(source)
        imports = bench_imports(tree)
        graph[name] = {m for m in imports if m != name}
        for module, names in sorted(imports.items()):
            found += [f"private:{name}->{module}.{n}" for n in sorted(names) if n.startswith("_")]
        if edits_sys_path(tree):
            found.append(f"sys.path:{name}")
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph.get(module, ())):
            if state.get(nxt) == 1:
                found.append("cycle:" + "->".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def bench_sources() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(BENCH.glob("*.py")) if p.stem != "__init__"}


def test_bench_is_a_package_with_shared_code_in_common() -> None:
    assert (BENCH / "__init__.py").is_file()
    graph = {name: set(bench_imports(ast.parse(src))) for name, src in bench_sources().items()}
    assert "common" in graph["search_efficiency"] and "common" in graph["calibration"]
    assert graph["common"] == set()


def test_the_bench_modules_import_no_cycle_no_private_name_and_leave_sys_path_alone() -> None:
    assert problems(bench_sources()) == []


def test_a_planted_cycle_is_found() -> None:
    sources = {
        "a": "from bench import b\n",
        "b": "def f():\n    from bench.c import g\n",
        "c": "import bench.a as first\n",
    }
    assert problems(sources) == ["cycle:a->b->c->a"]


def test_a_planted_private_name_is_found_whether_imported_or_read_off_the_module() -> None:
    sources = {
        "a": "from bench.common import _helper\n",
        "b": "from bench import common as c\nc._other()\n",
        "common": "",
    }
    assert problems(sources) == ["private:a->common._helper", "private:b->common._other"]


def test_a_planted_sys_path_edit_is_found() -> None:
    assert problems({"a": "import sys\nsys.path.insert(0, '.')\n"}) == ["sys.path:a"]
