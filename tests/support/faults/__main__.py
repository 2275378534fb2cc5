"""``python -m tests.support.faults --table``: run every scenario and print the reliability table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tests.support.faults import SCENARIOS, render_table, run_scenario


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.faults")
    parser.add_argument("--table", action="store_true", help="run every scenario and print the markdown table")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    args = parser.parse_args(argv)
    names = args.only or list(SCENARIOS)
    outcomes = [run_scenario(n) for n in names]
    if args.table:
        sys.stdout.write(render_table(outcomes))
    else:
        for o in outcomes:
            sys.stdout.write(f"{o.scenario}: {o.outcome}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
