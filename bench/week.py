"""A simulated week of diurnal traffic: the GPU-hours each strategy needs to serve all of it within the SLO.

Surface: the in-process fleet (``controller/simulator/fleet/service.py``, one tick a minute) serving
``DiurnalTraffic.week(seed, profile, load_scale=...)``, sized with ``load_scale`` so the busy hours need several
replicas. Every strategy serves the same traffic on the same simulated hardware, starts with enough replicas for the
first hour (the ideal schedule's for its first config: stock's for stock+HPA and for Shiftlight, which starts on
stock), and is scored over the whole week:

* **GPU-hours**: replicas x tensor-parallel size x time, cold and idle replicas included, rollout candidates
  included, and for Shiftlight the canary pool its trials ran on too (each trial that starts an engine holds its
  GPUs for the cold start, the warm-up and the measurement). The canary pool is also reported apart.
* **SLO attainment**: requests that met the SLO (TTFT and TPOT within the policy's bounds) over requests offered
  (errors and shed load count as misses), overall and in the worst *window* (one window of one day, e.g. Tuesday's
  night). A strategy **qualifies** with at least 99 % overall and at least 97 % in every window; one that does
  not reports its figures, and no ratio from it counts (``n/q`` in the final line).
* **switches** (promotions in production), **rollbacks**, GPU-hours on rollout candidates and on trials;
  goodput per GPU-hour (output tokens of requests that met the SLO) as a secondary column.

Rows:

(a) ``stock+hpa``: the stock vLLM config, replicas by an emulated Kubernetes HPA (what users run today);
(b) ``ideal-static``: the single best config with *ideal replica sizing every hour*: for every hour of the week the
    fewest replicas that hold the SLO at that hour's load from the performance model, i.e.
    ``ceil(peak concurrency of the hour x (1 + headroom) / per-replica concurrency at the SLO)`` on the hour's
    noise-free shape: its mid-point's mix, and each quarter-hour's own where the mix moves by more than 5 % (a
    handover between populations); the same headroom Shiftlight plans with covers the traffic's noise; the per-replica
    concurrency is the config's, by bisection on the model, with the policy's SLO percentiles), never below one.
    The config is the one of the policy's valid space (stock included) whose schedule needs the fewest GPU-hours.
    The schedule is served in the simulator as it is: replicas added one cold start ahead of the hour that needs
    them, removed at the start of the hour that does not. No HPA;
(c) ``ceiling``: the best config for every hour, ideally sized the same way (fewest replicas; on a tie the config
    of the hour before, then the ideal static one), served in the simulator with each switch pre-warmed one cold
    start ahead (the new config's replicas held beside the old ones until the hour starts). It bounds what any
    per-window schedule can save;
(d) ``shiftlight``: the Reconciler (``controller/reconcile.py``) with per-window configs found by canary trials,
    progressive rollouts (judged by the policy's rollout analysis at each SLO's own percentile, from the simulated
    metrics' per-variant latency there: a candidate whose latency at the SLO's percentile stays within the policy's
    ``rollout.thresholds.slo_headroom`` share of the SLO is not rolled back for its latency ratio to stable alone)
    and capacity-based scaling (the planner's ``Scale`` actions from the capacity its trials
    measured, ``controller/decide/capacity/sizing.py`` rules, sized for the load expected ``lead_s`` ahead while it
    rises towards the window's end forecast) and a load forecast of each window's busy hour
    (``SimulatedForecaster``: what the hour-of-week profile of earlier weeks shows, so windows are tuned ahead of
    their start); the final line reports this one;
(e) ``shiftlight+hpa``: the same loop with an HPA object on the workload, which Shiftlight sees and defers to:
    replicas by the HPA emulation with the target of whichever config is active, on the stable Deployment's
    share of the load, during rollouts too (a real HPA does not stop while a canary runs; an emulation that paused
    it left a week's stable replicas frozen behind a stalled rollout)
    (``--shiftlight-scaling capacity|hpa|both``, default both).

HPA emulation (the Kubernetes algorithm, evaluated every control cycle): metric = in-flight requests per ready
replica (``vllm:num_requests_running`` + waiting, i.e. the traffic's concurrency over ready replicas); desired =
ceil(current x metric / target), skipped within a 10% tolerance; scale-up at once, scale-down to the highest
recommendation of the last 5 minutes (the default ``scaleDown.stabilizationWindowSeconds: 300``). The target is set
the way a careful operator would for the config being scaled: 80% of the per-replica concurrency at which that
config still meets the SLO on the week's busiest shape (perf model, bisection).

Scenarios (``--scenario``): ``workstation`` (the field notes' hybrid MTP model on a DGX-Station-class GPU, coding
agents by day, long documents by night), ``dense-fleet`` (a dense 8B model on H200s with lookup speculation in its
space) and ``doc-quoting`` (a 27B hybrid MTP model, 4-bit, on RTX 3090s: chat by day, document quoting at night,
where a long lookup draft pays several-fold and costs about half the speed on fresh text); and two populations
written before the decide logic was changed for them, with their own windows and seeds: ``rag-batch`` (the dense 8B
on H200s under ``week-dense-8b-h200.yaml``: long-prompt RAG chat in business hours, a synthetic-data batch job at
night, light chat in the evening; five windows, two on half hours) and ``support-afternoon`` (the workstation's model
and policy: support bots around the clock, coding agents in the afternoon only; four windows).

Each scenario runs a policy file of ``bench/policies/`` (``week-workstation.yaml``, ``week-dense-8b-h200.yaml``,
``week-doc-quoting-3090.yaml``: the presets' spaces, SLOs and rollout thresholds with the bench's approval, trial
budget, rollout bake and samples, scaling headroom and capacity probes' loop) through the operator's own recipe
(``controller.cycle.cycle_for``); the scenario gives the replica bounds, as a TunedService's ``spec.replicas`` does.

Before the final line the bench prints the schedule's realised gain against the ideal best static config and what
switching cost (GPU-hours on rollout candidates and canary trials, promotions, rollbacks)::

    schedule: realised gain vs ideal best static +G.G GPU-hours (S.S vs H.H); switching cost: C.C GPU-hours on \
rollout candidates, T.T on N canary trials, P promotions, R rollbacks

and how far any planner sized like the ceiling can get against stock + HPA: stock + HPA's GPU-hours over the
ceiling's and over the floor's (the scenario's fewest replicas all week; no controller goes below it)::

    bounds: stock+HPA S.S GPU-hours is A.AAx the ceiling's C.C and B.BBx the floor's F.F (the fewest replicas all week)

Shiftlight's row also gives its canary trials by kind (the optimizer's, the rounds' baselines and repeats, the
capacity probes, the switch checks) and, per window, the capacity per replica probed for the config serving it
beside the most requests/s per ready replica production held within the SLO over one cycle (no candidate beside
it, a mix no lighter than the probe's): where the two disagree, the decide layer's ``capacity-raised`` rule lets
production win.

Run: ``.venv/bin/python -m bench.week [--scenario workstation|dense-fleet|doc-quoting|rag-batch|support-afternoon]
[--seed N] [--load-scale X] [--days D] [--uncalibrated] [--trajectory]``. ``--trajectory`` prints, for each window
of each day,
Shiftlight's config, peak replicas, GPU-hours and SLO attainment beside the ceiling's and the ideal static config's,
and the scaling decision behind Shiftlight's peak. The performance model runs calibrated: a GPU with a shipped
calibration profile (the H200) on its measured curves, every GPU with the corrected prefill terms
(``--uncalibrated``: on the assumed constants, as ``controller.simulator.perf.CALIBRATED_BY_DEFAULT`` leaves the
operator's simulator). Ends with one line (ratios are the baseline's GPU-hours over Shiftlight's, higher is better; the
ceiling's is the ideal static config's GPU-hours over the ceiling's)::

    week: GPU-hours vs stock+HPA A.AAx fewer, vs ideal best static B.BBx, ceiling C.CCx, SLO attainment D.D% \
(worst window E.E%)
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from controller.adapters.notify.recording import RecordingNotifier
from controller.adapters.simulated.fleet import SimulatedCluster, SimulatedForecaster, SimulatedMetrics, SimulatedRouter
from controller.adapters.simulated.loadtester import SimulatedLoadTester
from controller.clock import FakeClock
from controller.crd.tuned_service import ReplicaBounds
from controller.cycle import CycleSettings, CycleSpec, cycle_for
from controller.decide import OptimizerAdvisor, scaled
from controller.domain.actions import Action, Scale
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import MetricsUnavailable
from controller.policy import Policy, load_policy, profile_feasibility
from controller.policy.scaling import ProbeLoop
from controller.ports import LoadTester, TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.simulator import perf as perf_module
from controller.simulator.fleet.records import FleetTick
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from controller.simulator.traffic.diurnal import DiurnalTraffic
from controller.simulator.traffic.profile import TrafficProfile

REPO = Path(__file__).resolve().parents[1]
WEEK_START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)  # a Monday
#: Qualification: SLO attainment overall and in every window of every day.
QUALIFY_OVERALL = 0.99
QUALIFY_WINDOW = 0.97


@dataclass(frozen=True)
class WeekSettings:
    seed: int = 7
    load_scale: float = 4.0
    days: float = 7.0
    model: str = "nemotron-3-super-nvfp4"
    gpu: str = "gb300-dgx-station"
    policy_path: Path = REPO / "bench" / "policies" / "week-workstation.yaml"
    """The policy the week runs (approval, trial budget, rollout bake and samples, scaling headroom, capacity probe
    loop): ``bench/policies/week-*.yaml``."""
    profile: str | TrafficProfile = "coding-agents"
    cycle_s: float = 300.0
    cold_start_s: float = 180.0
    min_replicas: int = 1
    max_replicas: int = 16
    hpa_utilisation: float = 0.8
    hpa_tolerance: float = 0.1
    hpa_scale_down_window_s: float = 300.0
    probe_loop: ProbeLoop | None = None
    """``--probe-loop``: the capacity probes' loop instead of the policy's ``scaling.capacity_probe_loop``."""
    shiftlight_scaling: str = "both"


#: Three fleets. ``workstation``: the field notes' hybrid MTP model on one DGX-Station-class GPU per replica, a few
#: replicas at peak. ``dense-fleet``: a dense 8B model on H200s, ~10 replicas at peak, with lookup speculation
#: (ngram) in its search space, which pays on the night's repetitive long documents and costs on the day's agents.
#: Its capacity probes replay closed loops (its policy's ``scaling.capacity_probe_loop: closed``), as a user whose
#: production breaches below open-loop probes would set it: the fleet holds each replica at the streams routed to
#: it, and a lookup drafter that finishes documents early passes an open-loop probe at rates it cannot carry at that
#: concurrency.
#: ``doc-quoting``: field note 2's class of setup, a 27B hybrid MTP model (4-bit) on RTX 3090s, chat by day and
#: document quoting at night (the ``chat-quoting`` traffic profile), with MTP and long lookup drafts in its space.
#: Two more populations, written before any decide code was changed for them (issue 29), with other window
#: boundaries and seeds than the three above. ``rag-batch``: a platform team's dense 8B on H200s, long-prompt RAG chat
#: in business hours, a synthetic-data batch job at night (short prompts, long outputs, many streams), light chat in
#: the evening; five windows, two of them on half hours, the night's wrapping midnight.
RAG_BATCH = TrafficProfile.parse(
    {
        "name": "rag-batch",
        "description": "RAG chat in business hours (6k-token prompts), a synthetic-data batch job at night "
        "(256 in / 2k out, many streams), light chat in the evening",
        "populations": {
            "rag": {
                "peak_concurrency": 96,
                "request_seconds": 12.0,
                "prompt_tokens": {"mean": 6000, "cv": 0.5, "maximum": 32000},
                "output_tokens": {"mean": 320, "cv": 0.6, "maximum": 2048},
                "repetitiveness": 0.3,
                "prefix_share": 0.2,
                "curve": {
                    "knots": [
                        [0, 0.0],
                        [7.5, 0.0],
                        [9, 0.9],
                        [11, 1.0],
                        [14, 0.9],
                        [17, 0.7],
                        [18.5, 0.05],
                        [19, 0.0],
                        [24, 0.0],
                    ]
                },
                "weekend_scale": 0.15,
            },
            "batch": {
                "peak_concurrency": 320,
                "request_seconds": 45.0,
                "prompt_tokens": {"mean": 256, "cv": 0.3, "maximum": 1024},
                "output_tokens": {"mean": 2048, "cv": 0.3, "maximum": 4096},
                "repetitiveness": 0.05,
                "prefix_share": 0.6,
                "curve": {"knots": [[0, 1.0], [4.5, 1.0], [6, 0.0], [22, 0.0], [23, 1.0], [24, 1.0]]},
            },
            "chat": {
                "peak_concurrency": 24,
                "request_seconds": 15.0,
                "prompt_tokens": {"mean": 800, "cv": 0.6, "maximum": 8192},
                "output_tokens": {"mean": 300, "cv": 0.5, "maximum": 2048},
                "repetitiveness": 0.05,
                "prefix_share": 0.4,
                "curve": {
                    "knots": [
                        [0, 0.0],
                        [5, 0.0],
                        [7, 0.3],
                        [9, 0.0],
                        [16, 0.0],
                        [18, 0.6],
                        [20, 1.0],
                        [22, 0.4],
                        [23, 0.0],
                        [24, 0.0],
                    ]
                },
                "weekend_scale": 0.7,
            },
        },
        "windows": [
            {"name": "batch-night", "start_hour": 22.5, "end_hour": 5.5},
            {"name": "early", "start_hour": 5.5, "end_hour": 8},
            {"name": "business", "start_hour": 8, "end_hour": 17.5},
            {"name": "handover", "start_hour": 17.5, "end_hour": 19},
            {"name": "evening", "start_hour": 19, "end_hour": 22.5},
        ],
        "noise_cv": 0.1,
    },
    source="bench/week.py rag-batch",
)
#: ``support-afternoon``: the workstation's hybrid MTP model under its own policy; support bots all day and night
#: (short, chatty requests behind a shared system prompt), coding agents in the afternoon only; four windows.
SUPPORT_AFTERNOON = TrafficProfile.parse(
    {
        "name": "support-afternoon",
        "description": "support bots around the clock (700 in / 150 out), coding agents in the afternoon only",
        "populations": {
            "support": {
                "peak_concurrency": 48,
                "request_seconds": 6.0,
                "prompt_tokens": {"mean": 700, "cv": 0.5, "maximum": 4096},
                "output_tokens": {"mean": 150, "cv": 0.6, "maximum": 1024},
                "repetitiveness": 0.1,
                "prefix_share": 0.7,
                "curve": {"knots": [[0, 0.3], [6, 0.25], [9, 0.9], [12, 1.0], [17, 0.9], [21, 0.5], [24, 0.3]]},
                "weekend_scale": 0.6,
            },
            "agents": {
                "peak_concurrency": 160,
                "request_seconds": 30.0,
                "prompt_tokens": {"mean": 1500, "cv": 0.4, "maximum": 8192},
                "output_tokens": {"mean": 400, "cv": 0.4, "maximum": 4096},
                "repetitiveness": 0.15,
                "prefix_share": 0.3,
                "curve": {"knots": [[0, 0.0], [12.5, 0.0], [14, 1.0], [16.5, 0.9], [18, 0.1], [18.5, 0.0], [24, 0.0]]},
                "weekend_scale": 0.2,
            },
        },
        "windows": [
            {"name": "overnight", "start_hour": 20, "end_hour": 7},
            {"name": "support-day", "start_hour": 7, "end_hour": 12.5},
            {"name": "afternoon", "start_hour": 12.5, "end_hour": 18.5},
            {"name": "wind-down", "start_hour": 18.5, "end_hour": 20},
        ],
        "noise_cv": 0.1,
    },
    source="bench/week.py support-afternoon",
)


def profile_file(name: str) -> TrafficProfile:
    """A week's traffic profile kept as data in ``bench/profiles/NAME.yaml``."""
    path = REPO / "bench" / "profiles" / f"{name}.yaml"
    return TrafficProfile.parse(yaml.safe_load(path.read_text(encoding="utf-8")), source=str(path.relative_to(REPO)))


#: Two more, written as data before any decide change for them (``bench/profiles/``): ``shift-desk``, a small
#: operations desk's dense 8B on H200s (short triage by day, long incident summaries at night, one to three replicas);
#: ``launch-week``, the workstation's model behind a product in its launch week (noisy weekday agents, evening reports).
SCENARIOS: dict[str, WeekSettings] = {
    "workstation": WeekSettings(),
    "dense-fleet": WeekSettings(
        model="llama-3.1-8b",
        gpu="h200",
        policy_path=REPO / "bench" / "policies" / "week-dense-8b-h200.yaml",
        load_scale=16.0,
        max_replicas=32,
    ),
    "doc-quoting": WeekSettings(
        model="qwen3.6-27b-int4",
        gpu="rtx-3090",
        policy_path=REPO / "bench" / "policies" / "week-doc-quoting-3090.yaml",
        profile="chat-quoting",
        load_scale=1.0,
        max_replicas=32,
    ),
    "rag-batch": WeekSettings(
        model="llama-3.1-8b",
        gpu="h200",
        policy_path=REPO / "bench" / "policies" / "week-dense-8b-h200.yaml",
        profile=RAG_BATCH,
        seed=31,
        load_scale=4.0,
        max_replicas=32,
    ),
    "support-afternoon": WeekSettings(
        profile=SUPPORT_AFTERNOON,
        seed=53,
        load_scale=3.0,
    ),
    "shift-desk": WeekSettings(
        model="llama-3.1-8b",
        gpu="h200",
        policy_path=REPO / "bench" / "policies" / "week-dense-8b-h200.yaml",
        profile=profile_file("shift-desk"),
        seed=67,
        load_scale=3.0,
        max_replicas=16,
    ),
    "launch-week": WeekSettings(
        profile=profile_file("launch-week"),
        seed=89,
        load_scale=2.0,
    ),
}


# ----- scoring (pure) ------------------------------------------------------------------------------------------------
WindowKey = tuple[str, str]
"""(date, window name): one window of one day."""


def attainment(requests: float, good: float) -> float:
    """Good requests over requests offered (1.0 when nothing was offered)."""
    return good / requests if requests else 1.0


def worst_window(tallies: Mapping[WindowKey, tuple[float, float]]) -> tuple[float, WindowKey | None]:
    """The lowest SLO attainment of any window that saw requests, and which window (1.0 and None when none did)."""
    seen = [(attainment(r, g), k) for k, (r, g) in tallies.items() if r > 0]
    if not seen:
        return 1.0, None
    return min(seen)


def qualifies(overall: float, worst: float) -> bool:
    """At least 99 % SLO attainment over the week and at least 97 % in every window."""
    return overall >= QUALIFY_OVERALL - 1e-12 and worst >= QUALIFY_WINDOW - 1e-12


def gpu_hour_ratio(baseline_hours: float, hours: float, *, counts: bool) -> str:
    """``baseline / hours`` as ``1.23x`` (higher: fewer GPU-hours than the baseline), ``n/q`` when either side does
    not qualify (``counts`` False) or a side has no GPU-hours."""
    if not counts or hours <= 0 or baseline_hours <= 0:
        return "n/q"
    return f"{baseline_hours / hours:.2f}x"


def schedule_line(
    *,
    static_hours: float,
    hours: float,
    candidate_hours: float,
    trial_hours: float,
    trials: int,
    promotions: int,
    rollbacks: int,
    counts: bool,
) -> str:
    """The schedule's realised gain against the ideal best static config (its GPU-hours less Shiftlight's, all of
    Shiftlight's included; ``n/q`` when either side does not qualify) and what switching cost: GPU-hours on rollout
    candidates and on canary trials, promotions and rollbacks."""
    gain = f"{static_hours - hours:+.1f} GPU-hours" if counts else "n/q"
    return (
        f"schedule: realised gain vs ideal best static {gain} ({static_hours:.1f} vs {hours:.1f}); switching cost: "
        f"{candidate_hours:.1f} GPU-hours on rollout candidates, {trial_hours:.1f} on {trials} canary trials, "
        f"{promotions} promotions, {rollbacks} rollbacks"
    )


def week_line(*, stock: str, static: str, ceiling: str, attainment_overall: float, attainment_worst: float) -> str:
    return (
        f"week: GPU-hours vs stock+HPA {stock} fewer, vs ideal best static {static}, ceiling {ceiling}, "
        f"SLO attainment {attainment_overall:.1%} (worst window {attainment_worst:.1%})"
    )


def bounds_line(*, stock_hours: float, ceiling_hours: float, floor_hours: float, stock_counts: bool) -> str:
    """How far any controller planned like the ceiling can get against stock + HPA: stock + HPA's GPU-hours over the
    ceiling's (the best config for every hour, sized with the scenario's headroom) and over the floor (the fewest
    replicas the scenario allows, all week, on one GPU each). Below 1.0x over the ceiling, stock + HPA runs hotter
    than the headroom every plan here is sized with; the ratio over the floor is the most any controller can
    reach. ``n/q`` when stock + HPA does not qualify."""

    def over(hours: float) -> str:
        return gpu_hour_ratio(stock_hours, hours, counts=stock_counts)

    return (
        f"bounds: stock+HPA {stock_hours:.1f} GPU-hours is {over(ceiling_hours)} the ceiling's "
        f"{ceiling_hours:.1f} and {over(floor_hours)} the floor's {floor_hours:.1f} (the fewest replicas all week)"
    )


def ideal_replicas(concurrency: float, capacity: float, *, headroom: float, lo: int, hi: int) -> int:
    """Fewest replicas holding ``concurrency`` with ``headroom`` at ``capacity`` streams per replica, in ``[lo, hi]``
    and never below one; ``hi`` when the config cannot hold the SLO at all (``capacity`` 0)."""
    if capacity <= 0:
        return max(hi, 1)
    need = math.ceil(concurrency * (1 + headroom) / capacity - 1e-9) if concurrency > 0 else 0
    return min(max(need, lo, 1), max(hi, 1))


def ceiling_choice(replicas: Mapping[int, int], *, previous: int | None, fallback: int) -> int:
    """The config (index) the ceiling runs for one hour: the fewest replicas; on a tie the previous hour's config,
    then ``fallback`` (the ideal static config), then the lowest index."""
    fewest = min(replicas.values())
    tied = [i for i, n in replicas.items() if n == fewest]
    for preferred in (previous, fallback):
        if preferred in tied:
            return preferred
    return min(tied)


def plan_switches(plan: Sequence[tuple[int, int]]) -> int:
    """Config changes in an hourly ``(config index, replicas)`` plan."""
    return sum(1 for a, b in itertools.pairwise(plan) if a[0] != b[0])


# ----- results -------------------------------------------------------------------------------------------------------
@dataclass
class Result:
    name: str
    config: str
    good_tokens: float = 0.0
    requests: float = 0.0
    good_requests: float = 0.0
    gpu_seconds: float = 0.0
    candidate_gpu_seconds: float = 0.0
    trial_gpu_seconds: float = 0.0
    trials: int = 0
    switches: int = 0
    rollbacks: int = 0
    peak_replicas: int = 0
    replica_seconds: float = 0.0
    seconds: float = 0.0
    windows: dict[WindowKey, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scale_reasons: dict[WindowKey, str] = field(default_factory=dict)
    trajectory: dict[WindowKey, tuple[str, int]] = field(default_factory=dict)
    """Each window's stable config at its end and its peak replicas, candidates included (Shiftlight rows)."""
    window_gpu_s: dict[WindowKey, tuple[float, float]] = field(default_factory=dict)
    """Each window's (GPU-seconds, seconds) in production, candidates included."""
    """The reason of the scaling decision that set each window's peak replicas (Shiftlight rows)."""
    window_names: Callable[[datetime], str] = field(default=lambda _t: "all-day", repr=False)

    @property
    def production_gpu_hours(self) -> float:
        return self.gpu_seconds / 3600

    @property
    def gpu_hours(self) -> float:
        """Production plus the canary pool."""
        return (self.gpu_seconds + self.trial_gpu_seconds) / 3600

    @property
    def goodput_per_gpu_hour(self) -> float:
        return self.good_tokens / self.gpu_hours if self.gpu_hours else 0.0

    @property
    def attainment(self) -> float:
        return attainment(self.requests, self.good_requests)

    @property
    def worst(self) -> tuple[float, WindowKey | None]:
        return worst_window(self.windows)

    @property
    def qualifies(self) -> bool:
        return qualifies(self.attainment, self.worst[0])

    def add(self, ticks: list[FleetTick]) -> None:
        for t in ticks:
            replicas = sum(v.replicas for v in t.variants.values())
            self.peak_replicas = max(self.peak_replicas, replicas)
            self.replica_seconds += replicas * t.seconds
            self.seconds += t.seconds
            key = (t.start.date().isoformat(), self.window_names(t.start))
            requests, good = self.windows.get(key, (0.0, 0.0))
            gpu_s, span = self.window_gpu_s.get(key, (0.0, 0.0))
            self.window_gpu_s[key] = (gpu_s + sum(v.gpu_seconds for v in t.variants.values()), span + t.seconds)
            for v in t.variants.values():
                self.requests += v.requests
                self.good_requests += v.good_requests
                requests += v.requests
                good += v.good_requests
                self.gpu_seconds += v.gpu_seconds
                if v.variant == "candidate":
                    self.candidate_gpu_seconds += v.gpu_seconds
                self.good_tokens += v.good_requests * t.shape.output_tokens.mean  # both variants serve the mix
            self.windows[key] = (requests, good)


class CountingLoadTester:
    """Counts the canary pool's GPU time: every trial that starts an engine holds its tensor-parallel GPUs for the
    cold start, the warm-up and the measurement (a config refused before launch holds none)."""

    def __init__(self, inner: LoadTester, cold_start_s: float) -> None:
        self.inner = inner
        self.cold_start_s = cold_start_s
        self.gpu_seconds = 0.0
        self.trials = 0
        self.by_kind: dict[str, int] = {}
        """Trials that held GPUs, by who asked for them (the optimizer, ``baseline``, ``capacity-probe``, ...)."""

    def run(self, request: TrialRequest) -> TrialResult:
        result = self.inner.run(request)
        if result.status is not TrialStatus.INFEASIBLE:
            self.trials += 1
            kind = request.proposed_by or "other"
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            held = self.cold_start_s + request.budget.warmup_s + request.budget.duration_s
            self.gpu_seconds += held * request.config.tensor_parallel_size
        return result


# ----- the policy, the performance model, the ideal schedules --------------------------------------------------------
def week_policy(s: WeekSettings) -> Policy:
    """The scenario's policy file (``bench/policies/``) for its model and GPU; ``--probe-loop`` replaces its capacity
    probes' loop."""
    policy = load_policy(s.policy_path).for_target(model=s.model, gpu=s.gpu)
    if s.probe_loop is not None:
        scaling = policy.scaling.model_copy(update={"capacity_probe_loop": s.probe_loop})
        policy = policy.model_copy(update={"scaling": scaling})
    return policy.with_feasibility(profile_feasibility(policy))


def week_traffic(s: WeekSettings) -> DiurnalTraffic:
    return DiurnalTraffic.week(s.seed, s.profile, load_scale=s.load_scale)


def meets(perf: PerformanceModel, config: EngineConfig, shape: TrafficShape, slo: SLO) -> bool:
    est = perf.estimate(config, shape)
    if not est.feasible or est.ttft_s is None or est.tpot_s is None:
        return False
    return (
        est.ttft_s.at(slo.ttft_percentile) <= slo.ttft_seconds
        and est.tpot_s.at(slo.tpot_percentile) <= slo.tpot_seconds
        and est.request_throughput >= shape.arrival_rate_rps * 0.999
    )


def capacity_streams(perf: PerformanceModel, config: EngineConfig, shape: TrafficShape, slo: SLO) -> float:
    """Per-replica concurrency of ``shape``'s mix at which ``config`` still meets the SLO (bisection; 0 when it
    misses the SLO even at half a stream)."""
    unit = scaled(shape, 1.0 / max(shape.concurrency, 1e-9))
    lo, hi = 0.5, 4096.0
    if not meets(perf, config, scaled(unit, lo), slo):
        return 0.0
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        if meets(perf, config, scaled(unit, mid), slo):
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.01:
            break
    return lo


#: Day types the ideal schedules are computed for (Monday stands for weekdays, Saturday for the weekend).
DAY_TYPES = (0, 5)


@dataclass(frozen=True)
class IdealSizing:
    """Offline, from the performance model: for each config, the ideal replicas of every hour of a weekday and of a
    weekend day (``ideal_replicas`` at the hour's peak concurrency over the config's per-replica concurrency at the
    SLO on the hour's mid-point shape, and at each quarter-hour whose mix is another, :func:`mix_moved`, on that
    quarter's own mix)."""

    configs: list[EngineConfig]
    replicas: dict[int, dict[tuple[int, int], int]]
    """config index -> (day type, hour) -> replicas."""

    def static_plan(self, index: int, hours: int) -> list[tuple[int, int]]:
        return [(index, self.replicas[index][_slot(h)]) for h in range(hours)]

    def static_gpu_hours(self, index: int, hours: int) -> float:
        tp = self.configs[index].tensor_parallel_size
        return sum(n for _i, n in self.static_plan(index, hours)) * tp

    def best_index(self, hours: int) -> int:
        return min(self.replicas, key=lambda i: (self.static_gpu_hours(i, hours), i))

    def ceiling_plan(self, hours: int) -> list[tuple[int, int]]:
        fallback = self.best_index(hours)
        plan: list[tuple[int, int]] = []
        previous: int | None = None
        for h in range(hours):
            slot = _slot(h)
            gpus = {i: r[slot] * self.configs[i].tensor_parallel_size for i, r in self.replicas.items()}
            previous = ceiling_choice(gpus, previous=previous, fallback=fallback)
            plan.append((previous, self.replicas[previous][slot]))
        return plan


def _slot(hour_of_week: int) -> tuple[int, int]:
    day = (WEEK_START + timedelta(hours=hour_of_week)).weekday()
    return (5 if day >= 5 else 0), hour_of_week % 24


def ideal_sizing(perf: PerformanceModel, policy: Policy, s: WeekSettings) -> IdealSizing:
    traffic = week_traffic(s)
    headroom = policy.scaling.headroom  # the headroom Shiftlight plans with covers the traffic's noise
    configs = [STOCK, *policy.space.configs(policy.feasibility)]
    replicas: dict[int, dict[tuple[int, int], int]] = {i: {} for i in range(len(configs))}
    caps: dict[tuple[object, ...], list[float]] = {}  # per-replica streams depend on the mix, not on the load

    def streams(shape: TrafficShape) -> list[float]:
        key = _mix_key(shape)
        if key not in caps:
            caps[key] = [
                capacity_streams(perf, c, shape, policy.slo) if shape.concurrency > 0 else 1.0 for c in configs
            ]
        return caps[key]

    for day in DAY_TYPES:
        for hour in range(24):
            mid = traffic.shape_at_hour(hour + 0.5, day_of_week=day, noise=False)
            quarters = [traffic.shape_at_hour(hour + q / 4, day_of_week=day, noise=False) for q in range(5)]
            peak = max(q.concurrency for q in quarters)
            at_mid = streams(mid)
            # a quarter whose mix is another (a handover between populations) is sized on its own mix too: the
            # mid-point's light evening chat does not carry the business hours' long prompts still in flight
            other = [q for q in quarters if q.concurrency > 0 and mix_moved(q, mid)]
            for i, cap in enumerate(at_mid):
                need = ideal_replicas(
                    peak if mid.concurrency > 0 else 0.0, cap, headroom=headroom, lo=s.min_replicas, hi=s.max_replicas
                )
                for q in other:
                    need = max(
                        need,
                        ideal_replicas(
                            q.concurrency, streams(q)[i], headroom=headroom, lo=s.min_replicas, hi=s.max_replicas
                        ),
                    )
                replicas[i][(day, hour)] = need
    return IdealSizing(configs, replicas)


#: A quarter-hour's mix whose mean prompt or output length is this share away from the hour's mid-point mix is
#: sized on its own (the ideal plans read each hour's mid-point mix otherwise).
MIX_MOVED = 0.05


def mix_moved(shape: TrafficShape, mid: TrafficShape) -> bool:
    """Whether ``shape``'s request mix is another than ``mid``'s: a mean length more than :data:`MIX_MOVED` away,
    or no load at the mid-point."""
    if mid.concurrency <= 0:
        return True
    return any(
        abs(a.mean / b.mean - 1) > MIX_MOVED
        for a, b in ((shape.prompt_tokens, mid.prompt_tokens), (shape.output_tokens, mid.output_tokens))
    )


def _mix_key(shape: TrafficShape) -> tuple[object, ...]:
    """A shape's request mix to three significant digits (its load left out)."""

    def sig(x: float) -> float:
        return float(f"{x:.3g}")

    p, o = shape.prompt_tokens, shape.output_tokens
    return (
        shape.concurrency > 0,
        sig(p.mean),
        sig(p.cv),
        p.maximum,
        sig(o.mean),
        sig(o.cv),
        o.maximum,
        sig(shape.repetitiveness),
        sig(shape.prefix_share),
        sig(shape.arrival_rate_rps / shape.concurrency if shape.concurrency else 0.0),
    )


def peak_shape(traffic: DiurnalTraffic) -> TrafficShape:
    shapes = [traffic.shape_at_hour(h / 4, day_of_week=0, noise=False) for h in range(96)]
    return max(shapes, key=lambda s: s.concurrency)


# ----- HPA emulation -------------------------------------------------------------------------------------------------
@dataclass
class Hpa:
    """The Kubernetes HPA algorithm on one metric (in-flight requests per ready replica)."""

    target: float
    min_replicas: int
    max_replicas: int
    tolerance: float
    scale_down_window_s: float
    recommendations: list[tuple[datetime, int]] = field(default_factory=list)

    def desired(self, now: datetime, current: int, ready: int, concurrency: float) -> int:
        metric = concurrency / max(ready, 1)
        ratio = metric / self.target
        raw = current if abs(ratio - 1) <= self.tolerance else math.ceil(max(ready, 1) * ratio - 1e-9)
        raw = min(max(raw, self.min_replicas), self.max_replicas)
        self.recommendations = [
            (t, r) for t, r in self.recommendations if (now - t).total_seconds() < self.scale_down_window_s
        ]
        self.recommendations.append((now, raw))
        if raw >= current:
            return raw
        return max(r for _, r in self.recommendations)  # scale-down stabilisation


# ----- strategies ----------------------------------------------------------------------------------------------------
def _fleet(s: WeekSettings, config: EngineConfig, replicas: int, policy: Policy) -> tuple[SimulatedFleet, FakeClock]:
    clock = FakeClock(WEEK_START)
    fleet = SimulatedFleet(
        s.model,
        s.gpu,
        week_traffic(s),
        clock,
        s.seed,
        stable_config=config,
        stable_replicas=replicas,
        slo=policy.slo,
        cold_start_s=s.cold_start_s,
    )
    return fleet, clock


def _result(name: str, config: str, fleet: SimulatedFleet) -> Result:
    traffic = fleet.traffic
    return Result(name, config, window_names=lambda t: traffic.window_at(t.hour + t.minute / 60).name)


def _observed_concurrency(metrics: SimulatedMetrics, target: TargetRef, now: datetime, window_s: float) -> float:
    try:
        return metrics.observe(target, start=now - timedelta(seconds=window_s), end=now).shape.concurrency
    except MetricsUnavailable:
        return 0.0


def run_static(
    s: WeekSettings, name: str, config: EngineConfig, target_streams: float, policy: Policy, first_replicas: int
) -> Result:
    """``config`` behind the HPA emulation with ``target_streams`` in-flight requests per replica."""
    fleet, clock = _fleet(s, config, first_replicas, policy)
    metrics = SimulatedMetrics(fleet)
    target = TargetRef("bench", name, s.model)
    hpa = Hpa(target_streams, s.min_replicas, s.max_replicas, s.hpa_tolerance, s.hpa_scale_down_window_s)
    result = _result(name, config.label(), fleet)
    end = WEEK_START + timedelta(days=s.days)
    while clock.now() < end:
        before = clock.now()
        fleet.advance(s.cycle_s)
        result.add(fleet.ticks_between(before, clock.now()))
        stable = fleet.variant("stable")
        assert stable is not None
        conc = _observed_concurrency(metrics, target, clock.now(), s.cycle_s)
        want = hpa.desired(clock.now(), stable.replicas, fleet.ready_replicas("stable"), conc)
        if want != stable.replicas:
            fleet.scale("stable", want)
    result.notes.append(
        f"HPA target {target_streams:.0f} in-flight requests per replica, "
        f"mean {result.replica_seconds / max(result.seconds, 1):.1f} replicas"
    )
    return result


def run_plan(
    s: WeekSettings, name: str, plan: Sequence[tuple[int, int]], configs: Sequence[EngineConfig], policy: Policy
) -> Result:
    """Serve an hourly ``(config index, replicas)`` plan as scheduled: more replicas are added one cold start before
    the hour that needs them, fewer at the start of the hour; a config change is pre-warmed as a candidate (weight
    0, its GPUs counted) one cold start ahead and promoted when its hour starts."""
    first_config, first_replicas = plan[0]
    fleet, clock = _fleet(s, configs[first_config], first_replicas, policy)
    result = _result(name, "", fleet)
    lead = timedelta(seconds=s.cold_start_s)
    hours = math.ceil(s.days * 24 - 1e-9)
    for h in range(hours):
        hour_end = WEEK_START + timedelta(hours=h + 1)
        end = min(hour_end, WEEK_START + timedelta(days=s.days))
        nxt = plan[h + 1] if h + 1 < len(plan) and h + 1 < hours else None
        stable = fleet.variant("stable")
        assert stable is not None
        if nxt is not None and (nxt[0] != plan[h][0] or nxt[1] > stable.replicas):
            before = clock.now()
            fleet.advance(max(0.0, (end - lead - clock.now()).total_seconds()))
            result.add(fleet.ticks_between(before, clock.now()))
            if nxt[0] != plan[h][0]:
                fleet.deploy("candidate", configs[nxt[0]], nxt[1])
            else:
                fleet.scale("stable", nxt[1])
        before = clock.now()
        fleet.advance(max(0.0, (end - clock.now()).total_seconds()))
        result.add(fleet.ticks_between(before, clock.now()))
        if nxt is None:
            continue
        if nxt[0] != plan[h][0]:
            fleet.promote()
            result.switches += 1
        elif nxt[1] < stable.replicas:
            fleet.scale("stable", nxt[1])
    runs: list[str] = []  # the first day, as runs of hours on one config
    for i, group in itertools.groupby(enumerate(plan[: min(hours, 24)]), key=lambda hp: hp[1][0]):
        hs = [h for h, _p in group]
        runs.append(f"{hs[0]:02d}-{hs[-1] + 1:02d}h {configs[i].label()}")
    replicas = " ".join(str(n) for _i, n in plan[: min(hours, 24)])
    result.notes.append(f"first day: {'; '.join(runs)}; replicas by hour: {replicas}")
    used = sorted({i for i, _n in plan[:hours]})
    result.config = configs[used[0]].label() if len(used) == 1 else f"{len(used)} configs, hour by hour"
    result.notes.append(
        f"ideal schedule, mean {result.replica_seconds / max(result.seconds, 1):.1f} replicas, "
        f"{sum(n * configs[i].tensor_parallel_size for i, n in plan[:hours]):.0f} GPU-hours planned"
    )
    return result


@dataclass(frozen=True)
class _ShiftlightRig:
    """The Reconciler on the simulated fleet, and the ports the bench reads back after the week."""

    reconciler: Reconciler
    metrics: SimulatedMetrics
    cluster: SimulatedCluster
    tester: CountingLoadTester


def _shiftlight_rig(
    s: WeekSettings,
    policy: Policy,
    perf: PerformanceModel,
    fleet: SimulatedFleet,
    clock: FakeClock,
    target: TargetRef,
    *,
    hpa: bool,
) -> _ShiftlightRig:
    """The simulated ports around ``fleet`` and the cycle the operator's recipe builds from the policy file and the
    scenario's replica bounds; ``hpa``: an HPA object owns the replicas."""
    metrics = SimulatedMetrics(fleet)
    cluster = SimulatedCluster(fleet)
    advisor = OptimizerAdvisor(
        policy, prior=lambda config, shape: perf.estimate(config, shape).output_tokens_per_s, seed=s.seed
    )
    tester = CountingLoadTester(SimulatedLoadTester(s.model, s.gpu), s.cold_start_s)
    ports = Ports(
        metrics=metrics,
        load_tester=tester,
        router=SimulatedRouter(fleet),
        advisor=advisor,
        notifier=RecordingNotifier(),
        cluster=cluster,
        clock=clock,
        forecaster=SimulatedForecaster(fleet.traffic),
    )
    if hpa:  # an HPA owns the replicas: Shiftlight sees it and defers (it still tunes for elastic replicas)
        cluster.autoscalers[str(target)] = "HorizontalPodAutoscaler/vllm"
    # the policy file sizes the replicas (headroom, scale-down stabilisation) and loads the capacity probes;
    # the scenario bounds them, as a TunedService's spec.replicas does
    spec = CycleSpec(
        windows=fleet.traffic.windows, replicas=ReplicaBounds(min_replicas=s.min_replicas, max_replicas=s.max_replicas)
    )
    reconciler = cycle_for(spec, policy, CycleSettings(observe_window_s=s.cycle_s), ports)
    return _ShiftlightRig(reconciler, metrics, cluster, tester)


@dataclass
class _CapacityEvidence:
    """Per window, what the probes and production show one replica holds: the capacity probed for the config serving
    the window, and production's highest per-replica rate in a cycle within the SLO on a mix no lighter than the
    probe's."""

    held: dict[str, float] = field(default_factory=dict)  # window -> production's highest rate within the SLO
    probed: dict[str, tuple[float, str]] = field(default_factory=dict)  # window -> (capacity probed, config)

    def observe(self, window: str, status: TargetStatus, ticks: Sequence[FleetTick]) -> None:
        """One cycle's ticks in ``window``, while the config serving it is the one its schedule entry probed."""
        entry = status.schedule_for(window)
        if entry is None or not entry.capacity_rps or entry.config.key() != status.active_config.key():
            return
        self.probed[window] = (entry.capacity_rps, entry.config.label())
        rate = production_rate_held(ticks)
        if rate is not None and ticks and tokens_per_request(ticks[-1].shape) >= 0.99 * tokens_per_request(entry.shape):
            self.held[window] = max(self.held.get(window, 0.0), rate)

    def notes(self) -> list[str]:
        """One note per window with either figure."""
        notes = []
        for name in sorted(set(self.held) | set(self.probed)):
            probe = f"{self.probed[name][0]:.2f} req/s ({self.probed[name][1]})" if name in self.probed else "none"
            prod = f"{self.held[name]:.2f} req/s" if name in self.held else "none"
            notes.append(
                f"capacity per replica, window {name}: probe {probe}; production held {prod} (the most per ready "
                f"replica over a cycle within the SLO on a mix no lighter than the probe's)"
            )
        return notes


def _track_trajectory(
    trajectory: dict[WindowKey, tuple[str, int]], ticks: Sequence[FleetTick], window_names: Callable[[datetime], str]
) -> None:
    """Per window of each day: the stable config at the last tick and the most replicas (all variants) in a tick."""
    for t in ticks:
        key = (t.start.date().isoformat(), window_names(t.start))
        stable_tick = t.variants.get("stable")
        label = stable_tick.config.label() if stable_tick and stable_tick.config else "-"
        replicas = sum(v.replicas for v in t.variants.values())
        trajectory[key] = (label, max(trajectory.get(key, (label, 0))[1], replicas))


def _record_scale_reasons(
    result: Result, peaks: dict[WindowKey, int], key: WindowKey, actions: Sequence[Action]
) -> None:
    """The reason of the stable variant's largest scaling in the window ``key`` so far (the latest on a tie)."""
    for action in actions:
        if isinstance(action, Scale) and action.variant == "stable":
            peak = peaks.get(key, 0)
            if action.replicas >= peak:
                peaks[key] = action.replicas
                result.scale_reasons[key] = f"{action.replicas}: {action.reason}"


@dataclass
class _HpaOwner:
    """An HPA on the stable Deployment beside Shiftlight: it scales on the stable variant's share of the load,
    rollout or not, towards a target set from the active config's capacity on the week's busiest shape."""

    s: WeekSettings
    perf: PerformanceModel
    slo: SLO
    busiest: TrafficShape
    hpa: Hpa
    targets: dict[str, float] = field(default_factory=dict)  # config key -> in-flight requests per replica

    def scale(
        self, fleet: SimulatedFleet, metrics: SimulatedMetrics, target: TargetRef, now: datetime, status: TargetStatus
    ) -> TargetStatus:
        """One HPA evaluation at ``now``; the status with the replicas it set (``status`` when it keeps them)."""
        active = status.active_config
        if active.key() not in self.targets:
            self.targets[active.key()] = self.s.hpa_utilisation * capacity_streams(
                self.perf, active, self.busiest, self.slo
            )
        self.hpa.target = max(self.targets[active.key()], 0.5)
        stable = fleet.variant("stable")
        assert stable is not None
        share = (100 - fleet.candidate_weight) / 100
        conc = _observed_concurrency(metrics, target, now, self.s.cycle_s) * share
        want = self.hpa.desired(now, stable.replicas, fleet.ready_replicas("stable"), conc)
        if want == stable.replicas:
            return status
        fleet.scale("stable", want)
        return status.model_copy(update={"replicas": want})


def _shiftlight_notes(
    result: Result, status: TargetStatus, tester: CountingLoadTester, evidence: _CapacityEvidence, scaling_mode: str
) -> list[str]:
    """The week's schedule, switching and trial cost, capacity evidence and rollbacks (the trajectory aside)."""
    windows = ", ".join(f"{e.window}={e.config.label()}" for e in status.schedule)
    notes = [
        f"schedule: {windows}",
        f"{result.switches} promotions, {result.rollbacks} rollbacks, scaling: {scaling_mode}; "
        f"{result.candidate_gpu_seconds / 3600:.1f} GPU-hours on rollout candidates, "
        f"{result.trial_gpu_seconds / 3600:.1f} on {result.trials} canary trials (counted), "
        f"mean {result.replica_seconds / max(result.seconds, 1):.1f} replicas",
    ]
    if tester.by_kind:
        notes.append("canary trials by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(tester.by_kind.items())))
    notes.extend(evidence.notes())
    notes.extend(line[:300] for line in status.history if "rolled back" in line)
    return notes


def run_shiftlight(
    s: WeekSettings, policy: Policy, perf: PerformanceModel, first_replicas: int, scaling_mode: str
) -> Result:
    fleet, clock = _fleet(s, STOCK, first_replicas, policy)
    capacity = scaling_mode == "capacity"
    target = TargetRef("bench", "shiftlight", s.model)
    rig = _shiftlight_rig(s, policy, perf, fleet, clock, target, hpa=not capacity)
    status = TargetStatus(replicas=first_replicas)
    hpa = Hpa(1.0, s.min_replicas, s.max_replicas, s.hpa_tolerance, s.hpa_scale_down_window_s)
    owner = _HpaOwner(s, perf, policy.slo, peak_shape(fleet.traffic), hpa)
    result = _result("shiftlight" if capacity else "shiftlight+hpa", "per window", fleet)
    trajectory: dict[WindowKey, tuple[str, int]] = {}
    peaks: dict[WindowKey, int] = {}
    evidence = _CapacityEvidence()
    end = WEEK_START + timedelta(days=s.days)
    while clock.now() < end:
        before = clock.now()
        fleet.advance(s.cycle_s)
        ticks = fleet.ticks_between(before, clock.now())
        result.add(ticks)
        evidence.observe(result.window_names(before), status, ticks)
        _track_trajectory(trajectory, ticks, result.window_names)
        cycle = rig.reconciler.reconcile(target, status)
        status = cycle.status
        key = (clock.now().date().isoformat(), result.window_names(clock.now()))
        _record_scale_reasons(result, peaks, key, cycle.plan.actions)
        if not capacity:  # the HPA scales the stable Deployment on its share of the load, rollout or not
            status = owner.scale(fleet, rig.metrics, target, clock.now(), status)
    result.switches = sum(1 for c in rig.cluster.calls if c.op == "promote")
    result.rollbacks = sum(1 for h in status.history if "rolled back" in h)
    result.trial_gpu_seconds = rig.tester.gpu_seconds
    result.trials = rig.tester.trials
    result.notes.extend(_shiftlight_notes(result, status, rig.tester, evidence, scaling_mode))
    result.trajectory = trajectory
    result.notes.append(
        "trajectory (window: stable config at its end, peak replicas): "
        + "; ".join(f"{d[5:]} {w}: {c} x{p}" for (d, w), (c, p) in trajectory.items())
    )
    return result


def tokens_per_request(shape: TrafficShape) -> float:
    return shape.prompt_tokens.mean + shape.output_tokens.mean


def production_rate_held(ticks: Sequence[FleetTick]) -> float | None:
    """The stable variant's requests/s per ready replica over one cycle's ticks, when it served all of its
    requests within the SLO (at least 99 % of them) with no candidate beside it: a rate production shows one
    replica holds at the SLO. None otherwise."""
    requests = good = 0
    replica_s = seconds = 0.0
    for t in ticks:
        if any(v.variant == "candidate" and v.replicas for v in t.variants.values()):
            return None
        v = t.variants.get("stable")
        if v is None or v.ready_replicas <= 0:
            return None
        requests += v.requests
        good += v.good_requests
        replica_s += v.ready_replicas * t.seconds
        seconds += t.seconds
    if not requests or replica_s <= 0 or good < 0.99 * requests:
        return None
    return requests / replica_s


def window_table(
    shift: Result, plans: Mapping[str, Sequence[tuple[int, int]]], configs: Sequence[EngineConfig], hours: int
) -> list[str]:
    """Per window of each day: Shiftlight's config, peak replicas and SLO attainment beside each ideal plan's
    config(s) and peak replicas, and the scaling decision behind Shiftlight's peak."""
    planned: dict[str, dict[WindowKey, tuple[set[str], int, float]]] = {name: {} for name in plans}
    for name, plan in plans.items():
        for h, (i, n) in enumerate(plan[:hours]):
            when = WEEK_START + timedelta(hours=h)
            key = (when.date().isoformat(), shift.window_names(when))
            labels, peak, gpu_h = planned[name].get(key, (set(), 0, 0.0))
            tp = configs[i].tensor_parallel_size
            planned[name][key] = (labels | {configs[i].label()}, max(peak, n), gpu_h + n * tp)
    lines = []
    for key, (label, peak) in shift.trajectory.items():
        requests, good = shift.windows.get(key, (0.0, 0.0))
        gpu_s, _span = shift.window_gpu_s.get(key, (0.0, 0.0))
        cols = [
            f"{key[0][5:]} {key[1]:<9} shiftlight {label} x{peak} {gpu_s / 3600:.1f} GPU-h "
            f"{attainment(requests, good):.1%}"
        ]
        for name in plans:
            labels, n, gpu_h = planned[name].get(key, (set(), 0, 0.0))
            cols.append(f"{name} {'/'.join(sorted(labels))} x{n} {gpu_h:.0f} GPU-h")
        lines.append(" | ".join(cols))
        if key in shift.scale_reasons:
            lines.append(f"    peak set by: {shift.scale_reasons[key][:400]}")
    return lines


# ----- report --------------------------------------------------------------------------------------------------------
def report(results: list[Result], out: Callable[[str], None]) -> None:
    head = (
        f"{'strategy':<15} {'GPU-hours':>9} {'prod':>7} {'cand.':>6} {'trials':>6} {'SLO att.':>8} {'worst win.':>10} "
        f"{'switch':>6} {'rollb.':>6} {'goodput tok/GPU-h':>17}  qualifies  config"
    )
    out(head)
    for r in results:
        worst, where = r.worst
        out(
            f"{r.name:<15} {r.gpu_hours:>9.1f} {r.production_gpu_hours:>7.1f} {r.candidate_gpu_seconds / 3600:>6.1f} "
            f"{r.trial_gpu_seconds / 3600:>6.1f} {r.attainment:>8.2%} {worst:>10.2%} {r.switches:>6} "
            f"{r.rollbacks:>6} {r.goodput_per_gpu_hour:>17,.0f}  {'yes' if r.qualifies else 'NO':<9}  {r.config}"
        )
        if where is not None and worst < 1.0:
            out(f"{'':<15} worst window: {where[0]} {where[1]}")
        for note in r.notes:
            out(f"{'':<15} {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="workstation")
    parser.add_argument("--seed", type=int, default=None, help="default: the scenario's")
    parser.add_argument("--load-scale", type=float, default=None, help="default: the scenario's")
    parser.add_argument("--days", type=float, default=WeekSettings.days)
    parser.add_argument(
        "--shiftlight-scaling", choices=["capacity", "hpa", "both"], default=WeekSettings.shiftlight_scaling
    )
    parser.add_argument(
        "--probe-loop", choices=["open", "closed"], default=None, help="capacity probes' load (default: the scenario's)"
    )
    parser.add_argument(
        "--trajectory", action="store_true", help="print Shiftlight's per-window trajectory beside the ideal plans'"
    )
    parser.add_argument(
        "--uncalibrated", action="store_true", help="the assumed efficiency constants, not the shipped calibrations"
    )
    args = parser.parse_args(argv)
    calibrated_before = perf_module.CALIBRATED_BY_DEFAULT
    perf_module.CALIBRATED_BY_DEFAULT = not args.uncalibrated  # read by every PerformanceModel built from here on
    try:
        return run_scenario(args)
    finally:
        perf_module.CALIBRATED_BY_DEFAULT = calibrated_before


def run_scenario(args: argparse.Namespace) -> int:
    base = SCENARIOS[args.scenario]
    s = replace(
        base,
        seed=args.seed if args.seed is not None else base.seed,
        load_scale=args.load_scale if args.load_scale is not None else base.load_scale,
        days=args.days,
        shiftlight_scaling=args.shiftlight_scaling,
        probe_loop=args.probe_loop or base.probe_loop,
    )
    model_kind = "uncalibrated" if args.uncalibrated else "calibrated"
    profile = s.profile if isinstance(s.profile, str) else s.profile.name
    print(
        f"scenario {args.scenario}: {s.model} on {s.gpu}, policy {s.policy_path.name}, traffic {profile},"
        f" {model_kind} model"
    )
    started = time.perf_counter()
    policy = week_policy(s)
    perf = PerformanceModel(load_model(s.model), load_gpu(s.gpu))
    print(f"performance model: {'calibrated' if perf.calibration is not None else 'uncalibrated'}")
    sizing = ideal_sizing(perf, policy, s)
    hours = math.ceil(s.days * 24 - 1e-9)
    best_index = sizing.best_index(hours)
    best = sizing.configs[best_index]
    ceiling = sizing.ceiling_plan(hours)
    planned_static, planned_stock = sizing.static_gpu_hours(best_index, hours), sizing.static_gpu_hours(0, hours)
    planned_ceiling = sum(n * sizing.configs[i].tensor_parallel_size for i, n in ceiling)
    print(
        f"ideal best static config: {best.label()} (the fewest ideal GPU-hours of {len(sizing.configs)} configs: "
        f"{planned_static:.0f} planned vs {planned_stock:.0f} for stock, perf model)"
    )
    print(
        f"ceiling: the best config for every hour, ideally sized, plans {planned_ceiling:.0f} GPU-hours "
        f"({planned_static / planned_ceiling:.2f}x fewer than the ideal static config) with "
        f"{plan_switches(ceiling)} switches"
    )
    traffic = week_traffic(s)
    busiest = peak_shape(traffic)
    print(f"traffic: {s.days:g} days, load scale {s.load_scale:g}, busiest hour {busiest.describe()}")
    stock_streams = s.hpa_utilisation * capacity_streams(perf, STOCK, busiest, policy.slo)
    # every strategy starts with enough replicas of its first config for the first hour: the ideal schedule's
    # (stock's, for stock and for Shiftlight, which starts on stock); an HPA target set on the busiest (day) shape
    # would start the night's long documents on far too few
    first_replicas = sizing.replicas[0][_slot(0)]
    stock = run_static(s, "stock+hpa", STOCK, max(stock_streams, 0.5), policy, first_replicas)
    static = run_plan(s, "ideal-static", sizing.static_plan(best_index, hours), sizing.configs, policy)
    top = run_plan(s, "ceiling", ceiling, sizing.configs, policy)
    results = [stock, static, top]
    modes = ["capacity", "hpa"] if s.shiftlight_scaling == "both" else [s.shiftlight_scaling]
    for mode in modes:
        results.append(run_shiftlight(s, policy, perf, first_replicas, mode))
    report(results, print)
    shift = results[3]
    for extra in results[4:]:
        print(
            f"{extra.name}: GPU-hours vs stock+HPA "
            f"{gpu_hour_ratio(stock.gpu_hours, extra.gpu_hours, counts=stock.qualifies and extra.qualifies)}, "
            f"vs ideal best static "
            f"{gpu_hour_ratio(static.gpu_hours, extra.gpu_hours, counts=static.qualifies and extra.qualifies)}, "
            f"SLO attainment {extra.attainment:.1%} (worst window {extra.worst[0]:.1%})"
        )
    if getattr(args, "trajectory", False):
        plans = {"ceiling": ceiling, "ideal-static": sizing.static_plan(best_index, hours)}
        for line in window_table(shift, plans, sizing.configs, hours):
            print(line)
    if not shift.qualifies:
        print(
            f"shiftlight does not qualify (needs >= {QUALIFY_OVERALL:.0%} overall, >= {QUALIFY_WINDOW:.0%} per window)"
        )
    print(f"({time.perf_counter() - started:.0f} s)")
    print(
        schedule_line(
            static_hours=static.gpu_hours,
            hours=shift.gpu_hours,
            candidate_hours=shift.candidate_gpu_seconds / 3600,
            trial_hours=shift.trial_gpu_seconds / 3600,
            trials=shift.trials,
            promotions=shift.switches,
            rollbacks=shift.rollbacks,
            counts=static.qualifies and shift.qualifies,
        )
    )
    print(
        bounds_line(
            stock_hours=stock.gpu_hours,
            ceiling_hours=top.gpu_hours,
            floor_hours=max(s.min_replicas, 1) * s.days * 24 * min(c.tensor_parallel_size for c in sizing.configs),
            stock_counts=stock.qualifies,
        )
    )
    print(
        week_line(
            stock=gpu_hour_ratio(stock.gpu_hours, shift.gpu_hours, counts=stock.qualifies and shift.qualifies),
            static=gpu_hour_ratio(static.gpu_hours, shift.gpu_hours, counts=static.qualifies and shift.qualifies),
            ceiling=gpu_hour_ratio(static.gpu_hours, top.gpu_hours, counts=static.qualifies and top.qualifies),
            attainment_overall=shift.attainment,
            attainment_worst=shift.worst[0],
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
