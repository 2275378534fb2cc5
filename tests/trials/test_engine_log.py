"""Why an engine did not serve, read from its log: the root cause, not vLLM's wrappers, and kept in bounded memory.

The logs under ``engine_logs/`` are vLLM's output of failed start-ups; ``engine_logs/README.md`` says how each was made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.trials.engine.log import MAX_LINE_BYTES, EngineLog, engine_reason, root_cause

LOGS = Path(__file__).parent / "engine_logs"


def log_lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


CASES = [
    ("cpu-fp8-kv-no-vector-isa.log", "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."),
    ("cpu-fp8-kv-head-size.log", "NotImplementedError: FP8 KV cache requires head_size divisible by 32 on CPU."),
    ("cpu-numa-memory.log", "ValueError: Available memory on node 0 (10.5/12.34 GiB) on kv cache allocation is less"),
    ("cpu-unknown-flag.log", "ArgumentError: unrecognized arguments: --bogus-flag"),
    ("gpu-oom-profile-run.log", "OutOfMemoryError: CUDA out of memory. Tried to allocate 7.83 GiB."),
    ("gpu-cudagraph-capture.log", "RuntimeError: CUDA error: operation not permitted when stream is capturing"),
]


@pytest.mark.parametrize(("name", "cause"), CASES)
def test_the_root_cause_is_found_in_the_whole_log_and_in_what_is_kept(name: str, cause: str) -> None:
    lines = log_lines(name)
    assert (root_cause(lines) or "").startswith(cause)
    kept = EngineLog.of(lines).lines()
    assert engine_reason("engine exited with code 1", kept).startswith(cause)


@pytest.mark.parametrize("name", [c[0] for c in CASES if not c[0].endswith("unknown-flag.log")])
def test_the_last_lines_alone_hold_only_wrappers(name: str) -> None:
    """Why the bounded log keeps more than a tail: the last 40 lines of these logs name no cause."""
    assert root_cause(log_lines(name)[-40:]) is None


WRAPPED = [
    "(Worker pid=9) ERROR 12-02 04:46:19 [multiproc_executor.py:1063] Traceback (most recent call last):",
    '(Worker pid=9) ERROR 12-02 04:46:19 [multiproc_executor.py:1063]   File "x.py", line 1, in f',
    "(Worker pid=9) ERROR 12-02 04:46:19 [multiproc_executor.py:1063] ValueError: first cause",
    "(EngineCore pid=8) ERROR 12-02 04:46:20 [core.py:1510] Traceback (most recent call last):",
    "(EngineCore pid=8) ERROR 12-02 04:46:20 [core.py:1510] Exception: WorkerProc initialization failed due to an "
    "exception in a background process. See stack trace for root cause.",
]
API_WRAPPER = [
    "Traceback (most recent call last):",
    '  File "utils.py", line 759, in wait_for_engine_startup',
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]


@pytest.mark.parametrize(
    ("lines", "cause"),
    [
        pytest.param(WRAPPED + API_WRAPPER, "ValueError: first cause", id="worker cause under two wrappers"),
        pytest.param(
            [
                "Traceback (most recent call last):",
                '  File "a.py", line 1, in f',
                "ValueError: the root",
                "",
                "The above exception was the direct cause of the following exception:",
                "",
                "Traceback (most recent call last):",
                '  File "b.py", line 2, in g',
                "RuntimeError: re-raised with other words",
            ],
            "ValueError: the root",
            id="a chain's first exception",
        ),
        pytest.param(
            [
                "Traceback (most recent call last):",
                "ValueError: an earlier failure it recovered from",
                "INFO retrying",
                "Traceback (most recent call last):",
                "NotImplementedError: the final failure",
                *API_WRAPPER,
            ],
            "NotImplementedError: the final failure",
            id="the last of several causes",
        ),
        pytest.param(
            [
                "Traceback (most recent call last):",
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
                "  Value error, Unsupported speculative method: 'mtp' [type=value_error, input_value=ArgsKwargs()]",
            ],
            "ValidationError: Unsupported speculative method: 'mtp'",
            id="pydantic's detail line",
        ),
        pytest.param(
            ["Traceback (most recent call last):", "KeyboardInterrupt", *API_WRAPPER],
            None,
            id="only noise and wrappers",
        ),
        pytest.param(
            ["WARNING This can cause fd limit errors like `OSError: [Errno 24] Too many open files`."],
            None,
            id="an exception named inside a sentence is no exception",
        ),
    ],
)
def test_root_cause_table(lines: list[str], cause: str | None) -> None:
    assert root_cause(lines) == cause


def test_interleaved_processes_keep_their_own_chains() -> None:
    lines = [
        "(Worker pid=9) Traceback (most recent call last):",
        "(EngineCore pid=8) Traceback (most recent call last):",
        "(Worker pid=9) KeyError: 'model.layers.0.self_attn.q_proj.weight'",
        "(EngineCore pid=8) Exception: WorkerProc initialization failed due to an exception in a background process. "
        "See stack trace for root cause.",
    ]
    assert root_cause(lines) == "KeyError: 'model.layers.0.self_attn.q_proj.weight'"


@pytest.mark.parametrize(
    ("error", "tail", "reason"),
    [
        ("engine not ready on /health within 5 s", ["loading..."], "engine not ready on /health within 5 s"),
        ("exited", ["worker Killed"], "out of memory: worker Killed"),
        ("", [], "engine failed"),
    ],
)
def test_engine_reason_fallbacks(error: str, tail: list[str], reason: str) -> None:
    assert engine_reason(error, tail) == reason


def test_the_kept_log_is_bounded_and_marks_what_it_left_out() -> None:
    noise = [f"INFO step {i}" for i in range(5_000)]
    lines = [*noise[:100], *WRAPPED, *noise[100:], "x" * 10_000, *API_WRAPPER]
    kept = EngineLog.of(lines).lines()
    assert len(kept) <= 60 + 40 + 40 + 3  # head, markers, tail, and the lines saying what was left out
    assert max(len(line.encode()) for line in kept) <= MAX_LINE_BYTES
    assert any("lines not kept" in line for line in kept)
    assert root_cause(kept) == "ValueError: first cause"
    assert kept[-1] == API_WRAPPER[-1]  # the last lines are kept as printed


def test_later_causes_past_the_first_block_are_kept() -> None:
    first = ["Traceback (most recent call last):", "ValueError: recovered from", *[f"  frame {i}" for i in range(80)]]
    later = ["Traceback (most recent call last):", "NotImplementedError: the final failure"]
    lines = [*first, *later, *[f"INFO shutting down {i}" for i in range(100)], *API_WRAPPER]
    assert engine_reason("exited", EngineLog.of(lines).lines()) == "NotImplementedError: the final failure"
