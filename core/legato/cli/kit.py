"""The plugin author's commands: `legato init NAME` and `legato check-backend NAME`."""
from __future__ import annotations

import sys

from .. import api
from ..testing.conformance import check_backend, ops_to_check, table
from ..testing.scaffold import scaffold
from .progress import Progress


def add_commands(sub, parents=()) -> None:
    """Add the subcommands to the `legato` parser's subparsers (`parents`: the options
    every command shares)."""
    parents = list(parents)
    p = sub.add_parser("init", parents=parents,
                       help="scaffold a backend plugin distribution in ./NAME")
    p.add_argument("name", help="plugin, package and backend name (lower_case)")
    p.add_argument("--dir", default=".", help="where to create NAME/ (default: here)")
    p.set_defaults(command=cmd_init)
    p = sub.add_parser("check-backend", parents=parents, help="run every legal op and kernel of a backend on "
                                             "sample inputs against cpu_ref, each declared "
                                             "dtype and attribute branch on its own")
    p.add_argument("name", help="an installed backend (see `legato backends`)")
    p.add_argument("--op", action="append", help="only these ops (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--onnx", action="store_true",
                   help="also run the ONNX backend node tests on it (needs onnx)")
    p.add_argument("--onnx-op", action="append",
                   help="with --onnx: only these ONNX op types (repeatable)")
    p.set_defaults(command=cmd_check_backend)


def cmd_init(args) -> int:
    root = scaffold(args.name, args.dir)
    print(f"created {root}/ (pyproject.toml, src/{args.name}/, tests/)\n"
          f"next: pip install -e {root} && legato check-backend {args.name}")
    return 0


def cmd_check_backend(args) -> int:
    backend = api.get_backend(args.name)  # an unknown name: an error naming installed ones
    ops = ops_to_check(backend, args.op)
    results = []
    with Progress(len(ops), f"checking {args.name}") as progress:
        for op in ops:  # one at a time: a terminal shows how far the check is
            results.extend(check_backend(args.name, [op], args.seed))
            progress.step(op)
    print(table(args.name, results))
    failed = any(not r.ok for r in results)
    if args.onnx:
        failed = _check_onnx(backend, args.onnx_op) or failed
    return 1 if failed else 0


def _check_onnx(backend, onnx_ops=None) -> bool:
    """Print the ONNX node-test table of `backend`; True when a case failed."""
    try:  # imported here: the onnx package is optional
        from ..testing import onnx_conformance
    except ImportError as err:
        print(f"--onnx needs the onnx package ({err}); pip install 'legato[onnx]'",
              file=sys.stderr)
        return True
    if not backend.executes:
        print(f"--onnx: backend {backend.name} emits code; the ONNX node tests need one "
              "that runs", file=sys.stderr)
        return True
    outcomes = onnx_conformance.run(onnx_ops, backends=[backend.name])
    print(onnx_conformance.summary(outcomes, show_failures=True))
    return any(o.status == "failed" for o in outcomes)

