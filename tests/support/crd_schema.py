"""Validate an object against a published CRD's ``openAPIV3Schema``, as a kube-apiserver would.

The OpenAPI keywords a CRD uses (``type``, ``properties``, ``required``, ``enum``, ``pattern``, length and item
bounds, ``additionalProperties``) are checked with ``jsonschema``; fields the schema does not declare are errors
(the API server would prune them, so the object would not be what was sent); the InferencePool CRD's two CEL
rules (``x-kubernetes-validations``) are checked by hand, since no CEL evaluator is at hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support.kube_api import INFERENCE_POOL_CRD

JSON = dict[str, Any]


def crd_schema(path: Path = INFERENCE_POOL_CRD, version: str = "v1") -> JSON:
    crd = yaml.safe_load(path.read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: JSON = v["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(version)


def _unknown_fields(value: Any, schema: JSON, where: str) -> Iterator[str]:
    if isinstance(value, dict) and schema.get("type") == "object" and "properties" in schema:
        if where == "metadata":
            return
        for key, item in value.items():
            if key not in schema["properties"]:
                yield f"{where}.{key}".lstrip(".")
            else:
                yield from _unknown_fields(item, schema["properties"][key], f"{where}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from _unknown_fields(item, schema["items"], f"{where}[{i}]")


def _inference_pool_cel(obj: JSON) -> Iterator[str]:
    spec = obj.get("spec") or {}
    ref = spec.get("endpointPickerRef")
    if ref is not None and ref.get("kind", "Service") == "Service" and "port" not in ref:
        yield "spec.endpointPickerRef: port is required when kind is 'Service' or unspecified"
    numbers = [p.get("number") for p in spec.get("targetPorts") or []]
    if len(numbers) != len(set(numbers)):
        yield "spec.targetPorts: port number must be unique"


def schema_errors(obj: JSON, schema: JSON | None = None) -> list[str]:
    """Every reason the API server would refuse (or prune) ``obj``; [] when it is valid."""
    schema = schema if schema is not None else crd_schema()
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(obj)
    ]
    errors += [f"{f}: unknown field" for f in _unknown_fields(obj, schema, "")]
    errors += list(_inference_pool_cel(obj))
    return errors


__all__ = ["crd_schema", "schema_errors"]
