"""docs/install.md shows the example TunedService's main fields: each one it shows is the file's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def leaves(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in leaves(value, f"{path}.{key}").items()}
    return {path: node}


def test_the_tunedservice_install_md_shows_is_the_examples() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs/install.md").read_text(), flags=re.S)
    shown = [b for b in map(yaml.safe_load, blocks) if isinstance(b, dict) and b.get("kind") == "TunedService"]
    assert len(shown) == 1
    example = leaves(yaml.safe_load((REPO / "examples/tunedservice.yaml").read_text()))
    differing = {path: value for path, value in leaves(shown[0]).items() if example.get(path, "absent") != value}
    assert differing == {}
