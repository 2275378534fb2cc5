"""What the custom resources share (group ``shiftlight.dev``, version ``v1alpha1``): their kinds and plurals, the
name patterns their fields are checked against, :class:`WireModel` (camelCase on the wire) and the Kubernetes pieces
they embed. The resources themselves: :mod:`controller.crd.tuned_service`, :mod:`controller.crd.trial` and
:mod:`controller.crd.config_rollout`; :mod:`controller.crd.models` gathers them all."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

GROUP = "shiftlight.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

KIND_TUNED_SERVICE = "TunedService"
KIND_TRIAL = "Trial"
KIND_CONFIG_ROLLOUT = "ConfigRollout"
PLURAL_TUNED_SERVICE = "tunedservices"
PLURAL_TRIAL = "trials"
PLURAL_CONFIG_ROLLOUT = "configrollouts"

#: Kubernetes object names (RFC 1123 subdomain, as for Deployments, Services, ConfigMaps, Secrets).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_NAME = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
#: A policy preset's name: a file name under the operator's policy directory, never a path (the CRD's field and the
#: operator's own check of the preset it loads both use this rule).
PRESET_NAME = r"^[a-z0-9][a-z0-9-]*$"
PRESET_MAX_LENGTH = 63
#: A model as vLLM is given it: a Hugging Face id (``org/name``, ``name@revision``) or a path or URI (``/models/x``,
#: ``s3://bucket/x``). No spaces, quotes, brackets or control characters: it is shown in terminals and in Slack. It
#: starts with a letter, digit, ``.``, ``_`` or ``/``, never ``-``: on a command line it is a value, never a flag
#: (``--trust-remote-code`` as a model name would turn that option on). Also the rule for ``servedModelName``.
MODEL_NAME = r"^[A-Za-z0-9._/][A-Za-z0-9._/:@+-]*$"
#: An accelerator type (``H100-80GB``, ``gb300-dgx-station``): letters, digits, ``.``, ``_`` and ``-``.
GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: A label value, or the name part of a label key (at most 63 characters; a value may be empty).
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")


def label_key_valid(key: str) -> bool:
    """A Kubernetes label key: ``[prefix/]name``, the prefix a DNS subdomain of at most 253 characters."""
    prefix, _, name = key.rpartition("/")
    if not name or not LABEL_VALUE.fullmatch(name):
        return False
    return not prefix or (len(prefix) <= 253 and re.fullmatch(DNS_SUBDOMAIN, prefix) is not None)


class WireModel(BaseModel):
    """Base of the CR-specific models: camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
    )

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict in the Kubernetes wire form (camelCase, explicit nulls)."""
        return self.model_dump(mode="json", by_alias=True)


class Condition(WireModel):
    """A standard Kubernetes condition (``metav1.Condition``)."""

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class SecretKeyRef(WireModel):
    """One key of a Secret in the CR's namespace."""

    name: str = _NAME
    key: str = Field(min_length=1, max_length=253)


class ConfigMapKeyRef(WireModel):
    """One key of a ConfigMap in the CR's namespace."""

    name: str = _NAME
    key: str = Field(min_length=1, max_length=253)


class Toleration(WireModel):
    """A pod toleration (``core/v1 Toleration``)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator 'Exists' must not set a value")
        return self
