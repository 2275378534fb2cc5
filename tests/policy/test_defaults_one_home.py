"""Each default has one home: the decide layer's rules, the policy, the load tester's trial budget and the CRDs take
the tuning, trial and rollout defaults from ``controller/domain/{tuning,trial,rollout}_defaults.py``, so a test that
builds ``Rules`` directly runs under the defaults production uses. The approval rule is defined once
(``controller.domain.approval``)."""

from __future__ import annotations

import pytest

from controller.crd.models import TrialBudgetSpec, TunedServiceSpec
from controller.decide import RolloutRules, Rules, TuningRules
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
