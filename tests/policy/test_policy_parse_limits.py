"""Parse failures in a policy are refusals naming the source and line, never an exception of another kind: nesting
beyond :data:`MAX_POLICY_DEPTH`, aliases expanding beyond :data:`MAX_POLICY_NODES` or holding themselves."""

from __future__ import annotations

import pytest

from controller.policy.loading import MAX_POLICY_DEPTH, MAX_POLICY_NODES, PolicyError, parse_policy

pytestmark = pytest.mark.security

SOURCE = "configmap prod/tuning:policy.yaml"


def nested_lists(depth: int) -> str:
    """A policy whose ``space.max_num_seqs`` nests ``depth`` levels below the root in all."""
    inner = depth - 2  # the root mapping and ``space`` count as two
    return "space:\n  max_num_seqs: " + "[" * inner + "1" + "]" * inner


BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]" for p, n in zip("abcde", "bcdef", strict=True)]
)


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        pytest.param(nested_lists(MAX_POLICY_DEPTH + 1), 2, "nested more than 32 levels", id="one-too-deep"),
        pytest.param(nested_lists(500), 2, "nested more than 32 levels", id="500-deep"),
        pytest.param("a:\n" + "".join("  " * i + f"- k{i}:\n" for i in range(1, 200)), None, "nested", id="block"),
        pytest.param(BOMB, 5, f"expands to more than {MAX_POLICY_NODES} values", id="alias-bomb"),
        pytest.param("space: &s {max_num_seqs: [*s]}", 1, "alias that refers", id="self-alias"),
    ],
)
def test_a_document_no_parser_should_follow_is_a_refusal(text: str, line: int | None, why: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source=SOURCE)
    assert raised.value.path == SOURCE and why in str(raised.value)
    assert str(raised.value).startswith(f"{SOURCE}:")
    if line is not None:
        assert raised.value.line == line


def test_nesting_up_to_the_limit_reaches_validation() -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(nested_lists(MAX_POLICY_DEPTH), source=SOURCE)
    assert "nested" not in str(raised.value) and "space.max_num_seqs" in str(raised.value)
