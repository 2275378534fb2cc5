"""Knob values -> :class:`EngineConfig`, with the knobs that depend on a parent knob switched off when the parent
is off: no draft tokens without a speculative method, no lookup length outside ngram drafting, no stochastic
rounding without a float16 Mamba cache, no Philox rounds without stochastic rounding.

One rule is the caller's to choose: a speculative method switched on without a draft-token count. The search
space enumerates complete combinations the policy declared and drops that one (``draft_tokens=0``: it is not a
config); an advisor's change is a delta on a running config, and "turn on MTP" there starts at one draft token
(``draft_tokens=1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.domain.config import EngineConfig


def normalised(values: Mapping[str, Any], *, draft_tokens: int = 0) -> EngineConfig:
    """The config ``values`` describe (every EngineConfig field present), dependent knobs switched off; a method
    without draft tokens gets ``draft_tokens`` of them. Raises pydantic's ``ValidationError`` when the values do
    not make a valid config (a method left with 0 draft tokens among them)."""
    v = dict(values)
    if v["speculative_method"] == "none":
        v["num_speculative_tokens"] = 0
    elif not v["num_speculative_tokens"]:
        v["num_speculative_tokens"] = draft_tokens
    if v["speculative_method"] != "ngram":
        v["prompt_lookup_max"] = None
    if v["mamba_ssm_cache_dtype"] != "float16":
        v["mamba_cache_stochastic_rounding"] = False
    if not v["mamba_cache_stochastic_rounding"]:
        v["mamba_cache_philox_rounds"] = None
    return EngineConfig.model_validate(v)


__all__ = ["normalised"]
