"""Reliability scenario: a later action of a cycle fails after earlier ones took effect (no effect lost)."""

from __future__ import annotations

from dataclasses import replace

from controller.decide import ScalingRules
from controller.domain.trial import TrialResult
from controller.ports import LoadTester, TrialRequest
from controller.testing.faults import ConflictBudget, ConflictingCluster
from tests.support.faults.world import Outcome, SimWorld


class CountingCanary:
    """Passes trials through and counts each one the canary is asked to run."""

    def __init__(self, inner: LoadTester) -> None:
        self.inner = inner
        self.requests: list[TrialRequest] = []

    def run(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        return self.inner.run(request)


def scenario_effects_kept(conflicts: int = 3, spike: float = 3.0) -> Outcome:
    """Traffic x``spike`` from the start, so the first tuning cycle decides its trials and then a scale-up of the
    breaching stable variant; that Scale fails with 409 ``conflicts`` times. The trials already run are kept and the
    next cycles retry only the Scale."""
    budget = ConflictBudget()
    canary: dict[str, CountingCanary] = {}

    def counting(inner: LoadTester) -> LoadTester:
        canary["c"] = CountingCanary(inner)
        return canary["c"]

    world = SimWorld(wrap_load_tester=counting, wrap_cluster=lambda c: ConflictingCluster(c, budget, events=False))
    world.rules = replace(world.rules, scaling=ScalingRules(min_replicas=1, max_replicas=16))
    world.reconciler = world.build_reconciler()
    world.fleet.faults.traffic_spike = spike
    state = {"armed": False}

    def before(w: SimWorld) -> None:
        if not state["armed"]:
            budget.remaining = conflicts
            state["armed"] = True

    world.run(4 + conflicts, before=before)
    asked = [r.config.key() for r in canary["c"].requests]
    recorded = [t.config.key() for t in world.trials()]
    kept = [r for r in world.records if any("done are kept" in x for x in r.reasons)]
    hit = kept[0] if kept else world.records[0]
    data = {
        "asked": asked,
        "recorded": recorded,
        "conflicted_actions": hit.actions,
        "kept_cycles": len(kept),
        "conflicts": list(budget.raised),
        "replicas": world.status.replicas,
        "world": world,
    }
    trials = hit.actions.count("RunTrial")
    return Outcome(
        scenario="later action fails",
        fault=(
            f"traffic x{spike:g} from the start: a tuning cycle runs {trials} trial(s), then its scale-up of stable "
            f"fails with 409 {conflicts} times"
        ),
        outcome=(
            f"the {trials} trial(s) kept while {len(kept)} cycle(s) retried only the Scale; folded once when it "
            f"held (replicas 1 -> {world.status.replicas})"
        ),
        exposure="none (the route untouched)",
        recovery=f"{len(kept)} cycle(s) of delay for the scale-up",
        lost=f"nothing: {len(asked)} trials asked of the canary, {len(recorded)} recorded",
        data=data,
    )
