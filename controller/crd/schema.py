"""Kubernetes CustomResourceDefinitions generated from the pydantic models in :mod:`controller.crd.models`.

Pydantic emits JSON Schema (draft 2020-12); the apiserver wants a *structural* OpenAPI v3 schema. The
conversion here:

* inlines every ``$ref`` (the models are not recursive), merging sibling keywords such as ``description``;
* turns ``anyOf: [X, {type: null}]`` into ``X`` + ``nullable: true``;
* turns ``const`` into a one-value ``enum`` and numeric ``exclusiveMinimum/Maximum`` into the OpenAPI v3.0
  boolean form (``minimum`` + ``exclusiveMinimum: true``);
* turns fixed-length tuples (``prefixItems``) into a homogeneous ``items`` with ``minItems``/``maxItems``;
* drops ``title``, ``additionalProperties: false`` (structural schemas prune unknown fields instead) and
  ``default: null``; keeps ``enum``, bounds, patterns, lengths, formats, descriptions and other defaults;
* adds the CEL rules of :data:`controller.crd.models.CEL_RULES` (``x-kubernetes-validations``) to the schema of
  each model that has some, so the apiserver refuses the cross-field combinations the models refuse.

No part of the models needs ``x-kubernetes-preserve-unknown-fields``; :func:`structural` raises if a schema
cannot be made structural (e.g. an untyped field), so a model change that would need it is noticed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from controller.crd import models

JSON = dict[str, Any]

_DROP = frozenset({"title", "$defs", "discriminator"})


class SchemaError(ValueError):
    """A model's JSON schema cannot be expressed as a structural Kubernetes schema."""


def _resolve(ref: str, defs: Mapping[str, Any]) -> JSON:
    prefix = "#/$defs/"
    if not ref.startswith(prefix):
        raise SchemaError(f"unsupported $ref {ref!r}")
    return dict(defs[ref[len(prefix) :]])


def _flatten(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> tuple[JSON, bool]:
    """Resolve ``$ref``, single-branch ``allOf`` and nullable ``anyOf``/``oneOf`` until none is left."""
    flat = dict(node)
    nullable = False
    while True:
        if "$ref" in flat:
            target = _resolve(flat.pop("$ref"), defs)
            target.update(flat)  # siblings (description, default) win over the definition
            flat = target
            continue
        if "allOf" in flat and len(flat["allOf"]) == 1:
            inner = dict(flat.pop("allOf")[0])
            inner.update(flat)
            flat = inner
            continue
        key = next((k for k in ("anyOf", "oneOf") if k in flat), None)
        if key is None:
            return flat, nullable
        branches = [b for b in flat[key] if b != {"type": "null"}]
        if len(branches) != 1:
            raise SchemaError(f"{path}: unions of several non-null types are not structural ({flat[key]!r})")
        nullable = nullable or len(branches) < len(flat[key])
        del flat[key]
        merged = dict(branches[0])
        merged.update(flat)
        flat = merged


def _convert(node: Any, defs: Mapping[str, Any], path: str) -> Any:
    """The structural form of one schema node: its keywords converted, then its type settled and checked."""
    if not isinstance(node, Mapping):
        return node
    node, nullable = _flatten(node, defs, path)
    out = _convert_keywords(node, defs, path)
    _to_boolean_exclusive_bounds(out)
    if nullable:
        out["nullable"] = True
    _infer_type(out)
    _check_structural(out, path)
    return out


def _convert_keywords(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> JSON:
    """Each keyword of a flattened node in its OpenAPI v3 form, sub-schemas converted; dropped keywords left out."""
    out: JSON = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            if value is not False:
                out[key] = _convert(value, defs, f"{path}[]")
        elif key == "prefixItems":
            out.update(_homogeneous_items(value, defs, path))
        elif key == "const":
            out["enum"] = [value]
        elif not (key == "default" and value is None):
            out[key] = copy.deepcopy(value)
    return out


def _homogeneous_items(prefix_items: list[Any], defs: Mapping[str, Any], path: str) -> JSON:
    """A fixed-length tuple as one ``items`` schema with ``minItems`` = ``maxItems`` = its length."""
    converted = [_convert(sub, defs, f"{path}[]") for sub in prefix_items]
    if any(c != converted[0] for c in converted):
        raise SchemaError(f"{path}: heterogeneous tuples are not structural")
    return {"items": converted[0], "minItems": len(converted), "maxItems": len(converted)}


def _to_boolean_exclusive_bounds(out: JSON) -> None:
    """Numeric ``exclusiveMinimum/Maximum`` (draft 2020-12) as ``minimum/maximum`` + ``exclusive…: true`` (v3.0)."""
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in out and not isinstance(out[bound], bool):
            out[limit] = out[bound]
            out[bound] = True


def _infer_type(out: JSON) -> None:
    """The ``type`` pydantic leaves implicit: ``object`` for a node with properties, ``string`` for a string enum."""
    if "properties" in out:
        out.setdefault("type", "object")
    if "enum" in out and "type" not in out:
        kinds = {type(v) for v in out["enum"]}
        if kinds == {str}:
            out["type"] = "string"


def _check_structural(out: JSON, path: str) -> None:
    """Raise :class:`SchemaError` unless the node has the single type (and array items) a structural schema needs."""
    if "type" not in out:
        raise SchemaError(f"{path}: no type (would need x-kubernetes-preserve-unknown-fields)")
    if isinstance(out["type"], list):
        raise SchemaError(f"{path}: multiple types {out['type']!r} are not structural")
    if out["type"] == "array" and "items" not in out:
        raise SchemaError(f"{path}: array without items")


def structural(model: type[BaseModel]) -> JSON:
    """The structural OpenAPI v3 schema of ``model`` in its wire form (aliases)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    for cls, rules in models.CEL_RULES.items():
        node = raw if cls is model else defs.get(cls.__name__)
        if node is not None:
            node["x-kubernetes-validations"] = copy.deepcopy(rules)
    return dict(_convert(raw, defs, model.__name__))


def _with_conditions_list_type(schema: JSON) -> JSON:
    conditions = schema.get("properties", {}).get("conditions")
    if conditions is not None:
        conditions["x-kubernetes-list-type"] = "map"
        conditions["x-kubernetes-list-map-keys"] = ["type"]
        conditions["items"]["required"] = sorted({*conditions["items"].get("required", []), "type", "status"})
    return schema


def _column(name: str, type_: str, path: str, description: str, priority: int = 0) -> JSON:
    column: JSON = {"name": name, "type": type_, "jsonPath": path, "description": description}
    if priority:
        column["priority"] = priority
    return column


_AGE = _column("Age", "date", ".metadata.creationTimestamp", "time since creation")


def _crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_names: list[str],
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[JSON],
    description: str,
) -> JSON:
    open_api: JSON = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural(spec),
            "status": _with_conditions_list_type(structural(status)),
        },
    }
    names: JSON = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular}
    if short_names:
        names["shortNames"] = short_names
    names["categories"] = ["shiftlight"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{models.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "shiftlight"},
        },
        "spec": {
            "group": models.GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": open_api},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [*columns, _AGE],
                }
            ],
        },
    }


def tuned_service_crd() -> JSON:
    return _crd(
        kind=models.KIND_TUNED_SERVICE,
        plural=models.PLURAL_TUNED_SERVICE,
        singular="tunedservice",
        short_names=["ts"],
        spec=models.TunedServiceSpec,
        status=models.TunedServiceStatus,
        description="A production vLLM model whose engine configuration Shiftlight keeps tuned.",
        columns=[
            _column("Phase", "string", ".status.phase", "lifecycle phase"),
            _column("Active", "string", ".status.summary.activeConfig", "active engine config"),
            _column("Candidate", "string", ".status.summary.candidateConfig", "config being rolled out", 1),
            _column("Weight", "integer", ".status.summary.canaryWeight", "percent of traffic on the candidate"),
            _column("Gain", "string", ".status.summary.gain", "goodput vs stock config"),
            _column("Dry-Run", "boolean", ".spec.dryRun", "decide and report only", 1),
        ],
    )


def trial_crd() -> JSON:
    return _crd(
        kind=models.KIND_TRIAL,
        plural=models.PLURAL_TRIAL,
        singular="trial",
        short_names=[],
        spec=models.TrialSpec,
        status=models.TrialCRStatus,
        description="One canary measurement of an engine config under a traffic shape.",
        columns=[
            _column("Target", "string", ".spec.target", "TunedService"),
            _column("Config", "string", ".status.configLabel", "engine config"),
            _column("Phase", "string", ".status.phase", "trial phase"),
            _column("Outcome", "string", ".status.result.status", "measured, infeasible, failed, rejected or invalid"),
            _column("Goodput", "number", ".status.result.goodput_tokens_per_s", "output tokens/s within the SLO"),
        ],
    )


def config_rollout_crd() -> JSON:
    return _crd(
        kind=models.KIND_CONFIG_ROLLOUT,
        plural=models.PLURAL_CONFIG_ROLLOUT,
        singular="configrollout",
        short_names=["cro"],
        spec=models.ConfigRolloutSpec,
        status=models.ConfigRolloutStatus,
        description="A weighted, approvable move of a TunedService from one engine config to another.",
        columns=[
            _column("Target", "string", ".spec.target", "TunedService"),
            _column("From", "string", ".status.fromLabel", "stable config"),
            _column("To", "string", ".status.toLabel", "candidate config"),
            _column("Phase", "string", ".status.phase", "rollout phase"),
            _column("Step", "integer", ".status.stepIndex", "current step index"),
            _column("Weight", "integer", ".status.weight", "percent of traffic on the candidate"),
        ],
    )


def all_crds() -> list[JSON]:
    return [tuned_service_crd(), trial_crd(), config_rollout_crd()]


def to_json_schema(node: Any, *, forbid_unknown: bool = False) -> Any:
    """An OpenAPI v3 (Kubernetes) schema as a JSON Schema draft 4 document, for validating objects offline.

    ``nullable: true`` becomes a ``"null"`` type (and a ``None`` enum member); ``x-kubernetes-*`` extensions are
    dropped. With ``forbid_unknown``, objects with ``properties`` refuse other keys (the apiserver's strict field
    validation; it would otherwise prune them), except ``metadata``.
    """
    if isinstance(node, list):
        return [to_json_schema(item, forbid_unknown=forbid_unknown) for item in node]
    if not isinstance(node, Mapping):
        return node
    out: JSON = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "properties":
            out[key] = {
                name: sub if name == "metadata" else to_json_schema(sub, forbid_unknown=forbid_unknown)
                for name, sub in value.items()
            }
        else:
            out[key] = to_json_schema(value, forbid_unknown=forbid_unknown)
    if node.get("nullable") is True:
        if "type" in out:
            out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    if forbid_unknown and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out
