"""Each default has one home: the decide layer's rules, the policy, the load tester's trial budget and the CRDs take
the tuning, trial and rollout defaults from ``controller/domain/{tuning,trial,rollout}_defaults.py``, so a test that
builds ``Rules`` directly runs under the defaults production uses. The approval rule is defined once
(``controller.domain.approval``)."""

from __future__ import annotations

import pytest

from controller.crd.models import TrialBudgetSpec, TunedServiceSpec
from controller.decide import RolloutRules, Rules, ScalingRules, TuningRules
from controller.domain import EngineConfig
from controller.domain.approval import ApprovalMode, needs_approval
from controller.policy import Policy
from controller.ports import TrialBudget

LOSSY = EngineConfig(kv_cache_dtype="fp8")
LOSSLESS = EngineConfig(max_num_seqs=128)


def test_the_rules_defaults_are_the_policys() -> None:
    from_policy = Rules.from_policy(Policy())
    assert from_policy.tuning == TuningRules()
    assert from_policy.rollout == RolloutRules()
    assert TuningRules().max_trials == Policy().trial_budget.max_trials == 16
    assert TuningRules().min_gain == 1.0 + Policy().min_gain
    assert TuningRules().approval == Policy().approval == "manual-for-lossy"


def test_the_trial_budget_defaults_agree() -> None:
    policy, port, spec = Policy().trial_budget, TrialBudget(), TrialBudgetSpec()
    assert policy.trial_duration_s == port.duration_s == spec.duration_seconds
    assert policy.warmup_s == port.warmup_s == spec.warmup_seconds
    assert policy.startup_timeout_s == port.startup_timeout_s == spec.startup_timeout_seconds
    assert port.max_requests == spec.max_requests


def test_the_spec_and_the_policy_default_to_the_same_approval() -> None:
    assert TunedServiceSpec.model_fields["approval_mode"].default == Policy().approval


@pytest.mark.parametrize(
    ("mode", "lossy", "waits"),
    [
        ("auto", False, False),
        ("auto", True, False),
        ("manual", False, True),
        ("manual", True, True),
        ("manual-for-lossy", False, False),
        ("manual-for-lossy", True, True),
    ],
)
def test_one_approval_rule(mode: ApprovalMode, lossy: bool, waits: bool) -> None:
    assert needs_approval(mode, lossy=lossy) is waits
    policy = Policy(approval=mode)
    config = LOSSY if lossy else LOSSLESS
    assert policy.is_lossy(config) is lossy
    assert policy.needs_approval(config) is waits


def test_the_scaling_defaults_are_the_policys() -> None:
    """The headroom, the scale-down stabilisation and the capacity probes' loop default in the policy's ``scaling``
    section (``controller/policy/scaling.py``); the decide layer's rules take theirs from there."""
    scaling = Policy().scaling
    rules = Rules.from_policy(Policy(), replicas=(1, 8))
    assert rules.scaling == ScalingRules(min_replicas=1, max_replicas=8)
    assert ScalingRules().headroom == scaling.headroom == 0.2
    assert ScalingRules().scale_down_stabilisation_s == scaling.scale_down_stabilisation_seconds == 900.0
    assert Rules().capacity_probe_loop == rules.capacity_probe_loop == scaling.capacity_probe_loop == "open"


def test_the_trial_budget_reaches_the_rules_once() -> None:
    """decide reads the trial budget from the rules alone: the round's trial count, its canary GPU-minutes and one
    trial's length, all from the policy's ``trial_budget``."""
    budget, tuning = Policy().trial_budget, Rules.from_policy(Policy()).tuning
    assert (tuning.max_trials, tuning.canary_gpu_minutes) == (budget.max_trials, budget.canary_gpu_minutes)
    assert (tuning.trial_duration_s, tuning.trial_warmup_s) == (budget.trial_duration_s, budget.warmup_s)
    assert tuning.trial_startup_timeout_s == budget.startup_timeout_s
