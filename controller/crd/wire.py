"""Parsing CR bodies (as strictly as the apiserver: errors name the wire path) and rendering statuses in the
Kubernetes wire form (see :mod:`controller.crd.models`)."""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from controller.crd.config_rollout import (
    ConfigRolloutSpec,
    ConfigRolloutStatus,
)
from controller.crd.shared import (
    DNS_SUBDOMAIN,
    KIND_CONFIG_ROLLOUT,
    KIND_TRIAL,
    KIND_TUNED_SERVICE,
    PRESET_NAME,
    Condition,
)
from controller.crd.trial import (
    TrialCRStatus,
    TrialSpec,
)
from controller.crd.tuned_service import (
    K8S_STATUS_KEYS,
    StatusSummary,
    TunedServiceSpec,
)
from controller.domain.rollout import RolloutState
from controller.domain.status import TargetStatus
from controller.errors import InvalidInput

_M = TypeVar("_M", bound=BaseModel)


def config_rollout_from_state(state: RolloutState, *, target: str) -> tuple[ConfigRolloutSpec, ConfigRolloutStatus]:
    """The ConfigRollout spec and status that mirror a domain :class:`RolloutState`."""
    spec = ConfigRolloutSpec(
        target=target,
        rollout_id=state.id,
        from_config=state.from_config,
        to_config=state.to_config,
        steps=state.steps,
        reason=state.reason,
        proposed_by=state.proposed_by,
        expected_gain=state.expected_gain,
    )
    status = ConfigRolloutStatus(
        phase="Paused" if state.paused else "Progressing",
        from_label=state.from_config.label(),
        to_label=state.to_config.label(),
        step_index=state.step_index,
        weight=state.weight,
        started_at=state.started_at,
        step_started_at=state.step_started_at,
        analyses=state.analyses,
        approvals=state.approvals,
    )
    return spec, status


# ----- parsing and rendering ------------------------------------------------------------------------


def _loc(prefix: str, loc: Sequence[int | str]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _wire_loc(model: type[BaseModel], loc: Sequence[int | str]) -> list[int | str]:
    """``loc`` with each field named as on the wire (the camelCase alias of CR fields; domain models keep their
    own names), whichever spelling the input used."""
    models: list[type[BaseModel]] = [model]
    out: list[int | str] = []
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            continue
        match = next(
            ((name, info) for m in models for name, info in m.model_fields.items() if part in (name, info.alias)),
            None,
        )
        if match is None:
            out.append(part)
            continue
        name, info = match
        out.append(info.alias or name)
        models = _models_in(info.annotation) or models
    return out


def _message(error: Any) -> str:
    if error.get("type") == "string_pattern_mismatch":
        pattern = (error.get("ctx") or {}).get("pattern")
        if pattern == DNS_SUBDOMAIN:
            return f"{error.get('input')!r} is not a valid Kubernetes name (lowercase a-z, 0-9, '-' and '.')"
        if pattern == PRESET_NAME:
            return f"{error.get('input')!r} is not a preset name (lowercase a-z, 0-9 and '-', first not '-')"
    return str(error["msg"])


def _invalid(exc: ValidationError, *, model: type[BaseModel], source: str, prefix: str) -> InvalidInput:
    errors = exc.errors(include_url=False)
    lines = [f"{_loc(prefix, _wire_loc(model, e['loc']))}: {_message(e)}" for e in errors]
    first = _loc(prefix, _wire_loc(model, errors[0]["loc"])) if errors else prefix
    return InvalidInput("; ".join(lines), source=source, field=first)


def _plain(value: Any) -> Any:
    """JSON form of what ``json`` cannot write itself: mapping views, and dates a YAML loader made."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _validate_strict(model: type[_M], data: Any, *, source: str, prefix: str) -> _M:
    """Validate ``data`` as the apiserver would: strict JSON types (no ``"2"`` for 2.0, no ``"yes"`` for true, no
    number for a string), RFC 3339 strings for times. Errors name the wire path (``spec.replicas.minReplicas``)."""
    try:
        payload = json.dumps(data, default=_plain, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not a JSON object: {exc}", source=source, field=prefix) from None
    try:
        return model.model_validate_json(payload, strict=True)
    except ValidationError as exc:
        raise _invalid(exc, model=model, source=source, prefix=prefix) from None


def _source(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return ""
    return "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)


def parse_spec(model: type[_M], body: Mapping[str, Any], *, kind: str) -> _M:
    """Validate ``body["spec"]`` as ``model``; errors become :class:`InvalidInput` naming ``spec.<field>``."""
    source = _source(body)
    if body.get("kind") not in (None, kind):
        raise InvalidInput(f"expected kind {kind}, got {body.get('kind')!r}", source=source, field="kind")
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidInput("spec is missing or not an object", source=source, field="spec")
    return _validate_strict(model, spec, source=source, prefix="spec")


def parse_tuned_service(body: Mapping[str, Any]) -> tuple[TunedServiceSpec, TargetStatus]:
    """Validate a TunedService body into its spec and its domain status.

    A missing or empty status is a fresh :class:`TargetStatus`. The Kubernetes bookkeeping keys of the status
    (``conditions``, ``observedGeneration``, ``summary``) are not part of the domain status and are ignored here.
    Raises :class:`InvalidInput` with ``source="<ns>/<name>"`` and ``field="spec.x.y"`` / ``"status.x.y"``.
    """
    spec = parse_spec(TunedServiceSpec, body, kind=KIND_TUNED_SERVICE)
    raw_status = body.get("status") or {}
    source = _source(body)
    if not isinstance(raw_status, Mapping):
        raise InvalidInput("status is not an object", source=source, field="status")
    domain = {k: v for k, v in raw_status.items() if k not in K8S_STATUS_KEYS}
    return spec, _validate_strict(TargetStatus, domain, source=source, prefix="status")


def _status(model: type[_M], body: Mapping[str, Any]) -> _M:
    raw = body.get("status") or {}
    if not isinstance(raw, Mapping):
        raise InvalidInput("status is not an object", source=_source(body), field="status")
    return _validate_strict(model, raw, source=_source(body), prefix="status")


def parse_trial(body: Mapping[str, Any]) -> tuple[TrialSpec, TrialCRStatus]:
    return parse_spec(TrialSpec, body, kind=KIND_TRIAL), _status(TrialCRStatus, body)


def parse_config_rollout(body: Mapping[str, Any]) -> tuple[ConfigRolloutSpec, ConfigRolloutStatus]:
    return parse_spec(ConfigRolloutSpec, body, kind=KIND_CONFIG_ROLLOUT), _status(ConfigRolloutStatus, body)


def summarize(status: TargetStatus) -> StatusSummary:
    """Printer-column values: active config label, candidate label and weight, and the goodput gain vs stock.

    The gain is the candidate's expected gain while a rollout runs, else the schedule entry of the active
    config (its goodput over stock goodput), else unknown.
    """
    active = status.active_config
    rollout = status.rollout
    ratio: float | None = None
    if rollout is not None and rollout.expected_gain is not None:
        ratio = rollout.expected_gain
    else:
        for entry in status.schedule:
            if entry.config == active and entry.stock_goodput_tokens_per_s > 0:
                ratio = entry.gain
                break
    return StatusSummary(
        active_config=active.label(),
        active_config_key=active.key(),
        candidate_config=rollout.to_config.label() if rollout is not None else None,
        canary_weight=rollout.weight if rollout is not None else 0,
        gain=f"{ratio:.2f}x" if ratio is not None else "",
        gain_ratio=round(ratio, 4) if ratio is not None else None,
    )


def status_to_wire(
    status: TargetStatus,
    *,
    conditions: Sequence[Condition] = (),
    observed_generation: int | None = None,
) -> dict[str, Any]:
    """The TunedService ``status`` as written to the API: the domain fields (snake_case, explicit nulls) plus
    ``conditions``, ``observedGeneration`` and the derived ``summary`` (camelCase)."""
    wire: dict[str, Any] = status.model_dump(mode="json")
    wire["conditions"] = [c.to_wire() for c in conditions]
    wire["observedGeneration"] = observed_generation
    wire["summary"] = summarize(status).to_wire()
    return wire


__all__ = [
    "config_rollout_from_state",
    "parse_config_rollout",
    "parse_spec",
    "parse_trial",
    "parse_tuned_service",
    "status_to_wire",
    "summarize",
]
