"""The `legato` command line."""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from . import api
from .cli_kit import add_commands as add_kit_commands
from .errors import LegatoError
from .examples import EXAMPLES, random_inputs
from .executor import as_tuple
from .frontends.onnx import coverage, load_with_nodes
from .fuse import fuse, op_info

DEMO_CONFIG = Path("configs/demo.yaml")


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.command(args) or 0
    except LegatoError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="legato", description=(
        "Legalize tensor programs for a backend: keep the ops it has, decompose the rest."))
    sub = parser.add_subparsers(title="commands")
    p = sub.add_parser("backends", help="list installed backends and plugin problems")
    p.set_defaults(command=cmd_backends)
    p = sub.add_parser("ops", help="list registered ops with level, pattern kind, signature")
    p.add_argument("--level", type=int, help="only ops of this composite level")
    p.set_defaults(command=cmd_ops)
    for name, fn, helptext in (("compile", cmd_compile, "legalize MODEL for a backend"),
                               ("run", cmd_run, "compile MODEL, run it on random inputs and "
                                               "check the result against cpu_ref")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("model", help="text-form file, .onnx file, or example:" + "|".join(EXAMPLES))
        p.add_argument("--backend", "-b", default="cpu_ref")
        p.add_argument("--config", "-c", help="user config YAML (configs/*.yaml)")
        p.add_argument("--max-level", type=int, help="decompose every op above this level")
        p.set_defaults(command=fn)
        if name == "compile":
            p.add_argument("-o", "--output", help="write the legalized module or artifact here")
            p.add_argument("--explain", action="store_true",
                           help="print what happened to each op and why")
        else:
            p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("demo", help="legalize and run the examples on every backend")
    p.add_argument("--config", "-c", help=f"user config (default: {DEMO_CONFIG} if present)")
    p.set_defaults(command=cmd_demo)
    add_kit_commands(sub)  # init, check-backend
    return parser


def cmd_backends(args) -> int:
    for name in api.list_backends():
        be = api.get_backend(name)
        role = "executes" if be.executes else "emits"
        extra = [f"fallback {be.fallback}"] if be.fallback else []
        if be.custom_ops:
            extra.append(f"custom ops ({be.domain})")
        print(f"{name:<14} {role:<9} {len(be.legal):>3} legal ops  {', '.join(extra)}"
              f"  [{be.source}]")
    for plugin, message in api.plugin_problems():
        print(f"problem in plugin {plugin}: {message}", file=sys.stderr)
    return 0


def cmd_ops(args) -> int:
    for name in api.list_ops():
        op = api.get_op(name)
        if args.level is None or op.level == args.level:
            print(f"{op.level}  {op.kind:<21} {op.signature()}")
    return 0


def _backends(arg: str):
    names = [n.strip() for n in arg.split(",") if n.strip()]
    if not names:
        raise LegatoError(f"--backend {arg!r} names no backend; see `legato backends`")
    return names if len(names) > 1 else names[0]


def cmd_compile(args) -> int:
    model, onnx_nodes = args.model, None
    if str(model).endswith(".onnx"):  # loaded here to report per-ONNX-op coverage
        model, onnx_nodes = load_with_nodes(model)
    compiled = api.compile(model, _backends(args.backend), args.config, args.max_level)
    print(compiled.report if args.explain else
          f"{args.backend}: {compiled.report.summary()}", file=sys.stderr)
    if onnx_nodes is not None:
        print(coverage(onnx_nodes, compiled.report), file=sys.stderr)
    if args.explain:
        _explain_structure(compiled.module)
    text = compiled.artifact if compiled.artifact is not None else str(compiled.module)
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as err:
            raise LegatoError(f"cannot write {args.output}: {err.strerror}") from None
        print(f"wrote {args.output}", file=sys.stderr)
    elif not args.explain:
        print(text)
    return 0


def _explain_structure(module) -> None:
    """Regions claimed by backends, and what fusion would group, with origins."""
    for name, fn in module.functions.items():
        if fn.kind == "external":
            print(f"region @{name} on {fn.attrs['codegen']}: "
                  + ", ".join(c.op for c in fn.calls), file=sys.stderr)
    fused = fuse(module)
    for name, fn in fused.functions.items():
        if fn.kind == "primitive":
            sources = sorted({i["origin"]["op"] for i in op_info(fn) if i["origin"]})
            print(f"fused @{name} ({fn.attrs['pattern']}): {', '.join(fn.attrs['ops'])}"
                  + (f"  [from {', '.join(sources)}]" if sources else ""), file=sys.stderr)


def cmd_run(args) -> int:
    compiled = api.compile(args.model, _backends(args.backend), args.config, args.max_level)
    inputs = random_inputs(compiled.source, args.seed)
    outputs = as_tuple(compiled(*inputs))
    expected = as_tuple(api.reference(compiled.source)(*inputs))
    print(f"{args.backend}: {compiled.report.summary()}")
    ok = True
    for i, (got, want) in enumerate(zip(outputs, expected)):
        err = _rel_error(got, want)
        ok &= err <= 1e-4
        print(f"result {i}: {got.dtype}{list(got.shape)}  max rel. error vs reference "
              f"{err:.2e}  {'ok' if err <= 1e-4 else 'MISMATCH'}")
    return 0 if ok else 1


def cmd_demo(args) -> int:
    config = args.config or (str(DEMO_CONFIG) if DEMO_CONFIG.exists() else None)
    runs = [("default", None)] + ([(Path(config).name, config)] if config else [])
    failures = 0
    for example in ("transformer", "cnn"):
        source = api.load_model(f"example:{example}")
        before = Counter(c.op for c in source.main.calls)
        print(f"== example:{example}: {len(source.main.calls)} calls: "
              + ", ".join(f"{op} x{n}" for op, n in sorted(before.items())))
        inputs = random_inputs(source)
        expected = as_tuple(api.reference(source)(*inputs))
        for backend in api.list_backends():
            for label, cfg in runs:
                failures += _demo_one(source, backend, label, cfg, inputs, expected)
    print("demo: all result checks passed" if not failures else
          f"demo: {failures} result check(s) FAILED")
    return 1 if failures else 0


def _demo_one(source, backend, label, config, inputs, expected) -> int:
    start = time.perf_counter()
    try:
        compiled = api.compile(source, backend, config)
    except LegatoError as err:
        print(f"  {backend:<12} [{label}] cannot compile: {err}")
        return 1
    ms = (time.perf_counter() - start) * 1e3
    report = compiled.report
    print(f"  {backend:<12} [{label}] legalized in {ms:.1f} ms: {report.summary()}")
    print(f"  {'':<12} after: " + ", ".join(f"{op} x{n}" for op, n in sorted(report.after.items())))
    if not compiled.backend.executes:
        print(f"  {'':<12} emitted {len(compiled.artifact)} characters of "
              f"{type(compiled.artifact).__name__}")
        return 0
    outputs = as_tuple(compiled(*inputs))
    err = max(_rel_error(g, w) for g, w in zip(outputs, expected))
    ok = err <= 1e-4
    print(f"  {'':<12} result check vs reference kernels: max rel. error {err:.1e} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def _rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the largest finite |want|; NaN matches NaN and an
    infinity matches itself."""
    if got.shape != want.shape:
        return float("inf")
    if not want.size:
        return 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    scale = max(float(np.max(np.abs(w[finite]))) if finite.any() else 0.0, 1e-30)
    with np.errstate(invalid="ignore"):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        diff = np.where(same, 0.0, np.abs(g - w))
    return float(np.max(np.where(np.isnan(diff), np.inf, diff))) / scale


if __name__ == "__main__":
    sys.exit(main())
