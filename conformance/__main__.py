"""`python -m conformance [check|refresh|standalone] [--area AREA] [--case NAME] [--airflow V]`.

check: Sluice against the recorded observations (each case, then its Airflow DAG as
`sluice convert` converts it, unless --without-converted); refresh: record them from Airflow
first; standalone: the in-process Sluice side against `sluice standalone`. Each option
repeats; --area and --case narrow the cases.
"""

from __future__ import annotations

import argparse
import sys

from conformance import cases, check, records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument(
        "command", choices=("check", "refresh", "standalone"), nargs="?", default="check"
    )
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    parser.add_argument(
        "--area", action="append", default=[], help="only this area's cases (repeatable)"
    )
    parser.add_argument(
        "--airflow",
        action="append",
        choices=records.AIRFLOW_VERSIONS,
        help="refresh only this Airflow (repeatable; default: every one)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="refresh: executed cases run on Airflow this many at a time (default 1)",
    )
    parser.add_argument(
        "--without-converted",
        action="store_true",
        help="check: leave out the cases' Airflow DAGs as `sluice convert` converts them",
    )
    args = parser.parse_args(argv)
    selected = cases.load_all()
    if args.case:
        unknown = sorted(set(args.case) - {case.name for case in selected})
        if unknown:
            parser.error(f"no such case(s): {', '.join(unknown)}")
        selected = [case for case in selected if case.name in args.case]
    if args.area:
        unknown = sorted(set(args.area) - {case.area for case in cases.load_all()})
        if unknown:
            parser.error(f"no such area(s): {', '.join(unknown)}")
        selected = [case for case in selected if case.area in args.area]
    if args.command == "standalone":
        from conformance import standalone

        return standalone.main(selected)
    if args.command == "refresh":
        from conformance import refresh  # imports the benchmark's Airflow install code

        for version in args.airflow or records.AIRFLOW_VERSIONS:
            paths = refresh.refresh(refresh.AIRFLOWS[version], selected, args.jobs)
            print(f"recorded Airflow {version}'s observations of {len(paths)} case(s)")
    checked = check.check_all(selected, with_converted=not args.without_converted)
    return 0 if check.report(checked) else 1


if __name__ == "__main__":
    sys.exit(main())
