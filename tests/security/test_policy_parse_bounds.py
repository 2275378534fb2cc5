"""Reading a tenant's policy is bounded by the limits, not by the text: a text over the byte cap is refused before
it is parsed, and the composer stops at the first node past the node cap, so a document under every other limit
(no alias, nesting within 32 levels, under a ConfigMap's 1 MiB) costs at most what the caps allow. The refusal says
which bound was exceeded (``PolicyError.limit``), never "through aliases" where there is none.

Memory is measured with tracemalloc (the peak of what Python allocated while parsing), never with time."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.errors import InvalidInput
from controller.policy.loading import (
    MAX_POLICY_BYTES,
    MAX_POLICY_NODES,
    PolicyError,
    load_policy,
    parse_policy,
)
from controller.reactor.settings import OperatorSettings

pytestmark = pytest.mark.security

SOURCE = "configmap prod/tuning:policy.yaml"
MIB = 1024 * 1024
#: 16,390 lists nested 30 deep (a root list and 29 more), one per line: no alias, within the nesting limit, under
#: a ConfigMap's 1 MiB. Before the node cap, PyYAML composed all 491,700 nodes (519 MiB) before anything refused it.
DEEP = "".join("- " + "[" * 29 + "]" * 29 + "\n" for _ in range(16_390))
#: 333,000 empty lists in one flat list: 999,001 bytes (296 MiB composed before the node cap).
FLAT = "[" + ",".join(["[]"] * 333_000) + "]"


def peak_of(work: Callable[[], object]) -> tuple[BaseException | None, int]:
    """What ``work`` raised and the peak bytes Python allocated while it ran."""
    tracemalloc.start()
    try:
        work()
    except Exception as exc:
        raised: BaseException | None = exc
    else:
        raised = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return raised, peak


def test_the_documents_are_under_every_other_limit() -> None:
    assert len(DEEP.encode()) < MIB and len(FLAT.encode()) < MIB
    assert "&" not in DEEP + FLAT and "*" not in DEEP + FLAT  # no anchor, no alias


@pytest.mark.parametrize("text", [DEEP, FLAT], ids=["16390-x-30-deep", "333000-flat"])
def test_a_text_over_the_byte_cap_is_refused_before_it_is_parsed(text: str) -> None:
    raised, peak = peak_of(lambda: parse_policy(text, source=SOURCE))
    assert isinstance(raised, PolicyError)
    assert (raised.limit, raised.field, raised.path) == ("bytes", "", SOURCE)
    assert f"{len(text.encode()):,} bytes" in str(raised) and f"{MAX_POLICY_BYTES:,}" in str(raised)
    assert peak < MIB  # nothing was composed


@pytest.mark.parametrize("text", [DEEP, FLAT], ids=["16390-x-30-deep", "333000-flat"])
def test_with_the_cap_at_a_configmaps_size_the_composer_stops_at_the_node_cap(text: str) -> None:
    raised, peak = peak_of(lambda: parse_policy(text, source=SOURCE, max_bytes=MIB))
    assert isinstance(raised, PolicyError)
    assert raised.limit == "nodes"
    assert f"more than {MAX_POLICY_NODES:,} nodes" in str(raised) and "alias" not in str(raised)
    assert raised.line is not None and str(raised).startswith(f"{SOURCE}:{raised.line}:")
    assert peak < 32 * MIB  # 519 MiB and 296 MiB when every node was composed first


def node_count_text(nodes: int) -> str:
    """A policy of exactly ``nodes`` nodes: the root mapping, ``space`` and its mapping, ``max_num_seqs`` and its
    list (five), and that many values in the list."""
    return "space:\n  max_num_seqs: [" + ", ".join(["8"] * (nodes - 5)) + "]\n"


def test_the_node_cap_counts_every_node_and_no_more() -> None:
    at_cap, over = node_count_text(MAX_POLICY_NODES), node_count_text(MAX_POLICY_NODES + 1)
    assert len(over.encode()) < MAX_POLICY_BYTES  # the node cap binds under the default byte cap
    assert parse_policy(at_cap, source=SOURCE).space.product_size() >= 1  # composed whole, validated, accepted
    with pytest.raises(PolicyError) as past:
        parse_policy(over, source=SOURCE)
    assert (past.value.limit, past.value.field) == ("nodes", "space.max_num_seqs")


def test_aliases_are_named_only_when_they_are_what_exceeds() -> None:
    bomb = "\n".join(
        ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
        + [f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]" for p, n in zip("abcde", "bcdef", strict=True)]
    )
    with pytest.raises(PolicyError) as raised:
        parse_policy(bomb, source=SOURCE)
    assert raised.value.limit == "aliases" and "through aliases" in str(raised.value)


def test_the_byte_cap_counts_bytes_not_characters() -> None:
    text = "description: " + "\u00e9" * (MAX_POLICY_BYTES // 2 + 1) + "\n"  # two bytes each
    assert len(text) < MAX_POLICY_BYTES < len(text.encode())
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source=SOURCE)
    assert raised.value.limit == "bytes"


def test_a_preset_file_is_read_no_further_than_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(FLAT)
    raised, peak = peak_of(lambda: load_policy(path))
    assert isinstance(raised, PolicyError) and raised.limit == "bytes"
    assert peak < MIB  # the file was read up to the cap, not whole


def test_a_policy_under_the_caps_still_loads() -> None:
    policy = parse_policy("name: small\nspace:\n  max_num_seqs: [64, 128]\n", source=SOURCE)
    assert policy.name == "small"


SETTINGS = [
    # (env value, bytes or the refusal)
    (None, MAX_POLICY_BYTES),
    ("131072", 131072),
    ("1048576", MIB),
    ("1024", 1024),
    ("1023", "must be a whole number of bytes from 1024 to 1048576"),
    ("1048577", "must be a whole number of bytes from 1024 to 1048576"),
    ("2048.5", "must be a whole number of bytes from 1024 to 1048576"),
    ("lots", "must be a number"),
]


@pytest.mark.parametrize(("raw", "expected"), SETTINGS)
def test_the_byte_cap_setting_is_bounded_by_a_configmaps_size(raw: str | None, expected: int | str) -> None:
    env = {} if raw is None else {"SHIFTLIGHT_POLICY_MAX_BYTES": raw}
    if isinstance(expected, int):
        assert OperatorSettings.from_env(env).policy_max_bytes == expected
    else:
        with pytest.raises(InvalidInput, match=expected) as info:
            OperatorSettings.from_env(env)
        assert info.value.field == "SHIFTLIGHT_POLICY_MAX_BYTES"
