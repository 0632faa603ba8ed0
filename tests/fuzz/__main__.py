"""python -m tests.fuzz: run the fuzz targets in worker processes and print the figures.

    python -m tests.fuzz                          # every target, 10 minutes, 2 workers
    python -m tests.fuzz --minutes 3 --target programs --seed-start 5000
    python -m tests.fuzz --minutes 3 --jobs 1 --target quant   # int8 models vs onnxruntime
    python -m tests.fuzz --target programs --seed 123     # one case, with its traceback
    python -m tests.fuzz --cases 50                       # 50 seeds per target

Exit status 1 when any case crashed, hung, ran out of memory, raised a raw exception,
mismatched or produced invalid output; 2 for a usage error.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .cases import PACKAGE_DIR, PROBLEMS, discover
from .harness import DEFAULT_MEMORY, Plan, run_plan
from .report import Summary, format_summary

PROGRESS_EVERY = 60.0


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="how long to fuzz (default 10), time-sliced across targets")
    parser.add_argument("--target", action="append", default=[], metavar="NAME",
                        help="only this target (repeatable); default: every target")
    parser.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--seed", type=int, help="run this one seed and show its details")
    parser.add_argument("--cases", type=int, help="this many seeds per target, no time limit")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--memory-gib", type=float, default=DEFAULT_MEMORY / (1 << 30),
                        help="address-space limit of a worker (default 4)")
    parser.add_argument("--target-dir", type=Path, default=PACKAGE_DIR,
                        help="where the target_*.py modules are (default tests/fuzz)")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    return parser.parse_args(argv)


def make_plan(args, targets: list[str]) -> Plan:
    if args.seed is not None:
        return Plan(targets, seeds={t: [args.seed] for t in targets})
    if args.cases is not None:
        return Plan(targets, seeds={t: list(range(args.seed_start, args.seed_start + args.cases))
                                    for t in targets})
    return Plan(targets, seed_start=args.seed_start,
                deadline=time.monotonic() + args.minutes * 60.0)


class Progress:
    """A line on stderr every minute, so a long run shows it is alive."""

    def __init__(self, summary: Summary, verbose: bool):
        self.summary, self.verbose = summary, verbose
        self.next = time.monotonic() + PROGRESS_EVERY

    def __call__(self, finished) -> None:
        self.summary.add(finished)
        result = finished.result
        if self.verbose:
            print(f"{finished.case.target} seed {finished.case.seed}: {result.outcome}"
                  + (f": {result.message}" if result.message else ""))
            if result.details and result.outcome != "ok":
                print(result.details.rstrip())
        if time.monotonic() >= self.next:
            self.next += PROGRESS_EVERY
            total = self.summary.total()
            print(f"... {sum(total.values())} cases, "
                  f"{sum(total[o] for o in PROBLEMS)} problems", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    available = discover(args.target_dir)
    unknown = [t for t in args.target if t not in available]
    if unknown or not available:
        print(f"unknown target(s) {unknown}; available: {sorted(available)}" if unknown
              else f"no target_*.py in {args.target_dir}", file=sys.stderr)
        return 2
    targets = args.target or sorted(available)
    summary = Summary()
    run_plan(make_plan(args, targets), args.target_dir, jobs=args.jobs,
             memory=int(args.memory_gib * (1 << 30)),
             on_result=Progress(summary, verbose=args.seed is not None))
    extra = "" if args.target_dir.resolve() == PACKAGE_DIR else f"--target-dir {args.target_dir} "
    print(format_summary(summary, extra))
    if args.json:
        args.json.write_text(json.dumps(summary.as_json(), indent=1))
    return 1 if summary.problem_count() else 0


if __name__ == "__main__":
    sys.exit(main())
