"""What the operator's decide histograms read from a cycle: the wall time of the pure decide step and the CPU time
of the thread that ran it. A decide that waits (as one does for the interpreter lock held by the operator's other
threads) shows the wait in the wall time only."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controller import decide
from controller.clock import FakeClock
from controller.decide import Rules
from controller.policy import Policy
from controller.reconcile import Reconciler
from tests.support.rollout_fakes import NOW, TARGET, mid_rollout_ports, rolling


def reconciler() -> Reconciler:
    return Reconciler(mid_rollout_ports(FakeClock(NOW)), Rules.from_policy(Policy()))


@pytest.mark.parametrize(
    ("wait_s", "busy_s"),
    [
        (0.0, 0.0),  # the decide as it is
        (0.08, 0.0),  # waiting (no CPU of its own), as for the interpreter lock
        (0.0, 0.03),  # computing
        (0.08, 0.03),  # both
    ],
)
def test_the_decide_step_is_timed_in_wall_and_thread_cpu_time(
    wait_s: float, busy_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = decide.plan

    def slowed(**kwargs: Any) -> Any:
        time.sleep(wait_s)
        spin_until = time.thread_time() + busy_s
        while time.thread_time() < spin_until:
            pass
        return plan(**kwargs)

    monkeypatch.setattr(decide, "plan", slowed)
    r = reconciler()
    assert r.last_decide_s is None and r.last_decide_cpu_s is None
    r.reconcile(TARGET, rolling())
    wall, cpu = r.last_decide_s, r.last_decide_cpu_s
    assert wall is not None and cpu is not None
    assert cpu >= busy_s
    assert wall >= wait_s + cpu * 0.9  # the thread's CPU time is within the wall time (clocks of different grain)
    assert cpu < busy_s + 0.05  # the wait is not CPU
