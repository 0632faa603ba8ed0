"""The `legato` command line.

Results go to stdout (`--print-ir`, `ops`, `backends`, `run`); reports, summaries and
progress to stderr. A closed pipe (`legato ops | head`) ends the command quietly.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

from .. import api
from ..frontends.examples import random_inputs
from ..frontends.onnx import coverage
from ..ir import CALL_OP
from ..ir.errors import LegatoError, size_text
from ..ops.tolerance import rel_error, result_tolerance
from ..passes.fuse import fuse, op_info
from ..runtime.interpreter import as_tuple, describe_call
from .kit import add_commands as add_kit_commands
from .model import DEFAULT_BACKEND, add_model_arguments, backends_arg, load, shape_buckets
from .progress import timer
from .recompose import add_command as add_recompose_command
from .show import add_command as add_show_command
from .validate import add_command as add_validate_command, add_compile_options, \
    validate_compiled

DEMO_CONFIG = Path("configs/demo.yaml")
TOLERANCE = result_tolerance("float32")  # largest relative error `legato run` accepts in float32


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        code = args.command(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, inside the handler
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # as if killed by SIGPIPE, like other tools in a pipe
    except LegatoError as err:
        if args.verbose:
            traceback.print_exception(err)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except Exception:
        if args.verbose:
            raise
        print("error: legato failed unexpectedly (a bug; rerun with --verbose for the "
              "traceback):", file=sys.stderr)
        print("  " + traceback.format_exc().strip().splitlines()[-1], file=sys.stderr)
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (captured in tests)
        pass


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks (plugin failures, errors)")
    parser = argparse.ArgumentParser(prog="legato", parents=[common], description=(
        "Legalize tensor programs for a backend: keep the ops it has, decompose the rest. "
        f"The default backend is {DEFAULT_BACKEND}."))
    parser.set_defaults(verbose=False)
    sub = parser.add_subparsers(title="commands")
    p = sub.add_parser("backends", parents=[common],
                       help="list installed backends (with descriptions) and plugin problems")
    p.set_defaults(command=cmd_backends)
    p = sub.add_parser("ops", parents=[common],
                       help="list registered ops with level, pattern kind, signature")
    p.add_argument("--level", type=int, help="only ops of this composite level")
    p.add_argument("--doc", action="store_true", help="add each op's one-line description")
    p.set_defaults(command=cmd_ops)
    for name, fn, helptext in (("compile", cmd_compile, "legalize MODEL for a backend"),
                               ("run", cmd_run, "compile MODEL, run it on random inputs and "
                                               "check the result against cpu_ref")):
        p = sub.add_parser(name, parents=[common], help=helptext)
        add_model_arguments(p)
        p.set_defaults(command=fn)
        if name == "compile":
            p.add_argument("-o", "--output", help="write the artifact (emitting backends) or "
                                                  "the legalized module's text here")
            p.add_argument("--print-ir", action="store_true",
                           help="print the legalized module's text on stdout")
            p.add_argument("--explain", action="store_true",
                           help="print what happened to each op and why, and the placement "
                                "and cost report")
            p.add_argument("--report-json", metavar="FILE",
                           help="write the placement and cost report as JSON (for CI; "
                                "keys in docs/plugins.md)")
            add_compile_options(p)  # --validate, --validate-run
        else:
            p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("demo", parents=[common],
                       help="legalize and run the examples on every backend")
    p.add_argument("--config", "-c", help=f"user config (default: {DEMO_CONFIG} if present)")
    p.set_defaults(command=cmd_demo)
    add_kit_commands(sub, [common])  # init, check-backend
    add_show_command(sub, [common])
    add_recompose_command(sub, [common])
    add_validate_command(sub, [common])
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
        if be.description:
            print(f"{'':<14} {be.description}")
    for plugin, message in api.plugin_problems():
        print(f"problem in plugin {plugin}: {message}", file=sys.stderr)
        if args.verbose:
            print(_plugin_traceback(plugin), file=sys.stderr)
    return 0


def _plugin_traceback(plugin: str) -> str:
    """The traceback of a plugin's failure: kept by the host when it records one, else
    found by importing the plugin's entry point again."""
    kept = getattr(api.current_context(), "tracebacks", {}).get(plugin)
    if kept:
        return kept
    from importlib.metadata import entry_points
    for ep in entry_points(group="legato"):
        if ep.name == plugin:
            try:
                ep.load()
            except Exception:
                return traceback.format_exc()
            return (f"  ({plugin} imports without error: the problem is in its registration "
                    "hook or capability, as the message says)")
    return f"  (no entry point named {plugin}: registered in-process)"


def cmd_ops(args) -> int:
    for name in api.list_ops():
        op = api.get_op(name)
        if args.level is None or op.level == args.level:
            print(f"{op.level}  {op.kind:<21} {op.signature()}")
            doc = getattr(op, "doc", "")
            if args.doc and doc:
                print(f"{'':<24} {doc}")
    return 0


def compile_model(args, module):
    with timer(f"compiling for {args.backend}"):
        return api.compile(module, backends_arg(args.backend), args.config, args.max_level,
                           shape_buckets=shape_buckets(args))


def cmd_compile(args) -> int:
    module, onnx_nodes = load(args)
    compiled = compile_model(args, module)
    print(compiled.report if args.explain else
          f"{args.backend}: {compiled.report.summary()}", file=sys.stderr)
    if onnx_nodes is not None:
        print(coverage(onnx_nodes, compiled.report), file=sys.stderr)
    if args.explain:
        _explain_structure(compiled.module)
    if args.report_json:
        write_report_json(args.report_json, compiled, args.model)
    if args.output:
        data = compiled.artifact if compiled.artifact is not None else str(compiled.module)
        data = data.encode() if isinstance(data, str) else data
        try:
            if hasattr(data, "write"):  # an artifact in parts writes itself (tosa_custom's
                data.write(args.output)  # weights out of line: its text, then the blobs)
            else:
                Path(args.output).write_bytes(data)
        except (OSError, TypeError) as err:
            raise LegatoError(f"cannot write {args.output}: "
                              f"{getattr(err, 'strerror', None) or err}") from None
        print(f"wrote {args.output} ({size_text(Path(args.output).stat().st_size)})",
              file=sys.stderr)
    if args.print_ir:
        print(compiled.module)
    elif not args.output and not args.explain:
        print("(-o FILE writes the result, --print-ir prints the legalized module, "
              "--explain says why)", file=sys.stderr)
    if args.validate or args.validate_run:
        return validate_compiled(args, compiled)
    return 0


def write_report_json(path: str, compiled, model) -> None:
    """The placement and cost report (legato.legalization.placement) of `compiled` as JSON at `path`."""
    data = {"model": str(model), **compiled.report.placement.to_json()}
    try:
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as err:
        raise LegatoError(f"cannot write --report-json {path}: {err.strerror}") from None
    print(f"wrote {path} (placement and cost report)", file=sys.stderr)


def _explain_structure(module) -> None:
    """Regions claimed by backends, and what fusion would group, with origins."""
    for name, fn in module.functions.items():
        if fn.kind == "external":
            print(f"region @{name} on {fn.attrs['codegen']}: "
                  + ", ".join(c.op for c in fn.calls), file=sys.stderr)
    fused = fuse(module)
    for name, fn in fused.functions.items():
        if fn.kind == "primitive":
            sources = sorted({i["origin"]["op"] for i in op_info(fn)  # (not as imported)
                              if i["origin"] and i["origin"]["rules"]})
            # a backend's own fusion (its passes made it) names itself; legato.fuse's
            # groups say their pattern kind
            what = fn.attrs.get("fusion") or fn.attrs.get("pattern", "primitive")
            ops = fn.attrs.get("ops") or [c.op for c in fn.calls]
            print(f"fused @{name} ({what}): {', '.join(ops)}"
                  + (f"  [from {', '.join(sources)}]" if sources else ""), file=sys.stderr)


def cmd_run(args) -> int:
    module, _ = load(args)
    compiled = compile_model(args, module)
    inputs = random_inputs(compiled.source, args.seed)
    outputs = as_tuple(compiled(*inputs))
    expected = as_tuple(api.reference(compiled.source)(*inputs))
    print(f"{args.backend}: {compiled.report.summary()}")
    ok = True
    for i, (got, want) in enumerate(zip(outputs, expected)):
        err, tolerance = rel_error(got, want), result_tolerance(want.dtype)
        ok &= err <= tolerance
        print(f"result {i}: {got.dtype}{list(got.shape)}  max rel. error vs reference "
              f"{err:.2e}  " + ("ok" if err <= tolerance else f"MISMATCH (tolerance {tolerance:.0e})"))
    if not ok:
        print(first_divergence(compiled, inputs))
    return 0 if ok else 1


def first_divergence(compiled, inputs) -> str:
    """The first call of the compiled main whose output differs from the reference's by
    more than its dtype's result_tolerance (both run every call, each on its own earlier results), with its
    origin: where a MISMATCH comes from."""
    try:
        probe = api.with_every_result(compiled)
        got = as_tuple(probe(*inputs))
        want = as_tuple(api.reference(probe.module)(*inputs))
    except LegatoError as err:
        return f"cannot locate the first differing call: {err}"
    index = 0
    for number, call in enumerate(probe.module.main.calls):
        for _ in call.outputs:
            err, tolerance = rel_error(got[index], want[index]), result_tolerance(want[index].dtype)
            index += 1
            if err > tolerance:
                return (f"first differing call: {describe_call(call, f'main#{number}')}\n"
                        + _region_text(probe.module, call) +
                        f"  max rel. error {err:.2e} (tolerance {tolerance:.0e}); the calls "
                        f"before it agree with the reference")
    return ("every call agrees with the reference within the tolerance; the differences "
            "add up along the way")


def _region_text(module, call) -> str:
    """For a call of a partitioned region: which backend runs it and its ops."""
    if call.op != CALL_OP:
        return ""
    fn = module.functions[call.attrs["callee"]]
    return (f"  (@{call.attrs['callee']} runs on {fn.attrs.get('codegen', fn.kind)}: "
            f"{', '.join(c.op for c in fn.calls)})\n")


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
        print(f"  {'':<12} emitted {artifact_text(compiled.artifact)}")
        return 0
    outputs = as_tuple(compiled(*inputs))
    err = max(rel_error(g, w) for g, w in zip(outputs, expected))
    ok = err <= TOLERANCE
    print(f"  {'':<12} result check vs reference kernels: max rel. error {err:.1e} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def artifact_text(artifact) -> str:
    """What an emitter produced, in units people read: 'text, 41.2 KB (812 lines)'."""
    if isinstance(artifact, str):
        data = artifact.encode()
        return f"text, {size_text(len(data))} ({artifact.count(chr(10)) + 1} lines)"
    if isinstance(artifact, (bytes, bytearray)):
        return f"binary, {size_text(len(artifact))}"
    return f"a {type(artifact).__name__}"


_rel_error = rel_error  # the name earlier releases had


if __name__ == "__main__":
    sys.exit(main())
