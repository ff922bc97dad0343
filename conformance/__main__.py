"""`python -m conformance [check|refresh] [--case NAME ...]` (the Makefile's entry points)."""

from __future__ import annotations

import argparse
import sys

from conformance import cases, check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("command", choices=("check", "refresh"), nargs="?", default="check")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    args = parser.parse_args(argv)
    selected = cases.load_all()
    if args.case:
        unknown = sorted(set(args.case) - {case.name for case in selected})
        if unknown:
            parser.error(f"no such case(s): {', '.join(unknown)}")
        selected = [case for case in selected if case.name in args.case]
    if args.command == "refresh":
        from conformance import refresh  # imports the benchmark's Airflow install code

        for path in refresh.refresh(selected):
            print(f"recorded {path.relative_to(cases.ROOT.parent)}")
    return 0 if check.report(check.check_all(selected)) else 1


if __name__ == "__main__":
    sys.exit(main())
