"""The plan as a ShareGPT dataset for ``vllm bench serve``: the same requests as our client sends, in plan order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.trials.loadgen.replay import plan_requests
from controller.trials.loadgen.vllm_bench import OUTPUT_TOKEN, PROMPT_WORD, sharegpt_valid, write_sharegpt_dataset

SHAPE = TrafficShape(
    arrival_rate_rps=0,
    concurrency=4,
    prompt_tokens=LengthDistribution(mean=40, cv=0.5, maximum=120),
    output_tokens=LengthDistribution(mean=20, cv=0.5, maximum=60),
)


def _rows(path: Path) -> list[tuple[str, str, str]]:
    return [
        (r["id"], r["conversations"][0]["value"], r["conversations"][1]["value"]) for r in json.loads(path.read_text())
    ]


def test_default_prompts_repeat_one_word_per_planned_token(tmp_path: Path) -> None:
    plan = plan_requests(SHAPE, num_requests=12, seed=3)
    written = write_sharegpt_dataset(plan, tmp_path / "d.json")
    kept = [r for r in plan.requests if sharegpt_valid(r.prompt_tokens, r.max_tokens)]
    assert written == len(kept) and written > 0
    assert _rows(tmp_path / "d.json") == [
        (str(r.index), PROMPT_WORD * r.prompt_tokens, OUTPUT_TOKEN * r.max_tokens) for r in kept
    ]


def test_given_texts_replace_the_prompts_in_plan_order_and_filtered_requests_stay_aligned(tmp_path: Path) -> None:
    plan = plan_requests(SHAPE, num_requests=12, seed=3)
    texts = [f"text of request {r.index}" for r in plan.requests]
    write_sharegpt_dataset(plan, tmp_path / "d.json", prompt_texts=texts)
    rows = _rows(tmp_path / "d.json")
    kept = [r for r in plan.requests if sharegpt_valid(r.prompt_tokens, r.max_tokens)]
    assert [(i, p) for i, p, _ in rows] == [(str(r.index), f"text of request {r.index}") for r in kept]


def test_a_text_count_that_does_not_match_the_plan_is_refused(tmp_path: Path) -> None:
    plan = plan_requests(SHAPE, num_requests=5, seed=3)
    with pytest.raises(ValueError, match="prompt_texts has 4 texts for 5 planned requests"):
        write_sharegpt_dataset(plan, tmp_path / "d.json", prompt_texts=["x"] * 4)
    assert not (tmp_path / "d.json").exists()
