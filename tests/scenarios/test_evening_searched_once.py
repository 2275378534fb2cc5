"""Scenario: three evenings whose traffic is chat until 20:30 and long documents after, every day alike. The
evening window holds one config entry, so each change of shape reads as drift from the entry's shape and starts a
re-tune: searched on the documents at 20:30, on the chat again at 18:00 the next day, on the documents again that
night, every day, while the configs measured on both shapes are the same each time. Each re-search repeats the
measurements of one made before, and within a search the advisor goes on proposing configs it expects to do worse
than the one measured best. Canary trials cost GPU time: a window back on a shape it was searched on reuses that
search, and a search stops when its next trial is not expected to pay for itself. Clock injected (a fake clock,
one decision every 5 minutes through each evening), trials answered by a fake canary."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from controller import decide
from controller.act.effects import TrialRecorded
from controller.act.fold import fold
from controller.clock import FakeClock
from controller.decide import Rules, TuningRules
from controller.domain.actions import RunTrial
from controller.domain.config import EngineConfig
from controller.domain.observation import Observation
from controller.domain.proposal import Proposal
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.domain.trial import TrialResult
from tests.support import builders
from tests.support.builders import scheduled, shape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=18)
EVENING = TimeWindow(name="evening", start_hour=18, end_hour=24)
FIRST_EVENING = datetime(2026, 11, 30, 18, 0, tzinfo=UTC)
CYCLE_S = 300.0
ACTIVE = EngineConfig(max_num_seqs=128)
SPACE = (
    EngineConfig(max_num_seqs=64),
    EngineConfig(max_num_seqs=256),
    EngineConfig(max_num_batched_tokens=4096),
    EngineConfig(max_num_batched_tokens=16384),
    EngineConfig(speculative_method="ngram", num_speculative_tokens=4),
)
CHAT = shape(2.0, 32, 1024, 384)
DOCUMENTS = shape(0.5, 16, 12000, 512, repetitiveness=0.8)
RULES = Rules(
    slo=SLO(ttft_seconds=2, tpot_seconds=0.1),
    tuning=TuningRules(max_trials=8, trials_per_cycle=2),
    windows=(NIGHT, DAY, EVENING),
)


def truth(config: EngineConfig, shape: TrafficShape) -> float:
    """Goodput tok/s on the fake canary: the active config is the best on both shapes."""
    base = 1000.0 if shape.prompt_tokens.mean < 4000 else 400.0
    if config.key() == ACTIVE.key():
        return base
    rank = next(i for i, c in enumerate(SPACE) if c.key() == config.key()) if config in SPACE else 0
    return base * (0.7 + 0.05 * rank)


def canary(action: RunTrial) -> TrialResult:
    goodput = truth(action.config, action.shape)
    return builders.trial(
        action.config,
        action.shape,
        slo=RULES.slo,
        goodput=goodput,
        goodput_rps=action.shape.arrival_rate_rps,
        duration_s=120.0,
    )


def advisor(status: TargetStatus) -> tuple[Proposal, ...]:
    """An advisor that knows the surface: each untried config with the gain it really has over the best measured."""
    round_ = status.tuning
    if round_ is None:
        return ()
    mine = [t for t in status.trials if t.shape == round_.shape and t.config.key() in set(round_.trial_keys)]
    best = max((t.objective() for t in mine), default=0.0)
    tried = set(round_.trial_keys)
    return tuple(
        Proposal(c, "knows the surface", "optimizer", expected_gain=truth(c, round_.shape) / best - 1 if best else None)
        for c in SPACE
        if c.key() not in tried
    )


def evenings(days: int) -> tuple[Counter[str], Counter[str]]:
    """Trials run per evening (by date) and the decisions' reason codes over ``days`` evenings."""
    clock = FakeClock(FIRST_EVENING)
    chat_entry = scheduled(
        "evening",
        ACTIVE,
        CHAT,
        goodput=1000,
        stock_goodput=800,
        reason="measured",
        tuned_at=FIRST_EVENING - timedelta(days=1),
    )
    status = TargetStatus(active_config=ACTIVE, replicas=1, schedule=(chat_entry,), window="evening")
    trials: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    for day in range(days):
        clock.set(FIRST_EVENING + timedelta(days=day))
        while clock.now() < FIRST_EVENING + timedelta(days=day, hours=6) - timedelta(seconds=CYCLE_S):
            clock.advance(CYCLE_S)
            now = clock.now()
            shape = CHAT if now.hour * 60 + now.minute <= 20 * 60 + 30 else DOCUMENTS
            decision = decide.plan(
                status=status,
                observation=Observation(target="ns/m", start=now - timedelta(seconds=CYCLE_S), end=now, shape=shape),
                observe_error=None,
                proposals=advisor(status),
                rules=RULES,
                now=now,
            )
            runs = [a for a in decision.actions if isinstance(a, RunTrial)]
            status = fold(decision.status, [TrialRecorded(a, canary(a)) for a in runs], keep_trials=200)
            trials[f"{now:%a}"] += len(runs)
            codes.update(decision.codes)
    return trials, codes


def test_an_evening_back_on_shapes_it_was_searched_on_runs_no_trial() -> None:
    trials, codes = evenings(3)
    # the first evening searches the documents once: its opening trials (baseline, stock, repeat) and no
    # proposal, since none is expected to beat the config measured best
    assert trials["Mon"] == 3
    assert codes["search-stopped"] == 1
    # the next evenings' traffic is on the shapes searched before: nothing is measured again
    assert trials["Tue"] == 0
    assert trials["Wed"] == 0
    assert codes["search-reused"] == 4  # back on the chat at 18:xx, on the documents at 20:xx, two evenings
