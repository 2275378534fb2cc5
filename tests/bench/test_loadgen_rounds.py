"""The load-generator bench's round design: a, b, b, a runs whose geometric-mean ratio cancels a linear drift."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench import loadgen


@pytest.mark.parametrize(
    ("index", "order"),
    [
        (0, ("ours", "bench", "bench", "ours")),
        (1, ("bench", "ours", "ours", "bench")),
        (2, ("ours", "bench", "bench", "ours")),
    ],
)
def test_round_order_mirrors_in_odd_rounds(index: int, order: tuple[str, ...]) -> None:
    assert loadgen.round_order(index) == order


@pytest.mark.parametrize(
    ("speed_at", "true_ratio"),
    [
        (lambda t: 1000.0, 1.0),  # a steady engine
        (lambda t: 1000.0 - 40.0 * t, 1.0),  # slowing down by 4 % a run
        (lambda t: 800.0 + 50.0 * t, 1.0),  # speeding up
        (lambda t: 1000.0 - 40.0 * t, 0.9),  # and a client 10 % slower than the other
    ],
)
def test_a_linear_drift_cancels_in_the_round_ratio(speed_at: object, true_ratio: float) -> None:
    """Runs at times 0..3 in the round's order; the engine's speed drifts linearly; ours gets ``true_ratio`` of it.
    The drift cancels to first order (a 4 % drift a run leaves 0.3 %)."""
    assert callable(speed_at)
    order = loadgen.round_order(0)
    ours = [true_ratio * speed_at(t) for t, who in enumerate(order) if who == "ours"]
    bench = [speed_at(t) for t, who in enumerate(order) if who == "bench"]
    naive = ours[0] / bench[0]  # one run of each, back to back
    ratio = loadgen.geometric_mean_ratio(ours, bench)
    assert ratio == pytest.approx(true_ratio, rel=0.01)
    if speed_at(0) != speed_at(1):
        assert abs(naive - true_ratio) > 0.03  # the drift shows in a pair of single runs


@pytest.mark.parametrize(("first", "second"), [([], [1.0]), ([1.0], []), ([0.0, 1.0], [1.0]), ([1.0], [-2.0])])
def test_geometric_mean_ratio_refuses_what_is_not_a_measurement(first: list[float], second: list[float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        loadgen.geometric_mean_ratio(first, second)


def test_group_cpu_counts_a_busy_process_group_and_not_others() -> None:
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\ntime.sleep(30)",
        ],
        start_new_session=True,
    )
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        seen = 0.0
        while seen < 0.5 and busy.poll() is None and time.monotonic() < deadline:
            seen = loadgen.group_cpu_s(busy.pid)
            time.sleep(0.05)
        assert seen >= 0.5
        assert loadgen.group_cpu_s(idle.pid) < 0.3
        assert loadgen.group_cpu_s(None) == 0.0
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()


def test_engine_runs_are_summarised_per_tool() -> None:
    runs = [
        loadgen.EngineRun("ours", busy=0.99, cpu_ms_per_1k=980.0),
        loadgen.EngineRun("bench", busy=1.01, cpu_ms_per_1k=1100.0),
        loadgen.EngineRun("ours", busy=0.62, cpu_ms_per_1k=1010.0),
    ]
    shown = loadgen.describe_engine_runs(runs)
    assert "ours: engine CPU >= 62% of the run's time in 2 runs, CPU per 1k tokens 980-1010 ms" in shown
    assert "vllm bench: engine CPU >= 101% of the run's time in 1 runs, CPU per 1k tokens 1100-1100 ms" in shown
    assert loadgen.describe_engine_runs([]) == ""
