"""The effect fold: how each effect changes the decided status (table-driven; pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.act import fold
from controller.act.effects import (
    ApprovalRequested,
    CandidateDeployed,
    Effect,
    EventFailed,
    EventRecorded,
    Notified,
    Promoted,
    RolledBack,
    Scaled,
    TrialRecorded,
    WeightsSet,
)
from controller.domain.actions import RunTrial
from controller.domain.config import STOCK, EngineConfig
from controller.domain.status import TargetStatus, TuningRound
from controller.domain.trial import TrialResult
from tests.support.builders import failed_trial, shape

A = EngineConfig(max_num_seqs=128)
B = EngineConfig(max_num_seqs=256)
SHAPE = shape(4.0, 16.0, 512, 128, cv=0.5)
ROUND = TuningRound(id="r", window="day", shape=SHAPE, started_at=datetime(2026, 11, 30, tzinfo=UTC), reason="x")


def result(config: EngineConfig) -> TrialResult:
    return failed_trial(config, SHAPE)


def recorded(config: EngineConfig, by: str = "optimizer", why: str = "try") -> TrialRecorded:
    return TrialRecorded(RunTrial(config, SHAPE, why, by), result(config))


IN_ROUND = TargetStatus(replicas=4, tuning=ROUND)
NO_ROUND = TargetStatus(replicas=4)


@pytest.mark.parametrize(
    ("start", "effects", "replicas", "trials", "keys", "proposers", "reasons"),
    [
        pytest.param(IN_ROUND, [], 4, [], (), (), (), id="nothing"),
        pytest.param(
            IN_ROUND,
            [
                WeightsSet(25),
                CandidateDeployed(A, 2),
                Promoted(A),
                Promoted(A, already=True),
                RolledBack(),
                Notified("x"),
                ApprovalRequested("r-1", 0),
                EventRecorded("Notify", warning=False),
                EventFailed("Notify", "boom"),
            ],
            4,
            [],
            (),
            (),
            (),
            id="no-status-effect",
        ),
        pytest.param(IN_ROUND, [Scaled("stable", 7)], 7, [], (), (), (), id="scale-stable-sets-replicas"),
        pytest.param(IN_ROUND, [Scaled("candidate", 3)], 4, [], (), (), (), id="scale-candidate-leaves-replicas"),
        pytest.param(IN_ROUND, [Scaled("stable", 7), Scaled("stable", 5)], 5, [], (), (), (), id="last-scale-wins"),
        pytest.param(
            IN_ROUND,
            [recorded(A, "agent", "why a"), EventRecorded("RunTrial", False), recorded(B, "baseline", "why b")],
            4,
            [A, B],
            (A.key(), B.key()),
            ("agent", "baseline"),
            ("why a", "why b"),
            id="trials-in-order-with-round-bookkeeping",
        ),
        pytest.param(NO_ROUND, [recorded(A)], 4, [A], None, None, None, id="trial-outside-a-round"),
    ],
)
def test_fold(
    start: TargetStatus,
    effects: list[Effect],
    replicas: int,
    trials: list[EngineConfig],
    keys: tuple[str, ...] | None,
    proposers: tuple[str, ...] | None,
    reasons: tuple[str, ...] | None,
) -> None:
    folded = fold(start, effects, keep_trials=200)
    assert folded.replicas == replicas
    assert [t.config for t in folded.trials] == trials
    if keys is None:
        assert folded.tuning is None
    else:
        assert folded.tuning is not None
        assert (folded.tuning.trial_keys, folded.tuning.trial_proposers, folded.tuning.trial_reasons) == (
            keys,
            proposers,
            reasons,
        )
    unchanged = {"replicas", "trials", "tuning"}
    assert folded.model_dump(exclude=unchanged) == start.model_dump(exclude=unchanged)


def test_fold_keeps_only_the_last_trials() -> None:
    start = TargetStatus(trials=(result(STOCK), result(A)))
    folded = fold(start, [recorded(B)], keep_trials=2)
    assert [t.config for t in folded.trials] == [A, B]


def test_fold_does_not_change_its_input() -> None:
    start = IN_ROUND
    fold(start, [recorded(A), Scaled("stable", 9)], keep_trials=200)
    assert start == IN_ROUND and start.tuning is not None and start.tuning.trial_keys == ()
