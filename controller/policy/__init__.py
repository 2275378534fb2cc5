"""Declarative tuning policy: what Shiftlight may try, how it rolls out, who approves, and how it may use an LLM.

A policy is a YAML file (presets under ``policies/v1/``; the JSON schema is ``policies/schema.json``)::

    version: 1
    name: dense-8b-h200
    target: {model: dense-8b, gpu: h200, gpu_family: hopper, hybrid: false, has_mtp: false}
    space:
      max_num_seqs: [64, 128, 256, 512]
      max_num_batched_tokens: {min: 2048, max: 16384, scale: log2}
    slo: {ttft_seconds: 2.0, tpot_seconds: 0.05}
    approval: manual-for-lossy

Entry points: :func:`load_policy` (file -> :class:`Policy`, errors name the file, line, field and allowed values),
``Policy.space.configs()`` (every valid config of the search space), :meth:`Policy.validate_config` (why a config
is out of policy), :meth:`Policy.is_lossy`, and :func:`export_json_schema` (``python -m controller.policy schema``).

Modules: :mod:`~controller.policy.space` (the search space), :mod:`~controller.policy.knob_ranges` (knob bounds and
ranges), :mod:`~controller.policy.targeting` (the target and the space overrides), :mod:`~controller.policy.models`
(the policy document and its checks; pure), :mod:`~controller.policy.loading` (YAML text and files -> Policy) and
:mod:`~controller.policy.schema` (the command). ``controller.decide`` imports only the pure ones.

The memory-fit constraint needs a feasibility oracle ``EngineConfig -> reason | None``; pass one explicitly
(:meth:`Policy.with_feasibility`) or let :func:`load_policy` attach the one
:func:`~controller.policy.loading.profile_feasibility` builds from the simulator's performance model when the
target names a known model and GPU profile.

The loader and the schema command (and with them YAML and the simulator's performance model) are imported on
first use of their names, so that importing the policy document, as ``controller.decide`` does, loads neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from controller.domain.approval import ApprovalMode
from controller.policy.knob_ranges import KNOB_BOUNDS, FloatRange, IntRange
from controller.policy.llm import ADMIN_ONLY_LLM_KEYS, LlmSettings
from controller.policy.models import (
    Constraints,
    LossyRule,
    Policy,
    RolloutPolicy,
    TrialBudgetPolicy,
)
from controller.policy.scaling import ScalingPolicy
from controller.policy.space import (
    MAX_SPACE_COMBINATIONS,
    Feasibility,
    SearchSpace,
)
from controller.policy.targeting import Target

if TYPE_CHECKING:
    from controller.policy.loading import PolicyError, default_policy, load_policy, parse_policy, profile_feasibility
    from controller.policy.schema import export_json_schema

#: Public names imported on first use, and their modules: the loader reads YAML and builds the feasibility oracle
#: from the simulator's performance model, which the pure policy document must not pull in.
_LAZY = {
    "PolicyError": "controller.policy.loading",
    "default_policy": "controller.policy.loading",
    "load_policy": "controller.policy.loading",
    "parse_policy": "controller.policy.loading",
    "profile_feasibility": "controller.policy.loading",
    "export_json_schema": "controller.policy.schema",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'controller.policy' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ADMIN_ONLY_LLM_KEYS",
    "KNOB_BOUNDS",
    "MAX_SPACE_COMBINATIONS",
    "ApprovalMode",
    "Constraints",
    "Feasibility",
    "FloatRange",
    "IntRange",
    "LlmSettings",
    "LossyRule",
    "Policy",
    "PolicyError",
    "RolloutPolicy",
    "ScalingPolicy",
    "SearchSpace",
    "Target",
    "TrialBudgetPolicy",
    "default_policy",
    "export_json_schema",
    "load_policy",
    "parse_policy",
    "profile_feasibility",
]
