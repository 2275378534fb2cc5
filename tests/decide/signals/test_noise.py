"""Measured noise: each tuning round measures its baseline twice; the spread of such repeats is the noise figure
the optimizer's surrogate and the round's selection use instead of an assumed one."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from controller.decide import Rules, TuningRules
from controller.decide.search.candidates import CandidateSet, candidate_configs
from controller.decide.search.gp import GpSearch
from controller.decide.search.optimizer import OptimizerAdvisor
from controller.decide.signals import noise
from controller.domain import SLO, STOCK, EngineConfig, Phase, RunTrial, TargetStatus, TrialResult
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from tests.support.builders import failed_trial
from tests.support.optimizer_surface import POLICY
from tests.support.optimizer_surface import SHAPE as OPT_SHAPE
from tests.support.optimizer_surface import measured as opt_measured
from tests.support.planner import MTP1, NOON, SHAPE, measured, plan, tuning_status

TARGET = TargetRef("ns", "svc", "model")
OTHER = SHAPE.model_copy(update={"arrival_rate_rps": 40.0})


def _scaled(result: TrialResult, factor: float) -> TrialResult:
    return result.model_copy(
        update={
            "goodput_tokens_per_s": result.goodput_tokens_per_s * factor,
            "output_tokens_per_s": result.output_tokens_per_s * factor,
        }
    )


FAILED = failed_trial(STOCK, SHAPE, reason="crash")


@pytest.mark.parametrize(
    ("trials", "expected"),
    [
        pytest.param([], None, id="nothing"),
        pytest.param([measured(STOCK, 1000, SHAPE), measured(MTP1, 1200, SHAPE)], None, id="no-repeat"),
        pytest.param([measured(STOCK, 1000, SHAPE), measured(STOCK, 1000, OTHER)], None, id="same-config-other-shape"),
        pytest.param([measured(STOCK, 1000, SHAPE), FAILED], None, id="a-failed-repeat-says-nothing"),
        pytest.param([measured(STOCK, 1000, SHAPE), measured(STOCK, 1000, SHAPE)], (0.0, 1), id="identical"),
        pytest.param(
            [measured(STOCK, 1000, SHAPE), measured(STOCK, 1100, SHAPE)],
            (math.log(1.1) / math.sqrt(2), 1),
            id="one-pair",
        ),
        pytest.param(
            [
                measured(STOCK, 1000, SHAPE),
                measured(MTP1, 2000, SHAPE),
                measured(STOCK, 1100, SHAPE),
                measured(MTP1, 2000 * 1.1, SHAPE),
            ],
            (math.log(1.1) / math.sqrt(2), 2),
            id="two-pairs-pooled",
        ),
        pytest.param(
            [measured(STOCK, 1000, SHAPE), measured(STOCK, 1000, SHAPE), measured(STOCK, 1000 * math.e**0.3, SHAPE)],
            (math.sqrt((2 * 0.1**2 + 0.2**2) / 2), 2),
            id="three-of-one",
        ),
    ],
)
def test_noise_from_repeats(trials: list[TrialResult], expected: tuple[float, int] | None) -> None:
    got = noise.measured(trials)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert got[0] == pytest.approx(expected[0]) and got[1] == expected[1]


@pytest.mark.parametrize(
    ("measured_noise", "used"),
    [(None, noise.ASSUMED), (0.0, noise.MIN_NOISE), (0.07, 0.07), (3.0, noise.MAX_NOISE), (math.nan, noise.ASSUMED)],
)
def test_the_optimizer_uses_the_measured_figure_within_a_sane_range(measured_noise: float | None, used: float) -> None:
    assert noise.clamped(measured_noise) == pytest.approx(used)


@pytest.mark.parametrize(
    ("min_gain", "measured_noise", "required"),
    [
        (1.03, None, 1.03),  # nothing measured: the policy's threshold
        (1.03, 0.005, 1.03),  # quieter than the threshold
        (1.03, math.log(1.2) / math.sqrt(2), 1.2),  # one pair 20 % apart: a gain must beat their ratio
        (1.03, 5.0, math.exp(math.sqrt(2) * noise.MAX_NOISE)),  # capped
    ],
)
def test_a_winner_needs_a_gain_beyond_the_noise(min_gain: float, measured_noise: float | None, required: float) -> None:
    assert noise.required_gain(min_gain, measured_noise) == pytest.approx(required)


def _history(spread: float) -> tuple[TrialResult, ...]:
    configs = candidate_configs(POLICY)
    measured_configs = [configs[i] for i in (0, 40, 80, 120, 160)]
    trials = [opt_measured(c) for c in measured_configs if opt_measured(c).objective() > 0]
    return (*trials, _scaled(trials[0], spread))


def _context(history: tuple[TrialResult, ...]) -> AdvisorContext:
    return AdvisorContext(target=TARGET, shape=OPT_SHAPE, slo=SLO(), active=STOCK, history=history, max_proposals=2)


def test_the_optimizer_is_deterministic_for_a_seed() -> None:
    history = _history(1.05)
    first = OptimizerAdvisor(POLICY, seed=3).suggest(_context(history))
    again = OptimizerAdvisor(POLICY, seed=3).suggest(_context(history))
    assert first == again and len(first) == 2


def test_the_optimizer_feeds_the_measured_noise_to_its_surrogate() -> None:
    """Repeats 1 % apart and 10 % apart give different posteriors, each the one the surrogate gives when told
    that noise; without a repeat the assumed figure applies."""
    configs = candidate_configs(POLICY)
    search = GpSearch(CandidateSet(configs), seed=0)
    predicted: dict[float, float | None] = {}
    for spread in (1.01, 1.10, 1.40):
        history = _history(spread)
        got = OptimizerAdvisor(POLICY, seed=0).suggest(_context(history), n=1)[0]
        figure = noise.clamped(math.log(spread) / math.sqrt(2))
        # the repeated config enters the surrogate once, as the mean of its two measurements
        first, repeat = history[0], history[-1]
        observed = [(first.config, (first.objective() + repeat.objective()) / 2)]
        observed += [(t.config, t.objective()) for t in history[1:-1]]
        exclude = {t.config.key() for t in history} | {STOCK.key()}
        told = search.suggest(observed, exclude=exclude, n=1, noise=figure)[0]
        assert got.config == told.config and got.predicted == pytest.approx(told.predicted, rel=1e-9)
        predicted[spread] = got.predicted
    assert len({predicted[1.01], predicted[1.10], predicted[1.40]}) == 3
    plain = _history(1.0)[:-1]
    got = OptimizerAdvisor(POLICY, seed=0).suggest(_context(plain), n=1)[0]
    observed = [(t.config, t.objective()) for t in plain]
    exclude = {t.config.key() for t in plain} | {STOCK.key()}
    assert got == search.suggest(observed, exclude=exclude, n=1, noise=noise.ASSUMED)[0]
    assert got != search.suggest(observed, exclude=exclude, n=1, noise=noise.MAX_NOISE)[0]


def test_every_round_schedules_a_repeat_of_its_baseline() -> None:
    active = EngineConfig(max_num_seqs=512)
    d = plan(TargetStatus(active_config=active))
    runs = [a for a in d.actions if isinstance(a, RunTrial)]
    assert [(r.config, r.proposed_by, r.repeat) for r in runs] == [
        (active, "baseline", False),
        (STOCK, "baseline", False),
        (active, "repeat", True),
    ]
    assert len({r.shape for r in runs}) == 1


def test_the_round_keeps_its_measured_noise_in_status() -> None:
    status = tuning_status([measured(STOCK, 1000, SHAPE), measured(STOCK, 1100, SHAPE)], ["baseline", "repeat"])
    d = plan(status, rules=Rules(slo=SLO(ttft_seconds=2, tpot_seconds=0.1), tuning=TuningRules(max_trials=4)))
    assert d.status.noise is not None
    assert d.status.noise.relative == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert d.status.noise.repeats == 1 and d.status.noise.round_id == status.tuning.id  # type: ignore[union-attr]
    # it survives the round and a restart (a status round trip)
    restored = TargetStatus.model_validate_json(d.status.model_dump_json())
    assert restored.noise == d.status.noise


@pytest.mark.parametrize(
    ("repeat", "candidate", "rolled_out"),
    [
        pytest.param(1000, 1100, True, id="quiet-10pc-gain-wins"),
        pytest.param(1200, 1150, False, id="noisy-15pc-gain-inside-20pc-noise"),
        pytest.param(1200, 1300, True, id="noisy-30pc-gain-beyond-noise"),
    ],
)
def test_selection_does_not_call_a_winner_inside_the_noise(repeat: float, candidate: float, rolled_out: bool) -> None:
    # the baseline's latest measurement (the repeat) is what the candidate's gain is measured against
    status = tuning_status(
        [
            measured(STOCK, 1000, SHAPE),
            measured(STOCK, repeat, SHAPE),
            measured(MTP1, candidate * repeat / 1000, SHAPE),
        ],
        ["baseline", "repeat", "optimizer"],
    )
    d = plan(status, now=NOON + timedelta(minutes=1))
    assert (d.status.phase is Phase.ROLLING_OUT) is rolled_out
