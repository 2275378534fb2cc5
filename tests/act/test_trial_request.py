"""A decided trial reaches the load tester as decided: its config, shape and loop, why it was decided and on whose
proposal (the Trial CR's ``spec.reason`` and ``spec.proposedBy``), with the target's SLO, budget and seed."""

from __future__ import annotations

from controller.act.context import TrialSettings
from controller.act.trials import request_for
from controller.domain import SLO, EngineConfig, TargetRef
from controller.domain.actions import RunTrial
from controller.ports import TrialBudget
from tests.support.builders import shape

SHAPE = shape(2.0, 8, 512, 128)
TARGET = TargetRef(namespace="prod", name="workhorse", model="m")


def test_the_request_carries_the_reason_and_the_proposer() -> None:
    settings = TrialSettings(slo=SLO(ttft_seconds=1.0), budget=TrialBudget(duration_s=60, warmup_s=5), seed=11)
    action = RunTrial(
        EngineConfig(max_num_seqs=96),
        SHAPE,
        "trial 3/8: the agent expects 12% more goodput",
        "agent-qwen",
        loop="open",
    )
    request = request_for(action, TARGET, settings)
    assert (request.reason, request.proposed_by) == ("trial 3/8: the agent expects 12% more goodput", "agent-qwen")
    assert (request.config, request.shape, request.loop, request.fresh) == (action.config, SHAPE, "open", False)
    assert (request.slo, request.seed) == (settings.slo, 11)
    assert request.budget == settings.budget.for_shape(SHAPE)


def test_a_repeat_is_measured_afresh_and_says_who_asked() -> None:
    settings = TrialSettings(slo=SLO(), budget=TrialBudget())
    action = RunTrial(EngineConfig(), SHAPE, "tuning: stock again, to measure the noise", "repeat", repeat=True)
    request = request_for(action, TARGET, settings)
    assert request.fresh and request.proposed_by == "repeat"
