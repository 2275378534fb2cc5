"""A TunedService's policy: a preset file of the admin's policy directory or a key of a ConfigMap in its namespace,
with the spec's approval, dry-run and SLO on top."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.objects import KubeObjects
from controller.crd.models import TunedServiceSpec
from controller.crd.shared import PRESET_MAX_LENGTH, PRESET_NAME
from controller.errors import InvalidInput
from controller.policy import Policy, load_policy, parse_policy, profile_feasibility
from controller.policy.loading import MAX_POLICY_BYTES
from controller.reactor.policy_refusals import POLICY_REFUSALS, PolicyRefusals, persisted_refusal, with_mark
from controller.reactor.settings import OperatorSettings

#: What a preset is called: a name, never a path (the TunedService CRD's rule for ``spec.policy.preset``).
PRESET = re.compile(PRESET_NAME)


def preset_path(settings: OperatorSettings, preset: str) -> Path:
    """The file of the policy preset named ``preset``, inside the admin's policy directory and nowhere else.

    A preset is a name (``[a-z0-9][a-z0-9-]*``): a tenant cannot reach another file of the operator's Pod with
    ``../`` or an absolute path, and a symlink that leaves the directory is refused too."""
    if len(preset) > PRESET_MAX_LENGTH or not PRESET.fullmatch(preset):
        raise InvalidInput(
            f"a preset is a name ([a-z0-9][a-z0-9-]*, at most {PRESET_MAX_LENGTH} characters), got {preset!r}",
            field="spec.policy.preset",
        )
    root = Path(settings.policy_dir).resolve()
    path = (root / f"{preset}.yaml").resolve()
    if path.parent != root or not path.is_file():
        offered = sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []
        raise InvalidInput(
            f"unknown policy preset {preset!r}; presets: {', '.join(offered)}", field="spec.policy.preset"
        )
    return path


def resolve_policy(
    api: ApiClient,
    settings: OperatorSettings,
    spec: TunedServiceSpec,
    body: Mapping[str, Any],
    *,
    refusals: PolicyRefusals = POLICY_REFUSALS,
) -> Policy:
    """The TunedService's policy: a preset file or a ConfigMap key, with the spec's approval/dry-run/SLO on top.

    A ConfigMap's text is read up to ``settings.policy_max_bytes`` (a longer one is refused before it is parsed).
    A text refused before (the same source and SHA-256, whatever the ConfigMap's resourceVersion) is refused again
    without judging it again: from memory, or, after a restart, from the refusal recorded in the TunedService's
    ``Accepted`` condition (``body``'s stored status), whose message ends with the text's hash."""
    namespace = body["metadata"]["namespace"]
    if spec.policy.config_map_ref is not None:
        ref = spec.policy.config_map_ref
        cm = KubeObjects(api).read_config_map(namespace, ref.name, what=f"configmap {namespace}/{ref.name}")
        text = (cm.get("data") or {}).get(ref.key)
        if not isinstance(text, str):
            raise InvalidInput(f"key {ref.key!r} not found", source=f"configmap {namespace}/{ref.name}")
        source = f"configmap {namespace}/{ref.name}:{ref.key}"
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        stored = body.get("status")
        persisted = persisted_refusal(stored.get("conditions") if isinstance(stored, Mapping) else None, source, digest)

        def judge() -> Policy:
            try:
                return parse_policy(text, source=source, max_bytes=settings.policy_max_bytes)
            except InvalidInput as exc:
                raise with_mark(exc, source, digest) from None

        policy = refusals.judged(("configmap", source, digest), judge, namespace=namespace, persisted=persisted)
        policy = policy.with_feasibility(profile_feasibility(policy))
    else:
        path = preset_path(settings, spec.policy.preset or settings.default_policy)
        policy = load_policy(path, max_bytes=max(settings.policy_max_bytes, MAX_POLICY_BYTES))
    size, budget = policy.space.product_size(), settings.max_space_combinations
    if size > budget:
        raise InvalidInput(
            f"the space has {size:,} combinations, more than the {budget:,} this operator allows one TunedService "
            "(SHIFTLIGHT_MAX_SPACE_COMBINATIONS); list fewer values or use coarser ranges",
            source=f"policy {policy.name}",
            field="space",
        )
    update: dict[str, object] = {
        "approval": spec.approval_mode,
        "dry_run": bool(spec.dry_run or policy.dry_run),
    }
    if "slo" in spec.model_fields_set:
        update["slo"] = spec.slo
    return policy.model_copy(update=update).with_feasibility(policy.feasibility)


__all__ = ["PRESET", "preset_path", "resolve_policy"]
