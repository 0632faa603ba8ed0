"""`legato validate FILE` and `legato compile --validate`: an emitted artifact checked by
the external tools of the plugin that registered a validator for it (hook
`legato_register_validators`; tosa_custom's runs tosa-opt), and with `--run` run on
random inputs against cpu_ref.

Exit codes: 0 valid (and matching), 1 invalid or a mismatch, 2 the tools are missing (the
message says how to install them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import api
from ..frontends.examples import random_inputs
from ..ir.errors import LegatoError
from ..ops.tolerance import rel_error, result_tolerance
from ..plugins.validators import ToolsMissing, for_backend, for_file
from ..runtime.interpreter import as_tuple
from ..runtime.specialize import specialize
from .model import load

TOOLS_MISSING = 2


def add_command(sub, parents=()) -> None:
    p = sub.add_parser("validate", parents=list(parents),
                       help="check an emitted file with its backend's external tools "
                            "(.mlir: tosa-opt); --run also runs it against cpu_ref")
    p.add_argument("file", help="the artifact, e.g. out.mlir from `legato compile -b "
                                "tosa_custom -o out.mlir`")
    p.add_argument("--validator", help="which validator (default: the one taking the "
                                       "file's suffix)")
    p.add_argument("--run", action="store_true",
                   help="run it on random inputs (the TOSA reference model) and compare with "
                        "cpu_ref running --model")
    p.add_argument("--model", help="with --run: the model FILE was compiled from")
    p.add_argument("--shape", action="append", metavar="NAME=SIZE,...",
                   help="with --run: ONNX symbolic dimensions, as for compile")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(command=cmd_validate)


def add_compile_options(p) -> None:
    """compile's --validate and --validate-run."""
    p.add_argument("--validate", action="store_true",
                   help="check the emitted artifact with its backend's external tools "
                        "(tosa_custom: tosa-opt)")
    p.add_argument("--validate-run", action="store_true",
                   help="--validate, then run it on random inputs and compare with cpu_ref")


def cmd_validate(args) -> int:
    if args.run and not args.model:
        raise LegatoError("validate --run needs --model MODEL, the model the file was "
                          "compiled from: cpu_ref runs legato's module, not the file")
    try:
        text = Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise LegatoError(f"cannot read {args.file}: "
                          f"{getattr(err, 'strerror', None) or err}") from None
    validator = for_file(api.current_context().validators, args.file, args.validator)
    source = load(argparse.Namespace(model=args.model, shape=args.shape))[0] \
        if args.run else None
    return check(validator, text, args.file, source, args.seed)


def validate_compiled(args, compiled) -> int:
    """compile --validate / --validate-run on what compile emitted."""
    backend = compiled.backend
    if backend.executes or compiled.artifact is None:
        raise LegatoError(f"--validate checks what an emitting backend writes; backend "
                          f"{backend.name} executes (`legato run` checks it against cpu_ref)")
    validator = for_backend(api.current_context().validators, backend.name)
    name = args.output or f"<{backend.name} artifact>"
    if not (args.validate_run and compiled.buckets):
        source = compiled.source if args.validate_run else None
        return check(validator, compiled.artifact, name, source, 0)
    code = check(validator, compiled.artifact, name)  # then each shape bucket at its sizes
    registry = api.current_context().registry
    for bucket in compiled.buckets if code == 0 else ():
        print(f"{bucket.name}:")
        code |= _compare(validator, compiled.artifact,
                         specialize(compiled.source, bucket.bindings, registry)[0], 0)
    return code


def check(validator, text: str, name: str, source=None, seed: int = 0) -> int:
    """Validate `text` (and with `source`, run it against cpu_ref); the exit code. A run
    that fails is an error of its own (exit 1), not a verdict on validity."""
    try:
        validator.validate(text, name)
    except ToolsMissing as err:
        return _missing(name, err)
    except LegatoError as err:
        print(f"{name}: INVALID: {err}", file=sys.stderr)
        return 1
    print(f"{name}: valid ({validator.name} validator of {validator.plugin})")
    try:
        return _compare(validator, text, source, seed) if source is not None else 0
    except ToolsMissing as err:
        return _missing(name, err)


def _missing(name: str, err: ToolsMissing) -> int:
    print(f"error: cannot check {name}: {err}", file=sys.stderr)
    return TOOLS_MISSING


def _compare(validator, text: str, source, seed: int) -> int:
    if validator.run is None:
        raise LegatoError(f"validator {validator.name} cannot run what it validates")
    inputs = random_inputs(source, seed)
    got = tuple(validator.run(text, inputs))
    want = as_tuple(api.reference(source)(*inputs))
    if len(got) != len(want):
        print(f"MISMATCH: {len(got)} results, cpu_ref gives {len(want)}")
        return 1
    ok = True
    for i, (g, w) in enumerate(zip(got, want)):
        err, tolerance = rel_error(g, w), result_tolerance(w.dtype)
        ok &= err <= tolerance
        print(f"result {i}: {g.dtype}{list(g.shape)}  max rel. error vs cpu_ref {err:.2e}  "
              + ("ok" if err <= tolerance else f"MISMATCH (tolerance {tolerance:.0e})"))
    return 0 if ok else 1
