"""One recipe builds every control cycle (:func:`controller.cycle.cycle_for`).

Its rules come from the policy and the spec alone: the spec's windows and replica bounds, the policy's SLO, trial
budget, rollout, scaling headroom and capacity probes' loop. Every composition root (both operator backends, the
demo, the week bench) builds its cycle through it, and nothing else in ``controller/`` or ``bench/`` constructs a
:class:`~controller.reconcile.Reconciler`. The simulator backend honours the TunedService's ``spec.replicas`` and its
forecast setting: it manages the replicas of a TunedService whose spec bounds them, and leaves those of one that
sets no bounds as its fleet starts them.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from controller.adapters.simulated.fleet import SimulatedForecaster
from controller.clock import FakeClock
from controller.crd.models import parse_tuned_service
from controller.crd.tuned_service import ReplicaBounds
from controller.cycle import CycleSettings, CycleSpec, cycle_for
from controller.decide import DEFAULT_WINDOWS, DigestRules, ScalingRules
from controller.domain.observation import TargetRef
from controller.domain.traffic import TimeWindow
from controller.policy import parse_policy
from controller.reactor.settings import ConnectionSettings, OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend
from controller.reconcile import Ports
from tests.support.kube_api import running_kube_api

REPO = Path(__file__).resolve().parents[1]
ROOTS = (
    "controller/reactor/kubernetes_backend.py",
    "controller/reactor/simulator_backend.py",
    "controller/demo/run.py",
    "bench/week.py",
)
DAY = TimeWindow(name="day", start_hour=8, end_hour=20)
NIGHT = TimeWindow(name="night", start_hour=20, end_hour=8)
POLICY = parse_policy(
    "scaling: {headroom: 0.35, scale_down_stabilisation_seconds: 120, capacity_probe_loop: closed}\n"
    "rollout: {bake_seconds: 42, min_samples: 7}\n"
    "trial_budget: {max_trials: 5, canary_gpu_minutes: 30, trial_duration_s: 60, warmup_s: 5}\n"
)


class Untouched:
    """A port the recipe must not call while it builds the cycle."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"building the cycle used {name}")


def ports() -> Ports:
    return Ports(
        metrics=Untouched(),  # type: ignore[arg-type]
        load_tester=Untouched(),  # type: ignore[arg-type]
        router=Untouched(),  # type: ignore[arg-type]
        advisor=Untouched(),  # type: ignore[arg-type]
        notifier=Untouched(),  # type: ignore[arg-type]
        cluster=Untouched(),  # type: ignore[arg-type]
        clock=FakeClock(datetime(2026, 12, 1, tzinfo=UTC)),
    )


def called(path: Path, name: str) -> int:
    """How many calls of ``name`` (``name(...)`` or ``x.name(...)``) the module at ``path`` makes."""
    count = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == name) or (
                isinstance(func, ast.Attribute) and func.attr == name
            ):
                count += 1
    return count


def test_only_the_recipe_constructs_a_reconciler() -> None:
    modules = [*sorted((REPO / "controller").rglob("*.py")), *sorted((REPO / "bench").rglob("*.py"))]
    builders = [p.relative_to(REPO).as_posix() for p in modules if called(p, "Reconciler")]
    assert builders == ["controller/cycle.py"]


@pytest.mark.parametrize("root", ROOTS)
def test_every_composition_root_builds_its_cycle_through_the_recipe(root: str) -> None:
    assert called(REPO / root, "cycle_for") >= 1


def test_the_rules_come_from_the_policy_and_the_spec() -> None:
    spec = CycleSpec(windows=(NIGHT, DAY), replicas=ReplicaBounds(min_replicas=2, max_replicas=5))
    digest = DigestRules(hour=6)
    reconciler = cycle_for(spec, POLICY, CycleSettings(observe_window_s=120.0, digest=digest), ports())
    rules = reconciler.rules
    assert rules.scaling == ScalingRules(min_replicas=2, max_replicas=5, headroom=0.35, scale_down_stabilisation_s=120)
    assert rules.capacity_probe_loop == "closed"
    assert (rules.rollout.bake_s, rules.rollout.min_samples) == (42, 7)
    assert (rules.tuning.max_trials, rules.tuning.canary_gpu_minutes) == (5, 30)
    assert rules.windows == (NIGHT, DAY) and rules.digest is digest
    assert reconciler.observe_window_s == 120.0
    budget = reconciler.executor.trial_settings.budget  # what act asks of each trial comes from the same rules
    assert (budget.duration_s, budget.warmup_s) == (60, 5)


def test_without_replica_bounds_the_replicas_are_left_alone() -> None:
    rules = cycle_for(CycleSpec(), POLICY, CycleSettings(), ports()).rules
    assert rules.scaling is None and rules.windows == DEFAULT_WINDOWS
    assert rules.capacity_probe_loop == "closed"  # the probes' loop is the policy's either way


def tuned_service_body(replicas: dict[str, int], schedule: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workload": {"deployments": ["workhorse"], "service": "workhorse"},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpuType": "H200-141GB",
        "replicas": replicas,
    }
    if schedule is not None:
        spec["schedule"] = schedule
    return {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "metadata": {"name": "workhorse", "namespace": "prod", "uid": "uid-recipe", "generation": 1},
        "spec": spec,
    }


def test_a_tuned_services_spec_gives_its_windows_and_replica_bounds() -> None:
    schedule = [{"name": "day", "start_hour": 8, "end_hour": 20}, {"name": "night", "start_hour": 20, "end_hour": 8}]
    spec, _ = parse_tuned_service(tuned_service_body({"minReplicas": 2, "maxReplicas": 6}, schedule))
    rules = cycle_for(spec, POLICY, CycleSettings(), ports()).rules
    assert rules.scaling is not None and (rules.scaling.min_replicas, rules.scaling.max_replicas) == (2, 6)
    assert [w.name for w in rules.windows] == ["day", "night"]


def test_the_simulator_backend_honours_the_spec_replicas_and_the_forecast_setting(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text((REPO / "policies/v1/default.yaml").read_text())
    body = tuned_service_body({"minReplicas": 2, "maxReplicas": 5})
    spec, _ = parse_tuned_service(body)
    target = TargetRef("prod", "workhorse", "m")
    with running_kube_api() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = config.new_client_from_config(str(kubeconfig))
        settings = OperatorSettings(
            backend="simulator", connection=ConnectionSettings(kubeconfig=str(kubeconfig)), policy_dir=policies
        )
        forecast = SimulatorBackend(settings, api, background_trials=False).runtime(target, spec, body)
        plain = SimulatorBackend(settings, api, background_trials=False, forecast=False).runtime(target, spec, body)
    scaling = forecast.reconciler.rules.scaling
    assert scaling is not None and (scaling.min_replicas, scaling.max_replicas) == (2, 5)
    assert forecast.ports.cluster.ready_replicas(target, "stable") == 2  # the fleet starts at the bounds' floor
    forecaster = forecast.reconciler.ports.forecaster
    assert isinstance(forecaster, SimulatedForecaster)
    windows = forecast.reconciler.rules.windows
    shapes = forecaster.window_shapes(target, windows=windows, now=forecast.ports.clock.now())
    assert set(shapes) == {w.name for w in windows}  # a busy-hour shape for every window of the cycle
    assert plain.reconciler.ports.forecaster is None
    assert plain.reconciler.rules.scaling == scaling


def test_the_simulator_backend_leaves_the_replicas_alone_when_the_spec_bounds_none(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text((REPO / "policies/v1/default.yaml").read_text())
    body = tuned_service_body({})
    del body["spec"]["replicas"]
    spec, _ = parse_tuned_service(body)
    with running_kube_api() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = config.new_client_from_config(str(kubeconfig))
        settings = OperatorSettings(
            backend="simulator", connection=ConnectionSettings(kubeconfig=str(kubeconfig)), policy_dir=policies
        )
        runtime = SimulatorBackend(settings, api, background_trials=False).runtime(
            TargetRef("prod", "w", "m"), spec, body
        )
    assert runtime.reconciler.rules.scaling is None
