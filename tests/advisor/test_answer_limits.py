"""An answer cannot wedge a cycle: whatever the chat model returns (nested brackets deep enough to blow the parser's
recursion, an answer of hundreds of kilobytes, fences that made the old pattern backtrack), the agent calls it
garbage and the optimizer proposes instead; no exception leaves the advisor."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from controller.advisor import AgentAdvisor
from controller.advisor.schema import MAX_ANSWER_CHARS, MAX_ANSWER_DEPTH, extract_json, nesting_depth, parse_answer
from controller.advisor.scripted import ScriptedChatModel
from controller.domain.proposal import AdvisorContext
from controller.errors import InvalidInput
from controller.policy import Policy

pytestmark = pytest.mark.security

MakeCtx = Callable[..., AdvisorContext]

GOOD = json.dumps(
    {
        "action": "propose",
        "hypothesis": "batch is too small",
        "proposals": [{"base": "active", "changes": {"max_num_seqs": 256}, "rationale": "more streams"}],
    }
)

#: (case, answer, what the fallback reason says)
HOSTILE = [
    ("nested-lists-2kb", '{"proposals": ' + "[" * 1024 + "]" * 1024 + "}", "nests 1025 levels"),
    ("nested-in-a-field", '{"action": "propose", "hypothesis": ' + "[" * 999 + "]" * 999 + "}", "nests 1000 levels"),
    ("nested-objects", '{"a":' * 1024 + "1" + "}" * 1024, "nests 1024 levels"),
    ("fenced-nesting", "```json\n{" + '"x":[' * 1000 + "]" * 1000 + "}\n```", "nests 1001 levels"),
    ("144kb-of-fences", "```{" * 36_000, "144000 characters long"),
    ("over-the-cap", "x" * MAX_ANSWER_CHARS + GOOD, "characters long"),
]


@pytest.mark.parametrize(("answer", "why"), [pytest.param(a, w, id=c) for c, a, w in HOSTILE])
def test_a_hostile_answer_is_garbage_and_the_optimizer_proposes(
    policy: Policy, make_context: MakeCtx, answer: str, why: str
) -> None:
    ctx = make_context(n=1)
    result = AgentAdvisor(policy, chat_model=ScriptedChatModel(script=[answer])).advise(ctx)
    assert result.proposed_by == "optimizer"
    assert "garbage" in result.fallback_reason and why in result.fallback_reason
    assert result.proposals and all(p.proposed_by == "optimizer" for p in result.proposals)


@pytest.mark.parametrize(("answer", "why"), [pytest.param(a, w, id=c) for c, a, w in HOSTILE])
def test_parse_answer_only_ever_raises_invalid_input(answer: str, why: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_answer(answer)
    assert why in str(raised.value) and raised.value.source == "llm"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(f"Here you go:\n```json\n{GOOD}\n```\nthanks", GOOD, id="json-fence"),
        pytest.param(f"```\n{GOOD}\n```", GOOD, id="plain-fence"),
        pytest.param(f"```python\nx = 1\n```\nthen\n```json\n{GOOD}\n```", GOOD, id="second-fence"),
        pytest.param(f"I propose {GOOD} as asked", GOOD, id="no-fence"),
        pytest.param("```{ not closed" + GOOD, "{ not closed" + GOOD, id="unclosed-fence"),
    ],
)
def test_the_fence_scan_finds_the_object(text: str, expected: str) -> None:
    assert extract_json(text) == expected


@pytest.mark.timeout(2)  # a guard only: one pass takes milliseconds; the old backtracking pattern took seconds here
def test_the_fence_scan_is_one_pass_at_the_cap() -> None:
    worst = ("```{" * (MAX_ANSWER_CHARS // 4))[:MAX_ANSWER_CHARS]
    with pytest.raises(InvalidInput):
        parse_answer(worst)
    assert extract_json(worst + "}") == worst[3:] + "}"  # no fenced object: first "{" to last "}"


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        ("{}", 1),
        ('{"a": [1, {"b": 2}]}', 3),
        ('{"a": "[[[[{{{{"}', 1),  # brackets inside strings do not count
        ('{"a": "quote \\" [[["}', 1),
        ("[" * 100, 100),
    ],
)
def test_nesting_depth(raw: str, depth: int) -> None:
    assert nesting_depth(raw) == depth
    assert MAX_ANSWER_DEPTH >= 3  # an answer, its proposals, their changes
