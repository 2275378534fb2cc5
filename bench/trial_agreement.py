"""Do the week bench's fleet and the canary's trials agree on what one replica holds within the SLO?

``bench/week.py``'s fleet, and the ideal plans it scores against (the ideal static config and the ceiling), judge
the SLO on the performance model's steady state (``PerformanceModel.estimate``, through ``week.meets``).
Shiftlight's canary trials run the replica engine step by step (``SimulatedLoadTester``), with the trial's own
arrivals, its own prompt and output lengths and a measured p99. Where the two disagree, a controller that sizes
from trials cannot reach a plan sized on the steady state, however well it searches.

For one window's request mix (the scenario's traffic at ``--hour`` of a weekday) this prints, for each config and
each per-replica load (``--loads``, requests in flight), the steady state's verdict and the trials' verdicts
(``H`` held, ``-`` not: within the SLO and, for a closed loop, keeping up with the load's arrival rate, as a
capacity probe judges it), with each trial's TTFT and TPOT at the SLO's percentiles. The trials run the
operator's trial budget for the shape (``TrialBudget.for_shape``: a warm-up of one mean time in system and a
window of at least two), stretched to ``--duration`` seconds. The last line::

    agreement: the steady state and the trials agree on A of B verdicts; the steady state holds where no trial
    did in C (trials of D s, E seeds, open loop)

Run: ``.venv/bin/python -m bench.trial_agreement --scenario doc-quoting --hour 2.5
--configs stock,async+ssm-fp32+seqs16+mbt2048 --loads 4,5,6 --duration 1200 --seeds 3 --loop open``
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from bench import week  # the week bench: its scenarios, their policy and traffic, and the steady-state verdict
from controller.adapters.simulated.loadtester import SimulatedLoadTester
from controller.decide import scaled
from controller.decide.capacity.sizing import holds
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult
from controller.ports import TrialBudget, TrialRequest
from controller.simulator import perf as perf_module
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model

Loop = Literal["open", "closed"]


@dataclass(frozen=True)
class Cell:
    """One config at one per-replica load: the steady state's verdict and each trial's."""

    config: str
    load: float
    steady_holds: bool
    trials: tuple[TrialResult, ...]
    trial_holds: tuple[bool, ...]

    def agrees(self) -> bool:
        """The steady state's verdict is what most trials found (a tie counts as disagreement)."""
        held = sum(self.trial_holds)
        return held * 2 > len(self.trial_holds) if self.steady_holds else held * 2 < len(self.trial_holds)

    def steady_only(self) -> bool:
        """The steady state holds the load and no trial did."""
        return self.steady_holds and not any(self.trial_holds)


def trial_line(result: TrialResult, held: bool, slo: SLO) -> str:
    if not result.ok or result.ttft_s is None or result.tpot_s is None:
        return f"{'H' if held else '-'} {result.status.value}: {result.reason}"
    ttft, tpot = result.ttft_s.at(slo.ttft_percentile), result.tpot_s.at(slo.tpot_percentile)
    served = result.request_throughput / result.shape.arrival_rate_rps if result.shape.arrival_rate_rps else 0.0
    return (
        f"{'H' if held else '-'} TTFT p{slo.ttft_percentile:g} {ttft:.1f} s, TPOT p{slo.tpot_percentile:g} "
        f"{tpot * 1000:.0f} ms, served {served:.2f}x the rate, {result.completed} requests"
    )


def measure(
    perf: PerformanceModel,
    tester: SimulatedLoadTester,
    config: EngineConfig,
    mix: TrafficShape,
    load: float,
    slo: SLO,
    *,
    duration_s: float,
    seeds: int,
    loop: Loop,
) -> Cell:
    shape = scaled(mix, load / mix.concurrency)
    budget = TrialBudget(duration_s=duration_s, max_requests=1_000_000).for_shape(shape)
    target = TargetRef("bench", "trial-agreement", "model")
    trials = tuple(
        tester.run(TrialRequest(target, config, shape, slo, budget, seed=seed, loop=loop)) for seed in range(seeds)
    )
    held = tuple(holds(t, keeps_up=loop == "closed") for t in trials)
    return Cell(config.label(), load, week.meets(perf, config, shape, slo), trials, held)


def summary(cells: list[Cell], *, duration_s: float, seeds: int, loop: Loop) -> str:
    agree = sum(c.agrees() for c in cells)
    steady_only = sum(c.steady_only() for c in cells)
    return (
        f"agreement: the steady state and the trials agree on {agree} of {len(cells)} verdicts; the steady state "
        f"holds where no trial did in {steady_only} (trials of {duration_s:g} s, {seeds} seeds, {loop} loop)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--scenario", choices=sorted(week.SCENARIOS), default="doc-quoting")
    parser.add_argument("--hour", type=float, default=2.5, help="hour of a weekday whose request mix is replayed")
    parser.add_argument("--configs", default="stock", help="comma-separated config labels ('stock' included)")
    parser.add_argument("--loads", default="4,5,6", help="comma-separated requests in flight per replica")
    parser.add_argument("--duration", type=float, default=120.0, help="measured window, seconds (at least)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--loop", choices=["open", "closed"], default="open")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.duration <= 0:
        parser.error("--seeds must be at least 1 and --duration positive")
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    if not loads or any(x <= 0 for x in loads):
        parser.error("--loads must be positive numbers")
    calibrated_before = perf_module.CALIBRATED_BY_DEFAULT
    perf_module.CALIBRATED_BY_DEFAULT = True  # as bench/week.py runs its fleet and its trials
    try:
        s = week.SCENARIOS[args.scenario]
        policy = week.week_policy(s)
        by_label = {c.label(): c for c in [STOCK, *policy.space.configs(policy.feasibility)]}
        wanted = [x.strip() for x in args.configs.split(",") if x.strip()]
        unknown = [x for x in wanted if x not in by_label]
        if unknown:
            parser.error(f"--configs: not in the {args.scenario} policy's space: {', '.join(unknown)}")
        mix = week.week_traffic(s).shape_at_hour(args.hour, day_of_week=0, noise=False)
        if mix.concurrency <= 0:
            parser.error(f"--hour: no traffic at {args.hour:g} h in {args.scenario}")
        perf = PerformanceModel(load_model(s.model), load_gpu(s.gpu))
        tester = SimulatedLoadTester(s.model, s.gpu)
        print(f"scenario {args.scenario}, {args.hour:g} h on a weekday: {mix.describe()}; SLO {policy.slo}")
        cells: list[Cell] = []
        for label in wanted:
            for load in loads:
                cell = measure(
                    perf,
                    tester,
                    by_label[label],
                    mix,
                    load,
                    policy.slo,
                    duration_s=args.duration,
                    seeds=args.seeds,
                    loop=args.loop,
                )
                cells.append(cell)
                verdict = "holds" if cell.steady_holds else "misses"
                print(f"{label} at {load:g} in flight: steady state {verdict}")
                for seed, (t, h) in enumerate(zip(cell.trials, cell.trial_holds, strict=True)):
                    print(f"    trial seed {seed}: {trial_line(t, h, policy.slo)}")
        print(summary(cells, duration_s=args.duration, seeds=args.seeds, loop=args.loop))
        return 0
    finally:
        perf_module.CALIBRATED_BY_DEFAULT = calibrated_before


if __name__ == "__main__":
    raise SystemExit(main())
