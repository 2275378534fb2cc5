"""Variant pods derived from the user's own vLLM pod template (pure: no I/O).

The stable, candidate and canary-trial pods are the user's pod template with only the flags Shiftlight tunes
replaced (:func:`controller.domain.invocation.render_invocation`) and Shiftlight's labels added. Everything else
stays: sidecars, initContainers, volumes, env, envFrom, probes, resources, securityContext, affinity, tolerations,
nodeSelector, annotations, serviceAccountName, every other flag in place and order.

Label hygiene: pool selectors are exact-match label sets and routers find engine pods by label, so a candidate or
trial pod rewrites the value of every label one of the user's selectors matches (``app: chat`` becomes
``app: chat-candidate``) and keeps the others; the stable pods keep the user's labels.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from controller.domain.config import EngineConfig
from controller.domain.invocation import OMP_ENV, VllmInvocation, parse_invocation, render_invocation
from controller.errors import InvalidInput

JSON = dict[str, Any]

LABEL_VARIANT = "shiftlight.dev/variant"

#: Variants whose pods must stay out of the user's selectors.
ISOLATED_VARIANTS = frozenset({"candidate", "trial"})

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class PodSource:
    """The user's pod template and what is needed to read its vLLM invocation.

    ``template`` is a pod template (``{"metadata": ..., "spec": ...}``, a Deployment's ``spec.template``);
    ``container`` the vLLM container's name; ``config_maps`` the data of ConfigMaps by name (for a ``--config``
    file mounted from one); ``selectors`` the user's label selectors (Deployment, Service, pools, routers) that
    candidate and trial pods must not match; ``where`` names the object in errors."""

    template: Mapping[str, Any]
    container: str = "vllm"
    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    selectors: tuple[Mapping[str, str], ...] = ()
    where: str = "pod template"


def _container(source: PodSource) -> tuple[int, JSON]:
    containers: list[JSON] = list((source.template.get("spec") or {}).get("containers") or [])
    for i, c in enumerate(containers):
        if c.get("name") == source.container:
            return i, c
    if len(containers) == 1:
        return 0, containers[0]
    names = ", ".join(str(c.get("name")) for c in containers) or "none"
    raise InvalidInput(
        f"no container named {source.container!r} (containers: {names})", source=source.where, field="containers"
    )


def _where(source: PodSource, container: Mapping[str, Any]) -> str:
    return f"{source.where} container {container.get('name')}"


def _literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {str(e["name"]): str(e["value"]) for e in container.get("env") or [] if "name" in e and "value" in e}


def config_file_path(source: PodSource) -> str | None:
    """The ``--config FILE`` path of the vLLM container, if it has one."""
    _, c = _container(source)
    argv = [*(c.get("command") or []), *(c.get("args") or [])]
    for i, tok in enumerate(argv[:-1]):
        if tok == "--config":
            return str(argv[i + 1])
    return None


def config_map_key(source: PodSource, path: str) -> tuple[str, str] | None:
    """``(ConfigMap name, key)`` of the file at ``path`` in the vLLM container, through its volumeMounts."""
    _, c = _container(source)
    volumes = {v.get("name"): v for v in (source.template.get("spec") or {}).get("volumes") or []}
    target = PurePosixPath(path)
    for mount in c.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name")) or {}
        cm = volume.get("configMap")
        if not cm:
            continue
        mount_path = PurePosixPath(mount.get("mountPath", ""))
        if mount.get("subPath"):
            if target != mount_path:
                continue
            rel = str(mount["subPath"])
        else:
            try:
                rel = str(target.relative_to(mount_path))
            except ValueError:
                continue
        items = cm.get("items")
        if items:
            key = next((it["key"] for it in items if it.get("path") == rel), None)
            if key is None:
                continue
            return str(cm["name"]), str(key)
        return str(cm["name"]), rel
    return None


def config_map_name(source: PodSource) -> str | None:
    """The ConfigMap the vLLM container's ``--config`` file comes from (to read it before deriving)."""
    path = config_file_path(source)
    hit = config_map_key(source, path) if path else None
    return hit[0] if hit else None


def command_value(value: str, *, field: str, where: str) -> str:
    """``value`` (a tenant's model or served model name) as one value of a command line: refused when it could be
    read as a flag (it starts with ``-``: ``--trust-remote-code`` as a model name would turn that option on)."""
    if value.startswith("-"):
        raise InvalidInput(
            f"{value[:64]!r} starts with '-': a model name is a value on vLLM's command line, never a flag",
            source=where,
            field=field,
        )
    return value


def engine_invocation(source: PodSource, *, fallback_model: str | None = None, port: int = 8000) -> VllmInvocation:
    """The parsed vLLM invocation of the user's container. A container with neither command nor args is given
    ``vllm serve <fallback_model> --port <port>`` (the bare-model rendering; a model name starting with ``-`` is
    refused, :func:`command_value`)."""
    _, c = _container(source)
    where = _where(source, c)
    command, args = c.get("command"), c.get("args")
    if not command and not args:
        if not fallback_model:
            raise InvalidInput("the vLLM container has no command or args naming a model", source=where,
                               field="args")  # fmt: skip
        model = command_value(fallback_model, field="spec.model.name", where=where)
        command, args = ["vllm"], ["serve", model, "--port", str(port)]
    files: dict[str, str] = {}
    path = config_file_path(source)
    if path:
        hit = config_map_key(source, path)
        if hit is not None and hit[1] in (source.config_maps.get(hit[0]) or {}):
            files[path] = str(source.config_maps[hit[0]][hit[1]])
    return parse_invocation(command, args, _literal_env(c), config_files=files, where=where)


def baseline_config(source: PodSource, *, fallback_model: str | None = None) -> EngineConfig:
    """The engine config the user's pods run today (what their flags, config file and env set)."""
    return engine_invocation(source, fallback_model=fallback_model).config


def _label_value(value: str, suffix: str) -> str:
    out = f"{value}-{suffix}"
    if len(out) > 63:
        out = out[: 63 - len(suffix) - 1].rstrip("-_.") + "-" + suffix
    return out if _LABEL_VALUE.match(out) else suffix


def hygienic_labels(labels: Mapping[str, str], selectors: Sequence[Mapping[str, str]], variant: str) -> dict[str, str]:
    """The user's pod labels for a ``variant`` pod: for candidate and trial pods, each label a selector matches
    gets its value suffixed with the variant, so no selector matches the pod."""
    out = dict(labels)
    if variant not in ISOLATED_VARIANTS:
        return out
    for selector in selectors:
        for key, value in selector.items():
            if out.get(key) == value == labels.get(key):
                out[key] = _label_value(value, variant)
    return out


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Kubernetes ``matchLabels`` semantics (an empty selector matches everything)."""
    return all(labels.get(k) == v for k, v in selector.items())


def _set_env(env: list[JSON], name: str, value: str | None) -> list[JSON]:
    out: list[JSON] = []
    placed = False
    for entry in env:
        if entry.get("name") == name:
            if value is not None and not placed:
                out.append({"name": name, "value": value})
                placed = True
            continue
        out.append(entry)
    if value is not None and not placed:
        out.append({"name": name, "value": value})
    return out


def derive_pod_template(
    source: PodSource,
    config: EngineConfig,
    *,
    variant: str,
    labels: Mapping[str, str],
    served_model_name: str | None = None,
    fallback_model: str | None = None,
    port: int = 8000,
) -> JSON:
    """The user's pod template running ``config``: the vLLM container's tuned flags and ``OMP_NUM_THREADS``
    replaced, labels made hygienic for ``variant`` and ``labels`` (Shiftlight's) added; nothing else changes.
    ``served_model_name`` is added when the user's command line names none."""
    template: JSON = copy.deepcopy(dict(source.template))
    index, _ = _container(source)
    invocation = engine_invocation(source, fallback_model=fallback_model, port=port)
    extra: list[str] = []
    if served_model_name and invocation.served_model_name is None:
        where = _where(source, template["spec"]["containers"][index])
        served = command_value(served_model_name, field="spec.model.servedModelName", where=where)
        extra = ["--served-model-name", served]
    command, args = render_invocation(invocation, config, extra=extra)
    container: JSON = template["spec"]["containers"][index]
    if command:
        container["command"] = command
    if args or "args" in container:
        container["args"] = args
    if not command:
        container.pop("command", None)
    omp = config.env().get(OMP_ENV)
    if omp is not None or any(e.get("name") == OMP_ENV for e in container.get("env") or []):
        env = _set_env(list(container.get("env") or []), OMP_ENV, omp)
        if env:
            container["env"] = env
        else:
            container.pop("env", None)
    metadata: JSON = template.setdefault("metadata", {})
    user_labels = dict(metadata.get("labels") or {})
    # Shiftlight's own keys always; another of its labels (managed-by) only where the user's pods have none
    ours = {k: v for k, v in labels.items() if k.startswith("shiftlight.dev/") or k not in user_labels}
    metadata["labels"] = {**hygienic_labels(user_labels, source.selectors, variant), **ours}
    return template


__all__ = [
    "ISOLATED_VARIANTS",
    "PodSource",
    "baseline_config",
    "command_value",
    "config_map_name",
    "derive_pod_template",
    "engine_invocation",
    "hygienic_labels",
    "selector_matches",
]
