"""Cost per million tokens of self-hosting against an API price, whether a search's next trial is worth its GPU
time, and whether a scheduled switch pays for its rollout. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controller.decide.capacity.sizing import replicas_for
from controller.decide.rules import ApiPrice, ScalingRules
from controller.domain.codes import Code
from controller.domain.status import ScheduledConfig
from controller.domain.traffic import TimeWindow


@dataclass(frozen=True)
class WindowEconomics:
    window: str
    gpu_hours: float
    self_hosted_usd: float
    api_usd: float
    input_tokens: float
    output_tokens: float
    utilisation: float
    """Share of the GPUs' capacity (at the SLO) the traffic used."""

    @property
    def usd_per_million_output(self) -> float:
        return self.self_hosted_usd / self.output_tokens * 1e6 if self.output_tokens else float("inf")

    @property
    def api_is_cheaper(self) -> bool:
        """False where no API price is set (an API cost of 0 is no price, not a free API)."""
        return 0 < self.api_usd < self.self_hosted_usd

    @property
    def saving(self) -> float:
        """Fraction saved by self-hosting versus the API (negative when the API is cheaper)."""
        return 1 - self.self_hosted_usd / self.api_usd if self.api_usd else 0.0

    def describe(self) -> str:
        if not self.api_usd:  # no API price to compare against: the self-hosted cost alone, no verdict
            return (
                f"{self.window}: ${self.usd_per_million_output:,.2f} per million output tokens on "
                f"{self.gpu_hours:.1f} GPU-hours (${self.self_hosted_usd:,.2f}); no API price set to compare against"
            )
        verdict = (
            f"API cheaper by ${self.self_hosted_usd - self.api_usd:,.2f} (GPUs {self.utilisation:.1%} utilised)"
            if self.api_is_cheaper
            else f"self-hosting saves {self.saving:.0%}"
        )
        return (
            f"{self.window}: ${self.usd_per_million_output:,.2f} per million output tokens on {self.gpu_hours:.1f} "
            f"GPU-hours (${self.self_hosted_usd:,.2f}) vs API ${self.api_usd:,.2f}: {verdict}"
        )


def window_economics(
    *,
    window: str,
    gpu_hours: float,
    gpu_usd_per_hour: float,
    input_tokens: float,
    output_tokens: float,
    capacity_output_tokens: float,
    api: ApiPrice,
) -> WindowEconomics:
    """Economics of one window at measured utilisation (``capacity_output_tokens``: what the GPUs could have
    produced at the SLO in that window)."""
    if gpu_hours < 0 or gpu_usd_per_hour < 0 or input_tokens < 0 or output_tokens < 0:
        raise ValueError("hours, prices and token counts must be >= 0")
    return WindowEconomics(
        window=window,
        gpu_hours=gpu_hours,
        self_hosted_usd=gpu_hours * gpu_usd_per_hour,
        api_usd=api.cost(input_tokens=input_tokens, output_tokens=output_tokens),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        utilisation=min(1.0, output_tokens / capacity_output_tokens) if capacity_output_tokens else 0.0,
    )


def schedule_economics(
    schedule: Sequence[ScheduledConfig],
    *,
    windows: Sequence[TimeWindow],
    gpu_usd_per_hour: float,
    api: ApiPrice,
) -> list[WindowEconomics]:
    """Projected economics of a day on the schedule: each window's replicas for its hours, at the load measured
    when it was tuned (``fleet_rate_rps`` and the shape's mean lengths) against its probed capacity."""
    by_name = {w.name: w for w in windows}
    result = []
    for entry in schedule:
        window = by_name.get(entry.window)
        if window is None or entry.fleet_rate_rps is None:
            continue
        seconds = window.hours * 3600
        requests = entry.fleet_rate_rps * seconds
        replicas = max(1, entry.replicas)
        capacity_requests = (entry.capacity_rps or entry.fleet_rate_rps) * replicas * seconds
        result.append(
            window_economics(
                window=entry.window,
                gpu_hours=replicas * entry.config.tensor_parallel_size * window.hours,
                gpu_usd_per_hour=gpu_usd_per_hour,
                input_tokens=requests * entry.shape.prompt_tokens.mean,
                output_tokens=requests * entry.shape.output_tokens.mean,
                capacity_output_tokens=capacity_requests * entry.shape.output_tokens.mean,
                api=api,
            )
        )
    return result


@dataclass(frozen=True)
class TrialWorth:
    """Whether a search's next trial is expected to pay for its own GPU time (``code``: ``trial-pays``,
    ``trial-gain-unknown``, or a stop reason: ``search-no-gain`` when the proposer expects nothing better than
    the best already measured, ``search-below-threshold`` when it expects less than a switch needs,
    ``trial-not-worth-it`` when what it expects saves less GPU time over the horizon
    than the trial holds)."""

    code: Code
    expected_gain: float | None
    saved_gpu_hours: float
    """GPU-hours a config that gains ``expected_gain`` saves over the horizon (0 when the gain is unknown); with
    managed replicas, in whole replicas (see :func:`whole_replicas_saved`)."""
    cost_gpu_hours: float
    """GPU-hours the trial holds on the canary pool: its engine's start, warm-up and measurement."""

    @property
    def pays(self) -> bool:
        return self.code in (Code.TRIAL_PAYS, Code.TRIAL_GAIN_UNKNOWN)

    def describe(self) -> str:
        if self.expected_gain is None:
            return f"the gain of the next trial is unknown; it costs {self.cost_gpu_hours:.2f} GPU-hours"
        gain = f"{self.expected_gain:+.1%}"
        if self.code == Code.SEARCH_NO_GAIN:
            return f"the best proposal is expected to gain {gain} over the best measured config: nothing left to find"
        if self.code == Code.SEARCH_BELOW_THRESHOLD:
            return f"the best proposal is expected to gain {gain}, less than a switch needs: nothing it finds is used"
        verdict = "worth" if self.pays else "less than"
        return (
            f"the best proposal is expected to gain {gain}, {self.saved_gpu_hours:.2f} GPU-hours over the horizon, "
            f"{verdict} the {self.cost_gpu_hours:.2f} GPU-hours the trial holds"
        )


def expected_excess_gain(median_gain: float, uncertainty: float, needed_gain: float) -> float:
    """E[max(G - needed, 0)] for a gain ``G`` whose ``log(1 + G)`` is normal with median ``log(1 + median_gain)``
    and standard deviation ``uncertainty``: what a find adds beyond the gain it needs to be used, weighed by how
    likely each outcome is (the expected improvement of a lognormal over a threshold)."""
    m, b = math.log1p(max(median_gain, -0.999999)), math.log1p(needed_gain)
    if uncertainty <= 0:
        return max(math.expm1(m) - needed_gain, 0.0)
    d2 = (m - b) / uncertainty
    d1 = d2 + uncertainty
    return max(math.exp(m + uncertainty**2 / 2) * _normal_cdf(d1) - math.exp(b) * _normal_cdf(d2), 0.0)


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def whole_replicas_saved(
    replicas: int,
    *,
    floor: int,
    median_gain: float,
    uncertainty: float | None,
    needed_gain: float,
    success_chance: float = 1.0,
    samples: int = 16,
) -> float:
    """The replicas a find is expected to save at the window's busy hour, in whole replicas: the fleet runs
    ``replicas`` there (its exact need somewhere in ``(replicas - 1, replicas]``, taken as evenly spread), a config
    with ``G`` more goodput per replica needs ``ceil(need / (1 + G))`` of them, never fewer than ``floor``, and a
    find is used only when ``G`` reaches ``needed_gain``. ``G`` is lognormal as in :func:`expected_excess_gain`
    (exactly the median with no ``uncertainty``), times ``success_chance``. A window that runs on ``floor``
    replicas saves nothing whatever is found: one replica of the stock config serving a quiet night is one replica
    of any config."""
    floor = max(1, floor)
    if replicas <= floor:
        return 0.0
    m = math.log1p(max(median_gain, -0.999999))
    if not uncertainty:  # G is the median: the share of needs in (replicas - 1, replicas] it brings down each step
        if median_gain < needed_gain:
            return 0.0
        return sum(
            min(1.0, max(0.0, (replicas - fewer) * (1 + median_gain) - (replicas - 1)))
            for fewer in range(1, replicas - floor + 1)
        )

    def at_least(threshold: float) -> float:  # P(1 + G >= threshold)
        return 1 - _normal_cdf((math.log(threshold) - m) / uncertainty)

    total = 0.0
    for j in range(samples):
        need = replicas - 1 + (j + 0.5) / samples
        for fewer in range(1, replicas - floor + 1):
            total += at_least(max(need / (replicas - fewer), 1 + needed_gain))
    return success_chance * total / samples


def trial_worth(
    *,
    expected_gain: float | None,
    window_gpu_hours: float,
    trial_gpu_hours: float,
    needed_gain: float = 0.0,
    gain_uncertainty: float | None = None,
    success_chance: float = 1.0,
    replicas: int | None = None,
    min_replicas: int = 1,
) -> TrialWorth:
    """The verdict on one more trial. ``window_gpu_hours``: what the window runs over the horizon the found
    config would serve; a config with ``expected_gain`` more goodput per replica carries the same load on
    ``1 / (1 + gain)`` of the replicas, so it saves ``gain / (1 + gain)`` of them. The trial pays while that saving
    exceeds its own cost; an unknown gain (the search's opening picks) is given the benefit of the doubt.
    ``needed_gain``: the gain over the best measured config a find needs to be adopted at all (the switch
    threshold over the active config); a smaller expected gain finds nothing that would be used
    (``search-below-threshold``).

    With ``gain_uncertainty`` (the sd of ``log(1 + gain)``) the gain counted is the expected excess over
    ``needed_gain`` (:func:`expected_excess_gain`) times ``success_chance``: a proposal whose median is below the
    best measured can still be worth a trial while its model is unsure, and one the model is sure of is judged on
    its median. Then ``search-no-gain`` is a median at or below 0 that the uncertainty does not lift enough to pay,
    ``search-below-threshold`` one between 0 and ``needed_gain``, and ``trial-not-worth-it`` a gain that would be
    used but saves less than the trial costs.

    With managed replicas (``replicas``: what the window runs at its busy hour, ``window_gpu_hours`` being that
    many replicas over the horizon) the saving is counted in whole replicas above ``min_replicas``
    (:func:`whole_replicas_saved`): a share of a replica saves no GPU, and a window on its minimum saves none."""
    if window_gpu_hours < 0 or trial_gpu_hours < 0:
        raise ValueError("GPU-hours must be >= 0")
    if gain_uncertainty is not None and (not math.isfinite(gain_uncertainty) or gain_uncertainty < 0):
        raise ValueError("gain_uncertainty must be a finite number >= 0")
    if not 0 <= success_chance <= 1:
        raise ValueError("success_chance must be within [0, 1]")
    if replicas is not None and replicas < 1:
        raise ValueError("replicas must be >= 1")
    if expected_gain is None:
        return TrialWorth(Code.TRIAL_GAIN_UNKNOWN, None, 0.0, trial_gpu_hours)
    if replicas is not None:
        fewer = whole_replicas_saved(
            replicas,
            floor=min_replicas,
            median_gain=expected_gain,
            uncertainty=gain_uncertainty,
            needed_gain=needed_gain,
            success_chance=success_chance if gain_uncertainty is not None else 1.0,
        )
        saved = fewer * window_gpu_hours / replicas
    elif gain_uncertainty is not None:
        excess = success_chance * expected_excess_gain(expected_gain, gain_uncertainty, needed_gain)
        saved = excess / (1 + needed_gain + excess) * window_gpu_hours
    else:
        saved = expected_gain / (1 + expected_gain) * window_gpu_hours if expected_gain >= needed_gain else 0.0
    if saved > trial_gpu_hours and (gain_uncertainty is not None or expected_gain > 0):
        return TrialWorth(Code.TRIAL_PAYS, expected_gain, saved, trial_gpu_hours)
    if expected_gain <= 0:
        return TrialWorth(Code.SEARCH_NO_GAIN, expected_gain, saved, trial_gpu_hours)
    if expected_gain < needed_gain:
        return TrialWorth(Code.SEARCH_BELOW_THRESHOLD, expected_gain, saved, trial_gpu_hours)
    return TrialWorth(Code.TRIAL_NOT_WORTH_IT, expected_gain, saved, trial_gpu_hours)


@dataclass(frozen=True)
class SwitchWorth:
    """Whether a scheduled switch saves more GPU-hours over its window than its rollout costs (``code``:
    ``switch-pays`` or ``switch-not-paying``). All figures in GPU-hours; the saving is the one at the pessimistic
    end of the uncertainty, over the window's time left once the rollout is through."""

    code: Code
    saved_gpu_hours: float
    """What the switch saves at the pessimistic end: the least over the forecast rate and that rate
    ``1 -/+ forecast_uncertainty`` times, with the new config's capacity lowered by the capacity ratio's
    uncertainty, over the window less the rollout."""
    median_saved_gpu_hours: float
    """The same at the forecast and the measured capacities."""
    candidate_gpu_hours: float
    """The candidate replicas each rollout step holds for its bake time."""
    held_gpu_hours: float
    """The active fleet held beyond what the window's load needs until it comes down: the scale-down's
    stabilisation, at most the rollout (the old config draining)."""
    trial_gpu_hours: float
    """Canary trials the switch still has to run before it can start (0 when its evidence is measured)."""
    rollout_s: float
    forecast_uncertainty: float
    capacity_uncertainty: float

    @property
    def cost_gpu_hours(self) -> float:
        return self.candidate_gpu_hours + self.held_gpu_hours + self.trial_gpu_hours

    @property
    def pays(self) -> bool:
        return self.code == Code.SWITCH_PAYS

    def describe(self) -> str:
        verdict = "more than" if self.pays else "not more than"
        return (
            f"saves {self.saved_gpu_hours:.2f} GPU-hours over the window ({self.median_saved_gpu_hours:.2f} at the "
            f"forecast; the least with the forecast {self.forecast_uncertainty:.0%} either way and the new "
            f"config's capacity {self.capacity_uncertainty:.0%} lower), {verdict} its cost of "
            f"{self.cost_gpu_hours:.2f}: {self.candidate_gpu_hours:.2f} on candidates over a "
            f"{self.rollout_s / 60:.0f}-min rollout, {self.held_gpu_hours:.2f} on the old fleet held while it "
            f"drains, {self.trial_gpu_hours:.2f} on canary trials"
        )


def switch_worth(
    *,
    rate_rps: float,
    active_capacity_rps: float,
    new_capacity_rps: float,
    active_tp: int,
    new_tp: int,
    window_s: float,
    current_replicas: int,
    steps: Sequence[int],
    bake_s: float,
    rules: ScalingRules,
    forecast_uncertainty: float,
    capacity_uncertainty: float,
    trial_gpu_hours: float = 0.0,
    surge: bool = False,
) -> SwitchWorth:
    """The verdict on a scheduled switch with managed replicas, in GPU-hours at the SLO over ``window_s``.

    Saved: the active config's replicas for the window's rate less the new config's (each at its probed capacity,
    with the rules' headroom and bounds), over the window left once the rollout is through (``len(steps) x
    bake_s``), at the pessimistic end of the uncertainty: the least saving over the forecast ``rate_rps`` and that
    rate ``1 -/+ forecast_uncertainty`` times (a load that moves changes both fleets, and the rounding to whole
    replicas decides what is left), with the new config's capacity ``1 - capacity_uncertainty`` times its probe
    (the two capacities were probed alike, so the error that matters is their ratio's). Cost: the candidate
    replicas of each step for its bake time, the active fleet held above what the window needs until it comes down
    (``current_replicas`` against the active config's need, for the scale-down's stabilisation, at most the
    rollout), and the trials still to run. A pre-validated swap (``surge``) holds the new config's whole fleet for
    the window's rate from its first step. The switch pays only when the saving exceeds the whole cost."""
    if min(rate_rps, active_capacity_rps, new_capacity_rps, window_s, bake_s) < 0 or not steps:
        raise ValueError("rates, capacities and times must be >= 0, and a rollout has steps")
    if not (0 <= forecast_uncertainty < 1 and 0 <= capacity_uncertainty < 1):
        raise ValueError("uncertainties must be within [0, 1)")

    def need(rate: float, capacity: float) -> int:
        unbounded = replicas_for(rate, capacity, rules) if capacity > 0 else rules.max_replicas
        return min(max(unbounded, rules.min_replicas, 1), max(rules.max_replicas, 1))

    def saving(rate: float, new_capacity: float) -> int:
        return need(rate, active_capacity_rps) * active_tp - need(rate, new_capacity) * new_tp

    rollout_s = len(steps) * bake_s
    left_h = max(0.0, window_s - rollout_s) / 3600
    low_capacity = new_capacity_rps * (1 - capacity_uncertainty)
    rates = (rate_rps * (1 - forecast_uncertainty), rate_rps, rate_rps * (1 + forecast_uncertainty))
    low_gpus = min(saving(r, low_capacity) for r in rates)
    new_replicas = need(rate_rps, new_capacity_rps)
    held_each = [new_replicas if surge else max(1, math.ceil(new_replicas * w / 100 - 1e-9)) for w in steps]
    candidates = sum(held_each) * bake_s * new_tp / 3600
    # both capacities are known, so the fleet comes down to the window's need once the scale-down has waited its
    # stabilisation, rollout or not (capacity.scaling.during_rollout)
    held_s = min(rollout_s, rules.scale_down_stabilisation_s)
    held = max(0, current_replicas - need(rate_rps, active_capacity_rps)) * active_tp * held_s / 3600
    saved = low_gpus * left_h
    cost = candidates + held + trial_gpu_hours
    return SwitchWorth(
        Code.SWITCH_PAYS if saved > cost else Code.SWITCH_NOT_PAYING,
        saved,
        saving(rate_rps, new_capacity_rps) * left_h,
        candidates,
        held,
        trial_gpu_hours,
        rollout_s,
        forecast_uncertainty,
        capacity_uncertainty,
    )
