"""The trial-agreement bench: the week fleet's steady-state verdict beside the canary engine's trials, per config and
per-replica load, and a last line that counts them."""

from __future__ import annotations

import re

import pytest

from bench import trial_agreement as agreement

LAST = re.compile(
    r"^agreement: the steady state and the trials agree on (?P<agree>\d+) of (?P<cells>\d+) verdicts; the steady"
    r" state holds where no trial did in (?P<steady_only>\d+) \(trials of 120 s, 2 seeds, closed loop\)$"
)
CELL = re.compile(r"^(?P<config>\S+) at (?P<load>[\d.]+) in flight: steady state (?P<verdict>holds|misses)$")
TRIAL = re.compile(r"^    trial seed \d: (?P<held>[H-]) ")


@pytest.mark.parametrize(
    ("steady", "trials", "agrees", "steady_only"),
    [
        (True, (True, True, False), True, False),  # most trials held, as the steady state says
        (True, (False, False, False), False, True),  # the steady state holds where no trial did
        (False, (False, True, False), True, False),  # most trials missed, as the steady state says
        (False, (True, True), False, False),  # the trials held where the steady state misses
        (True, (True, False), False, False),  # a tie is no agreement
    ],
)
def test_a_cell_agrees_when_most_trials_found_what_the_steady_state_says(
    steady: bool, trials: tuple[bool, ...], agrees: bool, steady_only: bool
) -> None:
    cell = agreement.Cell("stock", 4.0, steady, (), trials)
    assert cell.agrees() is agrees and cell.steady_only() is steady_only


def test_the_last_line_counts_the_cells_printed_above_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--scenario", "doc-quoting", "--hour", "2.5", "--configs", "stock", "--loads", "3,5"]
    assert agreement.main([*args, "--seeds", "2", "--duration", "120", "--loop", "closed"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = LAST.match(out[-1])
    assert last, out[-1]
    cells: list[tuple[bool, list[bool]]] = []
    for line in out[1:-1]:
        if m := CELL.match(line):
            cells.append((m["verdict"] == "holds", []))
        elif t := TRIAL.match(line):
            cells[-1][1].append(t["held"] == "H")
    assert [len(trials) for _steady, trials in cells] == [2, 2]
    expected = [agreement.Cell("stock", 0.0, steady, (), tuple(trials)) for steady, trials in cells]
    assert int(last["cells"]) == 2
    assert int(last["agree"]) == sum(c.agrees() for c in expected)
    assert int(last["steady_only"]) == sum(c.steady_only() for c in expected)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--configs", "stock,no-such-config"], "--configs"),
        (["--loads", "4,-1"], "--loads"),
        (["--seeds", "0"], "--seeds"),
        (["--hour", "13", "--scenario", "doc-quoting", "--configs", "stock", "--loads", "0"], "--loads"),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag(
    args: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        agreement.main(args)
    assert exit_.value.code == 2
    assert field in capsys.readouterr().err
