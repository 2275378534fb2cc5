"""The phase transition table: every listed edge is allowed, everything else raises."""

from __future__ import annotations

import itertools

import pytest

from controller.domain.phases import VALID_TRANSITIONS, Phase, transition
from controller.errors import InvalidTransition


@pytest.mark.parametrize(("current", "target"), list(itertools.product(Phase, Phase)))
def test_transition_table(current: Phase, target: Phase) -> None:
    if target in VALID_TRANSITIONS[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition, match=f"{current.value} -> {target.value}"):
            transition(current, target)


def test_every_phase_is_reachable_and_has_an_exit() -> None:
    reachable = {t for targets in VALID_TRANSITIONS.values() for t in targets}
    assert reachable == set(Phase)
    assert all(VALID_TRANSITIONS[p] for p in Phase)
