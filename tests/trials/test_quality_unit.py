"""Quality-gate arithmetic (the real-engine check is in test_vllm_trials.py)."""

from __future__ import annotations

import pytest

from controller.trials.verdict.quality import Generation, compare, fixed_prompts


def test_identical_runs_match_exactly() -> None:
    g = [Generation((1, 2, 3), (-0.1, -0.2, -0.3)), Generation((4, 5), (-1.0, -2.0))]
    assert compare(g, g) == (1.0, 0.0)


def test_divergence_counts_agreeing_positions_and_the_first_difference() -> None:
    base = [Generation((1, 2, 3, 4), (-1.0, -1.0, -1.0, -1.0)), Generation((7, 8), (-0.5, -0.5))]
    cand = [Generation((1, 2, 9, 9), (-1.5, -1.0, -3.0, -9.0)), Generation((7, 8), (-0.5, -0.5))]
    exact, div = compare(base, cand)
    assert exact == 0.5
    # prompt 1: positions 0..2 -> |0.5| + 0 + |2.0| over 3; prompt 2: 0
    assert div == pytest.approx(((0.5 + 0 + 2.0) / 3 + 0) / 2)


def test_prompt_set_is_fixed() -> None:
    assert fixed_prompts(4, 8) == fixed_prompts(4, 8)
    assert len(fixed_prompts(4, 8)[0]) == 8
    with pytest.raises(ValueError):
        compare([], [])
