"""Every setting a user can set is exercised by some test: each leaf key of the chart's ``values.yaml`` and each
``SHIFTLIGHT_*`` variable that the docs or the operator's settings loader name appears in at least one test file
(this checker aside). A key counts when a test sets it (``--set a.b=...``, or a values file under ``tests/`` holding
it or a key below it); a variable counts when a test names it, or names the constant in ``controller/`` that holds
it. A setting no test exercises has no proven effect: test it, or remove it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "charts" / "shiftlight" / "values.yaml"
ENV_SOURCES = [
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "controller" / "reactor" / "settings.py",
    REPO / "controller" / "reactor" / "prometheus_env.py",
]
ENV_NAME = re.compile(r"\bSHIFTLIGHT_[A-Z0-9_]*[A-Z0-9]\b")
CONSTANT = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*(?::[^=]*)?=\s*\"(SHIFTLIGHT_[A-Z0-9_]+)\"", re.MULTILINE)


def leaves(node: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of a mapping's leaves (an empty mapping or a list is a leaf)."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix


def files_of_tests() -> dict[Path, str]:
    me = Path(__file__).resolve()
    return {
        path: path.read_text(encoding="utf-8", errors="replace")
        for path in sorted((REPO / "tests").rglob("*"))
        if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ".json"} and path.resolve() != me
    }


def keys_in_test_values(files: dict[Path, str]) -> set[str]:
    """Every dotted key path held by a YAML file under tests/ (values files, manifests)."""
    found: set[str] = set()
    for path, text in files.items():
        if path.suffix in {".yaml", ".yml"}:
            try:
                documents = list(yaml.safe_load_all(text))
            except yaml.YAMLError:
                continue
            for doc in documents:
                found.update(leaves(doc))
    return found


def unexercised_values(values: dict[str, Any], files: dict[Path, str]) -> list[str]:
    text = "\n".join(files.values())
    held = keys_in_test_values(files)
    return [
        key
        for key in leaves(values)
        if not re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", text)
        and not any(k == key or k.startswith(f"{key}.") for k in held)
    ]


def documented_variables() -> set[str]:
    return {name for path in ENV_SOURCES for name in ENV_NAME.findall(path.read_text(encoding="utf-8"))}


def constants_of_variables() -> dict[str, set[str]]:
    """``SHIFTLIGHT_X`` -> the names of the constants in controller/ that hold it (``FAULT_ENV = "SHIFTLIGHT_X"``)."""
    found: dict[str, set[str]] = {}
    for path in (REPO / "controller").rglob("*.py"):
        for constant, name in CONSTANT.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(constant)
    return found


def unexercised_variables(names: set[str], files: dict[Path, str]) -> list[str]:
    text = "\n".join(files.values())
    constants = constants_of_variables()
    return sorted(
        name
        for name in names
        if name not in text and not any(re.search(rf"\b{c}\b", text) for c in constants.get(name, ()))
    )


def test_every_chart_value_is_exercised_by_a_test() -> None:
    values = yaml.safe_load(VALUES.read_text())
    assert len(list(leaves(values))) > 60
    assert unexercised_values(values, files_of_tests()) == []


def test_every_documented_variable_is_exercised_by_a_test() -> None:
    names = documented_variables()
    assert {"SHIFTLIGHT_PROMETHEUS_TOKEN_FILE", "SHIFTLIGHT_TIME_SCALE", "SHIFTLIGHT_BACKEND"} <= names
    assert unexercised_variables(names, files_of_tests()) == []


def test_the_checker_finds_what_no_test_sets() -> None:
    files = {
        Path("tests/a.py"): 'helm.template("--set", "prometheus.url=http://p")',
        Path("tests/v.yaml"): "a:\n  b: 1",
    }
    values = {"prometheus": {"url": "", "timeoutSeconds": 10}, "a": {"b": 0}, "template": {}, "url": ""}
    assert unexercised_values(values, files) == ["prometheus.timeoutSeconds", "template", "url"]
    assert unexercised_variables({"SHIFTLIGHT_NOWHERE", "SHIFTLIGHT_LOADGEN_TEST_FAULT"}, files) == [
        "SHIFTLIGHT_LOADGEN_TEST_FAULT",
        "SHIFTLIGHT_NOWHERE",
    ]
    files[Path("tests/b.py")] = "env = {FAULT_ENV: 'stall=1.0@10'}"
    assert unexercised_variables({"SHIFTLIGHT_LOADGEN_TEST_FAULT"}, files) == []
