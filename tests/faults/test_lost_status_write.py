"""An operator killed after acting but before its status write re-applies the same effect, idempotently."""

from __future__ import annotations

import pytest

from controller.domain.phases import Phase
from tests.support.faults import run_scenario

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("action", ["DeployCandidate", "SetWeights", "Rollback"])
def test_effects_reapplied_after_a_lost_status_write_converge_without_skipping_a_step(action: str) -> None:
    o = run_scenario(f"lost-write-{action}")
    d = o.data
    assert d["errors"] == [] and d["converged"], o.outcome
    weights = d["weights"]
    deduplicated = [w for i, w in enumerate(weights) if i == 0 or weights[i - 1] != w]
    if action == "Rollback":
        assert deduplicated == [5, 25, 0] and d["phase"] is Phase.OBSERVING
        assert weights.count(0) == 2  # the rollback's route write, applied twice
    else:
        assert deduplicated == [5, 25, 50, 100]
        assert d["active"].key() != "" and any(" promoted " in h for h in d["history"])
    if action == "SetWeights":
        assert weights == [5, 25, 25, 50, 100]  # the lost step is re-written once, not skipped or advanced twice
