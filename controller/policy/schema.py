"""``python -m controller.policy schema`` (the JSON schema, ``policies/schema.json``) and ``check FILE...``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from controller.domain.text import block, one_line
from controller.policy.loading import PolicyError, load_policy
from controller.policy.models import Policy


def export_json_schema() -> dict[str, Any]:
    schema = Policy.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://shiftlight.dev/schemas/policy/v1.json"
    schema["title"] = "Shiftlight tuning policy (v1)"
    return schema


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["schema"]:
        sys.stdout.write(json.dumps(export_json_schema(), indent=2, sort_keys=True) + "\n")
        return 0
    if args[:1] == ["check"] and len(args) >= 2:
        status = 0
        for path in args[1:]:
            try:
                pol = load_policy(path)
            except PolicyError as exc:
                sys.stderr.write(f"{block(exc)}\n")  # each problem is one line; the file's text drives nothing
                status = 1
                continue
            n = sum(1 for _ in pol.space.configs(pol.feasibility))
            sys.stdout.write(f"{one_line(path)}: ok ({one_line(pol.name)}, {n} valid configs)\n")
        return status
    sys.stderr.write("usage: python -m controller.policy schema | check FILE...\n")
    return 2
