"""The reliability scenarios ``docs/reliability.md`` tabulates, run on a simulated world with the fault wrappers of
:mod:`controller.testing.faults`.

``python -m tests.support.faults --table`` runs every scenario and prints the markdown table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache, partial

from controller.testing.faults import CanaryFailure
from tests.support.faults.bad_inputs import (
    CR_CASES,
    POLICY_CASES,
    BadInputCase,
    operator_cycle,
    run_bad_input_cases,
    scenario_bad_inputs,
)
from tests.support.faults.effects import scenario_effects_kept
from tests.support.faults.rollout import (
    LOST_WRITE_ACTIONS,
    PHASE_SCRIPTS,
    PhaseScript,
    run_script,
    scenario_bad_config,
    scenario_lost_status_write,
    scenario_restart,
)
from tests.support.faults.scale import (
    scenario_api_outage_at_scale,
    scenario_leader_killed_at_scale,
    scenario_prometheus_slow_at_scale,
)
from tests.support.faults.scenarios import (
    CONFLICT_ARMS,
    scenario_advisor,
    scenario_canary,
    scenario_canary_gone,
    scenario_conflicts,
    scenario_drift,
    scenario_metrics_missing,
    scenario_metrics_observing,
    scenario_spike,
)
from tests.support.faults.world import CLEARLY_BAD, CycleRecord, Outcome, SimWorld, WorldSettings, world_policy

__all__ = [
    "CLEARLY_BAD",
    "CR_CASES",
    "PHASE_SCRIPTS",
    "POLICY_CASES",
    "SCENARIOS",
    "BadInputCase",
    "CycleRecord",
    "Outcome",
    "PhaseScript",
    "SimWorld",
    "WorldSettings",
    "operator_cycle",
    "render_table",
    "run_all",
    "run_bad_input_cases",
    "run_scenario",
    "run_script",
    "world_policy",
]

# ----- all of it -----------------------------------------------------------------------------------------------------
SCENARIOS: dict[str, Callable[[], Outcome]] = {
    "bad-config": scenario_bad_config,
    "bad-config-x3": partial(scenario_bad_config, CLEARLY_BAD),
    **{f"restart-{p.value}": partial(scenario_restart, p) for p in PHASE_SCRIPTS},
    **{f"lost-write-{a.split()[0]}": partial(scenario_lost_status_write, a) for a in LOST_WRITE_ACTIONS},
    "metrics-outage": lambda: scenario_metrics_missing("outage"),
    "metrics-nan": lambda: scenario_metrics_missing("nan"),
    "metrics-empty": lambda: scenario_metrics_missing("empty"),
    "metrics-mid-tuning": scenario_metrics_observing,
    "llm-down": lambda: scenario_advisor("llm-down"),
    "advisor-garbage": lambda: scenario_advisor("garbage"),
    "agent-llm-down": lambda: scenario_advisor("agent-llm-down"),
    "agent-garbage": lambda: scenario_advisor("agent-garbage"),
    "canary-crash-oom-timeout": lambda: scenario_canary(
        {1: CanaryFailure.CRASH, 2: CanaryFailure.OOM, 3: CanaryFailure.STARTUP_TIMEOUT},
        name="canary crash/OOM/timeout",
    ),
    "canary-gone": scenario_canary_gone,
    "traffic-spike": scenario_spike,
    **{f"conflicts-{arm}": partial(scenario_conflicts, arm) for arm in CONFLICT_ARMS},
    "effects-kept": scenario_effects_kept,
    "drift": scenario_drift,
    "bad-inputs": scenario_bad_inputs,
    "api-outage-at-scale": scenario_api_outage_at_scale,
    "leader-killed-at-scale": scenario_leader_killed_at_scale,
    "prometheus-slow-at-scale": scenario_prometheus_slow_at_scale,
}


@cache
def run_scenario(name: str) -> Outcome:
    return SCENARIOS[name]()


def run_all() -> list[Outcome]:
    return [run_scenario(name) for name in SCENARIOS]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


TABLE_HEADER = (
    "| scenario | fault injected | what the system did | exposure | recovery | what was lost |\n"
    "|---|---|---|---|---|---|\n"
)


def render_table(outcomes: Sequence[Outcome]) -> str:
    rows = [
        "| " + " | ".join(_cell(x) for x in (o.scenario, o.fault, o.outcome, o.exposure, o.recovery, o.lost)) + " |"
        for o in outcomes
    ]
    return TABLE_HEADER + "\n".join(rows) + "\n"
