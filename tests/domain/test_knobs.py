"""One knob normaliser for the search space and the advisor: dependent knobs are switched off with their parent,
and only the draft-token count of a method switched on without one differs (the space drops the combination,
an advisor's change starts at one draft token)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from controller.advisor.schema import apply_change
from controller.domain.config import STOCK, EngineConfig
from controller.domain.knobs import normalised
from controller.errors import InvalidInput
from controller.policy import SearchSpace

# (changes on top of STOCK, knob -> expected value after normalising, the same with draft_tokens=1)
CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"speculative_method": "none", "num_speculative_tokens": 3}, {"num_speculative_tokens": 0}),
    ({"speculative_method": "mtp", "num_speculative_tokens": 2}, {"num_speculative_tokens": 2}),
    (
        {"speculative_method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5},
        {"prompt_lookup_max": 5},
    ),
    (
        {"speculative_method": "mtp", "num_speculative_tokens": 1, "prompt_lookup_max": 5},
        {"prompt_lookup_max": None},
    ),
    (
        {"mamba_ssm_cache_dtype": "float32", "mamba_cache_stochastic_rounding": True},
        {"mamba_cache_stochastic_rounding": False},
    ),
    (
        {"mamba_ssm_cache_dtype": "float16", "mamba_cache_stochastic_rounding": True},
        {"mamba_cache_stochastic_rounding": True},
    ),
    (
        {"mamba_cache_stochastic_rounding": False, "mamba_cache_philox_rounds": 3},
        {"mamba_cache_philox_rounds": None},
    ),
    (
        {"mamba_ssm_cache_dtype": "float16", "mamba_cache_stochastic_rounding": True, "mamba_cache_philox_rounds": 3},
        {"mamba_cache_philox_rounds": 3},
    ),
    ({"max_num_seqs": 128}, {"max_num_seqs": 128}),
]


def _values(changes: dict[str, Any]) -> dict[str, Any]:
    return STOCK.model_dump() | changes


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_dependent_knobs_follow_their_parent(changes: dict[str, Any], expected: dict[str, Any]) -> None:
    for draft_tokens in (0, 1):
        cfg = normalised(_values(changes), draft_tokens=draft_tokens)
        assert {k: getattr(cfg, k) for k in expected} == expected


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_the_advisor_and_the_space_normalise_alike(changes: dict[str, Any], expected: dict[str, Any]) -> None:
    assert apply_change(STOCK, changes) == normalised(_values(changes))


@pytest.mark.parametrize("tokens", [0, None])
def test_a_method_without_draft_tokens_is_no_config_unless_the_caller_gives_some(tokens: int | None) -> None:
    values = _values({"speculative_method": "mtp", "num_speculative_tokens": tokens})
    with pytest.raises(ValidationError):
        normalised(values)
    assert normalised(values, draft_tokens=1).num_speculative_tokens == 1


def test_an_advisor_turning_a_method_on_starts_at_one_draft_token() -> None:
    assert apply_change(STOCK, {"speculative_method": "mtp"}).num_speculative_tokens == 1


def test_the_space_drops_a_method_it_gives_no_draft_tokens() -> None:
    space = SearchSpace.model_validate({"speculative_method": ["none", "mtp"], "max_num_seqs": [64, 128]})
    configs = list(space.raw_configs())
    assert {c.speculative_method for c in configs} == {"none"}
    assert sorted(c.max_num_seqs or 0 for c in configs) == [64, 128]


def test_an_invalid_advisor_change_names_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        apply_change(EngineConfig(), {"max_num_seqs": 0})
    assert err.value.field == "max_num_seqs"
