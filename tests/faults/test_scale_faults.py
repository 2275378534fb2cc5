"""Rows at fleet scale: the API answering 429/500 for a minute over 500 targets, the leader killed with 50 trials
queued, Prometheus slow for five minutes. Each compares every target with the same run without the fault."""

from __future__ import annotations

import pytest

from tests.support.faults import run_scenario

pytestmark = pytest.mark.faults


def test_a_minute_of_429_and_500_loses_nothing_and_applies_nothing_twice_over_500_targets() -> None:
    d = run_scenario("api-outage-at-scale").data
    assert d["targets_hit"] == 500  # every target's status patch in that minute was refused
    assert d["answered"][429] > 0 and d["answered"][500] > 0  # the writes of the targets in flight were answered
    assert all(d["same"])  # each target deployed, promoted, retired and measured what it did without the outage
    assert d["lost"] == 0 and d["twice"] == 0
    assert d["steady_writes"] == 0  # the tuned, idle targets wrote nothing to production
    assert d["promoted"] == d["in_flight"] == 10
    assert max(d["recovered_cycles"]) == 1  # every status written again the cycle after the outage


def test_a_leader_killed_with_50_trials_queued_measures_each_once_and_promotes_the_same() -> None:
    d = run_scenario("leader-killed-at-scale").data
    assert d["queued"] == 50 and d["restarts"] == 50
    assert d["missing"] == 0  # every trial the round needed was measured
    assert d["measured_twice"] == 0  # those measured before the kill came from the trial cache
    assert d["same"] == 50 and d["promoted"] == 50


def test_a_slow_prometheus_lengthens_cycles_only_while_slow_and_changes_no_outcome() -> None:
    d = run_scenario("prometheus-slow-at-scale").data
    assert d["queries_per_target_cycle"] == 1.0
    assert d["slow_queries"] > 0
    assert d["longest_extra_s"] == 2.0  # one slow query per cycle
    assert d["last_cycle_extra_s"] == 0.0  # back to normal once Prometheus answered fast
    assert all(d["same"]) and d["promoted"] == 10
