"""Reliability scenarios at fleet scale: hundreds of TunedServices, each its own :class:`SimWorld` (its simulated
fleet, reconciler and status), all on fake clocks.

One world is tuned from scratch; the others are copies of it, taken along its way (trials and rollouts in flight)
or at its end (steady, tuned), so a fleet of 500 costs one tuning. Canary trials are measured once per request in
this process (:class:`SharedCanary`: every copy replays the same traffic, so its trials are the same requests) and
counted per target above that (:class:`CountingCanary`), which is what the operator asked of its canaries.

Each scenario runs the same copies twice, with and without the fault, and compares what reached production per
target: candidates deployed, promotions, rollbacks, route weights and trials asked.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from controller.clock import FakeClock
from controller.decide.search.candidates import CandidateCache
from controller.domain.observation import Observation, TargetRef
from controller.domain.phases import Phase
from controller.domain.trial import TrialResult
from controller.errors import TemporaryError
from controller.ports import LoadTester, MetricsSource, TrialRequest
from controller.simulator.perf import PerformanceModel
from controller.testing.faults import ConflictBudget, ConflictingCluster, ConflictingRouter
from controller.trials.cache import CachedTrials, MemoryStore, TrialCache, TrialKey
from tests.support.faults.effects import CountingCanary
from tests.support.faults.world import Outcome, SimWorld, WorldSettings

#: TunedServices in the large scenarios (the issue's fleet).
SCALE_TARGETS = 500


# ----- the shared stand-ins -------------------------------------------------------------------------------------------
class SharedCanary:
    """The simulated canary, measuring each distinct request once for all the copies (they differ only in name)."""

    def __init__(self, inner: LoadTester) -> None:
        self.inner = inner
        self.results: dict[str, TrialResult] = {}
        self.measured = 0

    def run(self, request: TrialRequest) -> TrialResult:
        key = repr((request.config.key(), request.shape, request.slo, request.budget, request.seed, request.loop))
        if key not in self.results:
            self.measured += 1
            self.results[key] = self.inner.run(request)
        return self.results[key]


@dataclass
class ApiOutage(ConflictBudget):
    """The Kubernetes API answering 429 and 500 (in turn) to every write while the world's clock is inside
    ``window``; shared by every target's cluster and router wrappers (one API server)."""

    window: tuple[datetime, datetime] | None = None
    now: Callable[[], datetime] | None = None
    answered: dict[int, int] = field(default_factory=lambda: {429: 0, 500: 0})

    def active(self) -> bool:
        if self.window is None or self.now is None:
            return False
        return self.window[0] < self.now() <= self.window[1]

    def check(self, what: str) -> None:
        if self.active():
            code = 429 if self.answered[429] <= self.answered[500] else 500
            self.answered[code] += 1
            self.raised.append(what)
            text = "Too Many Requests" if code == 429 else "Internal Server Error"
            raise TemporaryError(f"{code} {text} on {what}", delay_s=1.0 if code == 429 else 5.0)


@dataclass
class Slowness:
    """Prometheus taking ``delay_s`` per query while a world's clock is inside ``window`` (shared by every target)."""

    delay_s: float
    window: tuple[datetime, datetime] | None = None
    queries: int = 0
    slow: int = 0


class SlowPrometheus:
    """A target's metrics source whose queries take :class:`Slowness`'s delay on the target's (fake) clock."""

    def __init__(self, inner: MetricsSource, clock: FakeClock, slowness: Slowness) -> None:
        self.inner = inner
        self.clock = clock
        self.slowness = slowness

    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        s = self.slowness
        s.queries += 1
        if s.window is not None and s.window[0] < self.clock.now() <= s.window[1]:
            s.slow += 1
            self.clock.advance(s.delay_s)
        return self.inner.observe(target, start=start, end=end)


class QueuedTrials:
    """Background trials as the operator runs them (one worker per TunedService, one trial at a time, in order),
    on the fake clock: :meth:`work` finishes the trial at the head of the queue. A leader that dies loses the
    queue; the results already measured are in the trial cache (the TunedService's ConfigMap), which survives."""

    def __init__(self, inner: LoadTester) -> None:
        self.inner = inner
        self.queue: list[tuple[TrialRequest, _Handle]] = []

    def start(self, request: TrialRequest) -> _Handle:
        handle = _Handle()
        self.queue.append((request, handle))
        return handle

    def run(self, request: TrialRequest) -> TrialResult:
        return self.inner.run(request)

    def work(self) -> None:
        if self.queue:
            request, handle = self.queue.pop(0)
            handle.result = self.inner.run(request)


class _Handle:
    def __init__(self) -> None:
        self.result: TrialResult | None = None

    def poll(self) -> TrialResult | None:
        return self.result


# ----- the fleet of worlds -------------------------------------------------------------------------------------------
def _shared_memo(world: SimWorld, keep: Sequence[object]) -> dict[int, Any]:
    """``copy.deepcopy`` memo that keeps ``keep``, the (immutable, large) performance models and the optimizers'
    candidate caches (thread-safe, bounded, whatever they drop is rebuilt the same) shared, and gives each copy its
    own locks."""
    memo: dict[int, Any] = {id(o): o for o in keep}
    seen: set[int] = set()

    def walk(o: object, depth: int) -> None:
        if id(o) in seen or depth > 8:
            return
        seen.add(id(o))
        if isinstance(o, PerformanceModel | CandidateCache):  # immutable, or a pure cache of what is rebuilt the same
            memo[id(o)] = o
            return
        if type(o).__name__ in ("lock", "RLock"):
            memo[id(o)] = threading.Lock()
            return
        if isinstance(o, dict):
            values: Any = list(o.values())
        elif isinstance(o, list | tuple):
            values = list(o)
        elif hasattr(o, "__dict__"):
            values = list(vars(o).values())
        else:
            return
        for v in values:
            walk(v, depth + 1)

    walk(world, 0)
    return memo


_MEMOS: dict[int, tuple[SimWorld, dict[int, Any]]] = {}


def clone(world: SimWorld, keep: Sequence[object]) -> SimWorld:
    """A deep copy of ``world`` sharing ``keep``, its performance models and nothing else."""
    known = _MEMOS.get(id(world))
    if known is None or known[0] is not world:
        known = _MEMOS[id(world)] = (world, _shared_memo(world, keep))
    return copy.deepcopy(world, dict(known[1]))


def _tuned(world: SimWorld) -> bool:
    return world.status.phase is Phase.OBSERVING and bool(world.promoted())


@dataclass
class Effects:
    """What reached one target's production (and its canary) after the copy was taken."""

    deploys: list[tuple[str, str]]
    promotes: int
    retires: int
    weights: list[int]
    asked: list[str]
    phase: Phase
    promoted: list[str]


def _effects(world: SimWorld, since: tuple[int, int, int], canary: CountingCanary) -> Effects:
    calls, routes, asked = since
    ops = world.sim_cluster.calls[calls:]
    return Effects(
        deploys=[(c.variant, c.config.key()) for c in ops if c.op == "deploy" and c.config is not None],
        promotes=sum(1 for c in ops if c.op == "promote"),
        retires=sum(1 for c in ops if c.op == "retire"),
        weights=[w for _, w in world.sim_router.history[routes:]],
        asked=[r.config.key() for r in canary.requests[asked:]],
        phase=world.status.phase,
        promoted=[h.split(" promoted ", 1)[1].split(":", 1)[0] for h in world.promoted()],
    )


@dataclass
class Target:
    world: SimWorld
    canary: CountingCanary
    since: tuple[int, int, int]
    in_flight: bool
    written: list[bool] = field(default_factory=list)
    """Per cycle: whether its status write went through."""

    def effects(self) -> Effects:
        return _effects(self.world, self.since, self.canary)


class ScaleFleet:
    """``targets`` TunedServices: ``in_flight`` copies of one world taken along its tuning (trials, a candidate
    deployed, each rollout step) and the rest copies of it tuned and steady. ``wrap_*`` are installed in the first
    world and shared by every copy (one API server, one Prometheus)."""

    def __init__(
        self,
        targets: int,
        in_flight: int,
        *,
        keep: Sequence[object] = (),
        wrap_cluster: Any = None,
        wrap_router: Any = None,
        wrap_metrics: Callable[[SimWorld], None] | None = None,
        settings: WorldSettings | None = None,
        queued: bool = False,
    ) -> None:
        self.shared_canary: SharedCanary | None = None
        self.cache_stores: list[MemoryStore] = []

        def canary_chain(inner: LoadTester) -> LoadTester:
            self.shared_canary = SharedCanary(inner)
            counting = CountingCanary(self.shared_canary)
            holder["canary"] = counting
            if not queued:
                return counting
            store = MemoryStore()
            holder["store"] = store
            cached = CachedTrials(
                counting,
                TrialCache(store),
                key=lambda r: TrialKey.of(
                    model=r.target.model, gpu_type="sim", engine_version="sim", config=r.config, shape=r.shape
                ),
                gated=lambda c: False,
            )
            holder["queue"] = QueuedTrials(cached)
            return holder["queue"]

        holder: dict[str, Any] = {}
        seed = SimWorld(settings, wrap_load_tester=canary_chain, wrap_cluster=wrap_cluster, wrap_router=wrap_router)
        if wrap_metrics is not None:
            wrap_metrics(seed)
        self.keep = [*keep, self.shared_canary, seed.perf]
        snapshots: list[SimWorld] = []
        for _ in range(60):
            if queued:
                holder["queue"].work()
            snapshots.append(clone(seed, self.keep))
            seed.cycle()
            if _tuned(seed):
                break
        self.seed = seed
        self.all_snapshots = snapshots
        self.seed_holder = holder
        # the in-flight copies, spread over the tuning (the first cycles decide trials, the last ones roll out)
        picks = [round(i * (len(snapshots) - 1) / max(in_flight - 1, 1)) for i in range(in_flight)]
        self.snapshots = [snapshots[i] for i in picks]
        self.steady = clone(seed, self.keep)
        self.targets_n = targets

    def build(self) -> list[Target]:
        out = []
        for i in range(self.targets_n):
            source = self.snapshots[i] if i < len(self.snapshots) else self.steady
            world = clone(source, self.keep)
            canary = _canary_of(world)
            since = (len(world.sim_cluster.calls), len(world.sim_router.history), len(canary.requests))
            out.append(Target(world, canary, since, in_flight=i < len(self.snapshots)))
        return out


def _canary_of(world: SimWorld) -> CountingCanary:
    tester: Any = world.ports.load_tester
    while not isinstance(tester, CountingCanary):
        tester = tester.inner
    return tester


def _queue_of(world: SimWorld) -> QueuedTrials | None:
    tester: Any = world.ports.load_tester
    return tester if isinstance(tester, QueuedTrials) else None


def step(t: Target, *, write_refused: bool = False, work: bool = True) -> None:
    """One cycle of one target: its queued trial worker, the fleet, the reconcile, the status write."""
    queue = _queue_of(t.world)
    if queue is not None and work:
        queue.work()
    previous = t.world.status
    t.world.cycle()
    if write_refused:
        t.world.status = previous  # the status patch was answered 429/500: the CR keeps the previous status
    t.written.append(not write_refused)


def _same(a: Effects, b: Effects) -> bool:
    return (a.deploys, a.promotes, a.retires, a.asked, a.promoted) == (
        b.deploys,
        b.promotes,
        b.retires,
        b.asked,
        b.promoted,
    )


# ----- 429 and 500 for a minute ------------------------------------------------------------------------------------
def scenario_api_outage_at_scale(
    targets: int = SCALE_TARGETS, in_flight: int = 10, cycles: int = 24, steady_cycles: int = 6
) -> Outcome:
    """The Kubernetes API answers 429 and 500 to every write (Deployments, the HTTPRoute, Events, status patches)
    for one minute of every target's clock (its third cycle), while ``in_flight`` of them are tuning or rolling out.
    The steady targets run ``steady_cycles`` cycles, those in flight ``cycles`` (until they have promoted)."""
    outage = ApiOutage()
    fleet = ScaleFleet(
        targets,
        in_flight,
        keep=[outage],
        wrap_cluster=lambda c: ConflictingCluster(c, outage),
        wrap_router=lambda r: ConflictingRouter(r, outage),
    )
    runs: dict[str, list[Target]] = {}
    recovered: list[int] = []
    for arm in ("reference", "outage"):
        fleet_targets = fleet.build()
        windows: dict[int, tuple[datetime, datetime]] = {}
        for index in range(cycles):
            for t in fleet_targets:
                if not t.in_flight and index >= steady_cycles:
                    continue
                w = t.world
                if arm == "outage" and index == 2:
                    windows[id(w)] = (w.clock.now(), w.clock.now() + timedelta(seconds=60))
                outage.window, outage.now = windows.get(id(w)), w.clock.now
                refused = (
                    outage.window is not None
                    and outage.window[0] < w.clock.now() + timedelta(seconds=w.settings.cycle_s) <= outage.window[1]
                )
                step(t, write_refused=refused)
            outage.window = None
        runs[arm] = fleet_targets
    ref, hit = runs["reference"], runs["outage"]
    for t in hit:
        written = t.written
        first_refused = written.index(False) if False in written else None
        if first_refused is not None:
            last_refused = len(written) - 1 - written[::-1].index(False)
            after = written[last_refused + 1 :]
            recovered.append(after.index(True) + 1 if True in after else cycles)
    same = [_same(a.effects(), b.effects()) for a, b in zip(ref, hit, strict=True)]
    flight = [(a.effects(), b.effects()) for a, b in zip(ref, hit, strict=True) if b.in_flight]
    steady_writes = sum(
        len(b.effects().deploys) + b.effects().promotes + len(b.effects().weights) for b in hit if not b.in_flight
    )
    twice = sum(
        max(0, len(b.deploys) - len(a.deploys)) + max(0, b.promotes - a.promotes) + max(0, len(b.asked) - len(a.asked))
        for a, b in flight
    )
    lost = sum(
        max(0, len(a.deploys) - len(b.deploys)) + max(0, a.promotes - b.promotes) + max(0, len(a.asked) - len(b.asked))
        for a, b in flight
    )
    hit_targets = sum(1 for t in hit if False in t.written)
    promoted = sum(1 for _, b in flight if b.promoted)
    data = {
        "answered": dict(outage.answered),
        "targets_hit": hit_targets,
        "same": same,
        "twice": twice,
        "lost": lost,
        "steady_writes": steady_writes,
        "recovered_cycles": recovered,
        "promoted": promoted,
        "in_flight": len(flight),
        "phases": [b.phase for _, b in flight],
    }
    return Outcome(
        scenario=f"API 429/500 for a minute, {targets} targets",
        fault=(
            f"every write to the Kubernetes API answered 429 or 500 for one minute ({outage.answered[429]} x 429, "
            f"{outage.answered[500]} x 500, {hit_targets} status patches refused) while {len(flight)} targets were "
            "tuning or rolling out"
        ),
        outcome=(
            f"{sum(same)}/{len(same)} targets did in production exactly what they did without the outage; "
            f"{promoted}/{len(flight)} in flight promoted"
        ),
        exposure="none beyond the step each rollout was at (held for the minute)",
        recovery=f"every target wrote its status again within {max(recovered, default=0)} cycle(s) of the outage",
        lost=f"nothing: {lost} effects lost, {twice} applied twice, {steady_writes} writes by steady targets",
        data=data,
    )


# ----- the leader killed with trials queued ---------------------------------------------------------------------------
def scenario_leader_killed_at_scale(queued: int = 50, cycles: int = 30) -> Outcome:
    """``queued`` TunedServices each decided a round of trials and have them queued on their worker (one measured,
    the rest waiting); the leader dies mid-cycle (the status write of that cycle is lost with it) and a new leader
    takes over from the persisted statuses and the trial cache."""
    fleet = ScaleFleet(queued, 0, queued=True)
    # the copy taken when the round's first trial has been measured and the others wait in the queue
    base = next(iter(_snapshots_with_queue(fleet)), None)
    assert base is not None, "no cycle of the tuning had trials queued"
    runs: dict[str, list[Target]] = {}
    killed_at: dict[str, int] = {}
    for arm in ("reference", "killed"):
        targets = []
        for _ in range(queued):
            world = clone(base, fleet.keep)
            canary = _canary_of(world)
            since = (len(world.sim_cluster.calls), len(world.sim_router.history), len(canary.requests))
            targets.append(Target(world, canary, since, in_flight=True))
        waiting = 0
        for index in range(cycles):
            for t in targets:
                if arm == "killed" and index == 0:
                    queue = _queue_of(t.world)
                    assert queue is not None
                    waiting += len(queue.queue)
                kill = arm == "killed" and index == 0
                step(t, write_refused=kill, work=not kill)  # killed before its worker took the next trial
                if arm == "killed" and index == 0:
                    queue = _queue_of(t.world)
                    assert queue is not None
                    queue.queue.clear()  # the worker thread dies with the leader
                    t.world.restart()
        killed_at[arm] = waiting
        runs[arm] = targets
    ref, hit = runs["reference"], runs["killed"]
    pairs = [(a.effects(), b.effects()) for a, b in zip(ref, hit, strict=True)]
    same = sum(1 for a, b in pairs if _same(a, b))
    measured_twice = sum(sum(max(0, b.asked.count(k) - a.asked.count(k)) for k in set(b.asked)) for a, b in pairs)
    missing = sum(sum(max(0, a.asked.count(k) - b.asked.count(k)) for k in set(a.asked)) for a, b in pairs)
    promoted = sum(1 for _, b in pairs if b.promoted)
    delays = [_promotion_cycle(b_t) - _promotion_cycle(a_t) for a_t, b_t in zip(ref, hit, strict=True)]
    data = {
        "queued": killed_at["killed"],
        "same": same,
        "measured_twice": measured_twice,
        "missing": missing,
        "promoted": promoted,
        "delays": delays,
        "restarts": sum(t.world.restarts for t in hit),
    }
    return Outcome(
        scenario=f"leader killed with {killed_at['killed']} trials queued",
        fault=(
            f"{queued} targets each with a round of trials queued on its worker ({killed_at['killed']} waiting); "
            "the leader dies mid-cycle: that cycle's status writes and the queues are lost, a new leader takes over"
        ),
        outcome=(
            f"{same}/{queued} targets measured, deployed and promoted the same as without the kill; "
            f"{promoted}/{queued} promoted"
        ),
        exposure="none (trials run on the canary pool; the route untouched)",
        recovery=f"promotion {max(delays, default=0)} cycle(s) later than without the kill",
        lost=(
            f"nothing: {missing} trials lost, {measured_twice} measured twice (results measured before the kill "
            "are served from the trial cache)"
        ),
        data=data,
    )


def _snapshots_with_queue(fleet: ScaleFleet) -> list[SimWorld]:
    """Copies of the seed's tuning taken when its queue held trials still to measure after one was measured."""
    found = []
    for snap in fleet.all_snapshots:
        queue, canary = _queue_of(snap), _canary_of(snap)
        if queue is not None and queue.queue and canary.requests and not any(r.fresh for r, _ in queue.queue):
            found.append(snap)
    return found


def _promotion_cycle(t: Target) -> int:
    for i, r in enumerate(t.world.records):
        if "Promote" in r.actions:
            return i
    return len(t.world.records)


# ----- Prometheus slow for five minutes -------------------------------------------------------------------------------
def scenario_prometheus_slow_at_scale(
    targets: int = SCALE_TARGETS,
    in_flight: int = 10,
    cycles: int = 24,
    steady_cycles: int = 9,
    delay_s: float = 2.0,
    minutes: int = 5,
) -> Outcome:
    """Every Prometheus query takes ``delay_s`` for ``minutes`` of every target's clock, from its third cycle. The
    steady targets run ``steady_cycles`` cycles, those in flight ``cycles`` (until they have promoted)."""
    prom = Slowness(delay_s)

    def wrap_metrics(world: SimWorld) -> None:
        world.ports = replace(world.ports, metrics=SlowPrometheus(world.ports.metrics, world.clock, prom))
        world.reconciler = world.build_reconciler()

    fleet = ScaleFleet(targets, in_flight, keep=[prom], wrap_metrics=wrap_metrics)
    runs: dict[str, list[Target]] = {}
    extra_s: dict[int, list[float]] = {}
    """Per target of the slow arm: seconds each cycle took beyond its 60 s of traffic."""
    queries_before = prom.queries
    per_cycle: list[float] = []
    for arm in ("reference", "slow"):
        fleet_targets = fleet.build()
        windows: dict[int, tuple[datetime, datetime]] = {}
        for index in range(cycles):
            q0, ran = prom.queries, 0
            for t in fleet_targets:
                if not t.in_flight and index >= steady_cycles:
                    continue
                ran += 1
                w = t.world
                if arm == "slow" and index == 2:
                    windows[id(w)] = (w.clock.now(), w.clock.now() + timedelta(minutes=minutes))
                prom.window = windows.get(id(w))
                began = w.clock.now()
                step(t)
                if arm == "slow":
                    extra = (w.clock.now() - began).total_seconds() - w.settings.cycle_s
                    extra_s.setdefault(id(t), []).append(extra)
            per_cycle.append((prom.queries - q0) / ran)
        runs[arm] = fleet_targets
    ref, hit = runs["reference"], runs["slow"]
    same = [_same(a.effects(), b.effects()) for a, b in zip(ref, hit, strict=True)]
    flight = [(a.effects(), b.effects()) for a, b in zip(ref, hit, strict=True) if b.in_flight]
    promoted = sum(1 for _, b in flight if b.promoted)
    slow_lengths = [x for lengths in extra_s.values() for x in lengths]
    last = [lengths[-1] for lengths in extra_s.values()]
    data = {
        "queries_per_target_cycle": max(per_cycle),
        "slow_queries": prom.slow,
        "longest_extra_s": max(slow_lengths),
        "last_cycle_extra_s": max(last),
        "same": same,
        "promoted": promoted,
        "queries": prom.queries - queries_before,
    }
    return Outcome(
        scenario=f"Prometheus slow for {minutes} minutes, {targets} targets",
        fault=(
            f"every query took {delay_s:g} s for {minutes} minutes ({prom.slow} slow queries, "
            f"{max(per_cycle):g} query per target per cycle)"
        ),
        outcome=(
            f"{sum(same)}/{len(same)} targets did in production exactly what they did with a fast Prometheus; "
            f"{promoted}/{len(flight)} in flight promoted"
        ),
        exposure=f"none (each cycle {max(slow_lengths):.0f} s longer while slow)",
        recovery=f"cycles back to their length once Prometheus answered fast ({max(last):.0f} s extra)",
        lost="nothing",
        data=data,
    )


__all__ = [
    "SCALE_TARGETS",
    "ApiOutage",
    "QueuedTrials",
    "ScaleFleet",
    "SharedCanary",
    "SlowPrometheus",
    "Slowness",
    "scenario_api_outage_at_scale",
    "scenario_leader_killed_at_scale",
    "scenario_prometheus_slow_at_scale",
]
