"""Row "later action fails": trials run before a failing Scale are kept, the Scale alone is retried, nothing twice."""

from __future__ import annotations

import pytest

from tests.support.faults import run_scenario

pytestmark = pytest.mark.faults


def test_trials_before_a_failing_scale_are_kept_and_only_the_scale_is_retried() -> None:
    o = run_scenario("effects-kept")
    d = o.data
    assert d["conflicted_actions"] == ("RunTrial", "RunTrial", "Scale")
    assert d["conflicts"] == ["scale stable"] * 3
    assert d["kept_cycles"] == 3
    assert d["asked"] == d["recorded"]  # every trial the canary ran is in status, and none ran twice
    assert d["replicas"] > 1  # the scale-up held on its fourth try
