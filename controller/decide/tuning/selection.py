"""Choosing among measured trials: the best of a round, what the round settles on (a gain beyond both the policy's
threshold and the measured noise), the runners-up worth a capacity probe, and the evidence shown with a choice.
Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from controller.decide import rejections
from controller.decide.context import PlanContext, round_trials
from controller.decide.signals import noise as noises
from controller.domain.config import EngineConfig
from controller.domain.trial import TrialResult, TrialStatus


def best_trial(
    trials: Sequence[TrialResult], *, is_lossy: Callable[[EngineConfig], bool] = lambda _c: False
) -> TrialResult | None:
    """The measured trial with the highest goodput under the SLO.

    Only trials that meet the SLO compete; a lossless config wins a tie (within 1%) against a lossy one.
    """
    eligible = [t for t in trials if t.ok and t.meets_slo() and t.objective() > 0]
    if not eligible:
        return None
    top = max(t.objective() for t in eligible)
    near_top = [t for t in eligible if t.objective() >= 0.99 * top]
    return max(near_top, key=lambda t: (not is_lossy(t.config), t.objective()))


def find(trials: Sequence[TrialResult], config: EngineConfig) -> TrialResult | None:
    """The latest trial of exactly this config."""
    key = config.key()
    return next((t for t in reversed(trials) if t.config.key() == key), None)


def blocked(ctx: PlanContext) -> frozenset[str]:
    """Keys of the configs not to choose: rolled back on the traffic of the window being tuned (the round's, else
    the current one), or blocked everywhere, or rejected by a human for that window while the rejection stands
    (:mod:`controller.decide.rejections`: the round's traffic has not drifted from the rejected shape)."""
    round_ = ctx.status.tuning
    window = round_.window if round_ is not None else ctx.window.name
    shape = round_.shape if round_ is not None else None
    return ctx.status.blocked_for_tuning(ctx.window.name) | rejections.rejected_keys(ctx, window, shape)


def best(ctx: PlanContext, trials: Sequence[TrialResult]) -> TrialResult | None:
    """The round's best trial. With managed replicas the round runs near one replica's capacity, where every
    config may miss the SLO: then the highest goodput wins, and the capacity probe searches downwards."""
    allowed = [t for t in trials if t.config.key() not in blocked(ctx)]
    found = best_trial(allowed, is_lossy=ctx.is_lossy)
    if found is None and ctx.rules.scaling is not None:
        partial = [t for t in allowed if t.ok and t.objective() > 0]
        found = max(partial, key=lambda t: t.objective(), default=None)
    return found


def min_gain(ctx: PlanContext) -> float:
    """The gain over the active config a candidate needs: the policy's ``min_gain``, or more when the measured
    noise is larger (see :func:`controller.decide.signals.noise.required_gain`)."""
    measured = ctx.status.noise.relative if ctx.status.noise is not None else None
    return noises.required_gain(ctx.rules.tuning.min_gain, measured)


def choice(ctx: PlanContext) -> TrialResult | None:
    """The trial the round will settle on: the best one when it gains enough over the active config, else the
    active config's own (None when nothing met the SLO)."""
    trials = round_trials(ctx.status)
    top = best(ctx, trials)
    baseline = find(trials, ctx.status.active_config)
    if top is None or baseline is None or not baseline.objective():
        return top
    if top.objective() / baseline.objective() < min_gain(ctx):
        return baseline
    return top


def finalists(ctx: PlanContext, leader: TrialResult) -> list[TrialResult]:
    """Runners-up whose capacity is worth probing beside the leader's (see ``Rules.capacity_finalists``):
    distinct configs that met the SLO within ``finalist_gap`` of its goodput, neither active nor blocked, and
    lossless when the leader is."""
    if ctx.rules.scaling is None or ctx.rules.capacity_finalists <= 0:
        return []
    skip = {leader.config.key(), ctx.status.active_config.key(), *blocked(ctx)}
    floor = (1 - ctx.rules.finalist_gap) * leader.objective()
    out: list[TrialResult] = []
    for t in sorted(round_trials(ctx.status), key=lambda t: -t.objective()):
        key = t.config.key()
        if key in skip or not (t.ok and t.meets_slo()) or t.objective() < floor:
            continue
        if ctx.is_lossy(t.config) and not ctx.is_lossy(leader.config):
            continue
        skip.add(key)
        out.append(t)
        if len(out) == ctx.rules.capacity_finalists:
            break
    return out


def measured_beside(
    trials: Sequence[TrialResult],
    *,
    candidate: EngineConfig,
    stable: EngineConfig,
    keep_candidate: Callable[[TrialResult], bool],
    keep_stable: Callable[[TrialResult], bool],
) -> Iterator[tuple[TrialResult, TrialResult]]:
    """Newest first: each trial of ``candidate`` that ``keep_candidate`` accepts, with the latest trial of
    ``stable`` on the same shape that ``keep_stable`` accepts (candidates with none are skipped). Two configs are
    compared only where both replayed the same traffic at the same load."""
    for cand in reversed(trials):
        if cand.config.key() != candidate.key() or not keep_candidate(cand):
            continue
        base = next(
            (
                t
                for t in reversed(trials)
                if t.config.key() == stable.key() and t.shape == cand.shape and keep_stable(t)
            ),
            None,
        )
        if base is not None:
            yield cand, base


def expected_ratios(
    trials: Sequence[TrialResult], *, candidate: EngineConfig, stable: EngineConfig
) -> tuple[float | None, float | None]:
    """Candidate/stable p95 TTFT and TPOT as the latest canary trials of both measured them on the same shape
    (a capacity probe of one config at a load the other was not probed at says nothing about the trade-off)."""
    pairs = measured_beside(
        trials,
        candidate=candidate,
        stable=stable,
        keep_candidate=lambda t: t.ok and t.ttft_s is not None and t.tpot_s is not None,
        keep_stable=lambda t: t.ok,
    )
    for cand, base in pairs:
        assert cand.ttft_s is not None and cand.tpot_s is not None
        if base.ttft_s is None or base.tpot_s is None or not base.ttft_s.p95 or not base.tpot_s.p95:
            continue
        return cand.ttft_s.p95 / base.ttft_s.p95, cand.tpot_s.p95 / base.tpot_s.p95
    return None, None


def stable_missed_slo(trials: Sequence[TrialResult], *, candidate: EngineConfig, stable: EngineConfig) -> bool:
    """Whether the latest canary trial of ``candidate`` that met the SLO has a trial of ``stable`` beside it on the
    same shape that missed it: at that traffic the candidate holds the SLO and stable does not, so stable's
    latency in production (on however many replicas it has there) is no bar for the candidate's."""
    pairs = measured_beside(
        trials, candidate=candidate, stable=stable, keep_candidate=TrialResult.meets_slo, keep_stable=lambda _t: True
    )
    latest = next(pairs, None)
    return latest is not None and latest[1].status is not TrialStatus.INVALID and not latest[1].meets_slo()


def evidence(chosen: TrialResult, stock: TrialResult | None) -> tuple[tuple[str, str], ...]:
    """The stock and chosen measurements side by side, as a notification's fields."""

    def row(t: TrialResult | None) -> str:
        if t is None or t.ttft_s is None or t.tpot_s is None:
            return "n/a"
        return (
            f"{t.output_tokens_per_s:,.0f} tok/s, goodput {t.goodput_tokens_per_s:,.0f}, "
            f"TTFT p95 {t.ttft_s.p95 * 1000:.0f} ms, TPOT p95 {t.tpot_s.p95 * 1000:.1f} ms"
        )

    return (("stock", row(stock)), ("chosen", row(chosen)), ("config", chosen.config.label()))


__all__ = [
    "best",
    "best_trial",
    "blocked",
    "choice",
    "evidence",
    "expected_ratios",
    "finalists",
    "find",
    "measured_beside",
    "min_gain",
    "stable_missed_slo",
]
