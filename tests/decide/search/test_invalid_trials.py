"""An ``invalid`` trial (the load generator did not keep its plan) is neither a measurement nor an infeasible config:
it never becomes the leader or a candidate, never holds a probed capacity, and the optimizer does not learn from
it, whatever numbers it carries."""

from __future__ import annotations

import pytest

from controller.decide.capacity.sizing import holds
from controller.decide.outcome import measured
from controller.decide.search.candidates import candidate_configs
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.decide.tuning.probe import held_loads
from controller.decide.tuning.selection import best_trial
from controller.domain import SLO, STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.trial import TrialResult, TrialStatus
from controller.policy import parse_policy
from tests.support import builders
from tests.support.optimizer_space import MTP_SPACE

SLO_ = SLO(ttft_seconds=1.0, tpot_seconds=0.05)
SHAPE = builders.shape(4.0, 16.0, 512, 128, cv=0.5)
FAST = EngineConfig(max_num_seqs=512)
SLOW = EngineConfig(max_num_seqs=64)
REASON = "the load generator did not keep its plan: loop-stalled: the client's event loop stopped for 1.00 s at once"


def trial(config: EngineConfig, goodput: float, status: TrialStatus = TrialStatus.MEASURED) -> TrialResult:
    return builders.trial(
        config,
        SHAPE,
        slo=SLO_,
        status=status,
        reason={TrialStatus.INVALID: REASON, TrialStatus.FAILED: "no request completed"}.get(
            status, "CUDA out of memory" if status is TrialStatus.INFEASIBLE else ""
        ),
        goodput=goodput,
        ttft=(0.1, 0.2, 0.3),
        tpot=(0.01, 0.02, 0.03),
        completed=500,
        total_tokens_per_s=goodput * 5,
        goodput_rps=4.0,
    )


def test_an_invalid_trial_must_say_why() -> None:
    with pytest.raises(ValueError, match="invalid trial must say why"):
        TrialResult.model_validate({**trial(FAST, 9000.0).model_dump(), "status": "invalid", "reason": ""})


# (trials, the config best_trial must pick or None): the invalid trial has by far the best numbers
LEADER_CASES = [
    ([trial(FAST, 9000.0, TrialStatus.INVALID)], None),
    ([trial(SLOW, 1000.0), trial(FAST, 9000.0, TrialStatus.INVALID)], SLOW),
    ([trial(FAST, 9000.0, TrialStatus.INVALID), trial(SLOW, 1000.0), trial(STOCK, 800.0)], SLOW),
    ([trial(STOCK, 800.0), trial(FAST, 9000.0, TrialStatus.INVALID), trial(FAST, 900.0)], FAST),
]


@pytest.mark.parametrize(("trials", "leader"), LEADER_CASES)
def test_an_invalid_trial_never_leads(trials: list[TrialResult], leader: EngineConfig | None) -> None:
    best = best_trial(trials)
    assert (best.config if best else None) == leader
    assert best is None or best.status is TrialStatus.MEASURED


@pytest.mark.parametrize("keeps_up", [False, True])
def test_an_invalid_probe_holds_no_capacity(keeps_up: bool) -> None:
    bad = trial(FAST, 9000.0, TrialStatus.INVALID)
    assert not bad.ok and not bad.meets_slo() and bad.objective() == 0.0
    assert not holds(bad, keeps_up=keeps_up)
    assert holds(trial(FAST, 9000.0), keeps_up=keeps_up)


POLICY = parse_policy(MTP_SPACE + "  max_num_seqs: [128, 256, 512]\n  max_num_batched_tokens: [4096, 8192, 16384]\n")


def test_the_optimizer_does_not_learn_from_an_invalid_trial() -> None:
    """The same proposal as when that config was merely excluded (here: the active one): an invalid trial's zero
    goodput is not taken for a bad config."""
    configs = candidate_configs(POLICY)
    stock = configs[0]
    history = tuple(trial(c, 1000.0 + 100 * i) for i, c in enumerate(configs[:4]))
    invalid = configs[6]
    target = TargetRef("ml", "chat", "llama-3.1-8b")
    with_invalid = AdvisorContext(
        target, SHAPE, SLO_, stock, (*history, trial(invalid, 9000.0, TrialStatus.INVALID)), max_proposals=3
    )
    excluded = AdvisorContext(target, SHAPE, SLO_, invalid, history, max_proposals=3)
    picks = [p.config for p in OptimizerAdvisor(POLICY, seed=3).propose(with_invalid)]
    assert picks == [p.config for p in OptimizerAdvisor(POLICY, seed=3).propose(excluded)]


# (the probed loads, whether the probe was closed loop, the (load, held) points the bracket search may use)
HELD_CASES = [
    ([(1.0, trial(FAST, 9000.0)), (2.0, trial(FAST, 9000.0, TrialStatus.INVALID))], True, [(1.0, True)]),
    ([(1.0, trial(FAST, 9000.0)), (2.0, trial(FAST, 0.0, TrialStatus.FAILED))], True, [(1.0, True), (2.0, False)]),
    ([(2.0, trial(FAST, 9000.0, TrialStatus.INVALID)), (4.0, trial(FAST, 9000.0))], False, [(4.0, True)]),
]


@pytest.mark.parametrize(("probed", "closed", "points"), HELD_CASES)
def test_an_invalid_probe_is_neither_a_held_nor_a_missed_load(
    probed: list[tuple[float, TrialResult]], closed: bool, points: list[tuple[float, bool]]
) -> None:
    assert held_loads(probed, closed=closed) == points


@pytest.mark.parametrize(
    ("status", "is_measurement"),
    [
        (TrialStatus.MEASURED, True),
        (TrialStatus.REJECTED, True),
        (TrialStatus.INFEASIBLE, True),
        (TrialStatus.FAILED, False),
        (TrialStatus.INVALID, False),
    ],
)
def test_a_round_of_invalid_trials_measured_nothing(status: TrialStatus, is_measurement: bool) -> None:
    """A round whose trials are all invalid is paused as one where the canary could not measure anything, not
    retried at a lighter load as if the configs had missed the SLO."""
    assert measured(trial(FAST, 9000.0, status)) is is_measurement
