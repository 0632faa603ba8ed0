"""Random well-typed programs over every registered op, on every backend.

A case builds a program of 2-6 calls, sometimes up to 12 (tests/fuzz/op_generators.py:
rank 0-4 shapes with size-1, size-0 and broadcasting dims, attributes within their
documented ranges, float32 (sometimes float64 or float16) and integer/bool dtypes),
returns its last value and sometimes an intermediate, a reshape of a returned value (a
view), a value twice or a parameter itself, and then:

- round-trips through text the program and what compiling, partitioning, partial
  lowering, fusion and NHWC conversion make of it;
- runs the unlegalized reference (legato.reference) and each of cpu_ref, c_kernels and
  the partitioned c_kernels+cpu_ref and cpu_ref+c_kernels, sometimes with a config that keeps an op or with
  max_level, twice: the second time with other values in odd memory layouts (strided,
  Fortran order, big-endian, read-only); compares results (values on ordinary inputs,
  only shapes and dtypes on edge values: inf, NaN, huge; exact programs always);
- checks that no call changed its inputs and no result is an input's memory, and that
  calls with an input missing or of another shape are refused;
- validates the TOSA that tosa_custom emits with tosa-opt, and runs a share of it on the
  TOSA reference model.
"""
from __future__ import annotations

import sys

import numpy as np

import legato
from legato import LegatoError

from . import Mismatch
from .op_generators import GENERATORS
from .program_builder import ProgramContext
from .program_checks import (EMITTING, EXECUTING, as_tuple, check_fresh, check_untouched,
                             compare, copies, name, ordinary, periodic_arguments_small,
                             round_trip, tolerance, run_tosa, validate_tosa)

QUICK_CASES = 350  # five programs starting with each of the ~70 ops
CASE_TIMEOUT = 60.0
EDGE_SHARE = 0.15
TOSA_RUN_SHARE = 0.3  # the TOSA reference model takes half a second a run


def build(seed: int) -> ProgramContext | None:
    """The program of `seed`; its first op cycles through every op as seeds go up."""
    rng = np.random.default_rng(seed)
    ctx = ProgramContext(rng, edge=bool(rng.random() < EDGE_SHARE))
    ops = [op for op in legato.list_ops() if op in GENERATORS]  # test_quick names the rest
    # ops only a backend runs (tosa.*, no reference kernel) start programs but are not
    # drawn for the rest: a program with one is only compiled, never checked by value
    drawn = [op for op in ops if op == "custom" or legato.get_backend("cpu_ref").has_kernel(op)]
    wanted, made = (ctx.int(2, 6) if ctx.chance(0.9) else ctx.int(7, 12)), 0
    for attempt in range(3 * wanted):
        if made == wanted:
            break
        op = ops[seed % len(ops)] if attempt == 0 else ctx.choice(drawn)
        try:
            GENERATORS[op](ctx, op)
            made += 1
        except LegatoError as err:  # a call the generator could not make valid here
            ctx.refusals.append((op, str(err)[:300]))
    if not ctx.computed():
        return None
    return ctx


def results_of(ctx: ProgramContext) -> list:
    computed = ctx.computed()
    results = [computed[-1]]
    if len(computed) > 1 and ctx.chance(0.3):
        results.insert(0, ctx.choice(computed[:-1]))
    if ctx.chance(0.2):  # a view of a returned value
        returned = ctx.choice(results)
        results.append(ctx.b.call("reshape", returned, shape=[returned.type.size]))
    if ctx.chance(0.15):
        results.append(ctx.choice(results))
    params = ctx.b.params
    if params and ctx.chance(0.1):
        results.append(ctx.choice(params))
    consts = [e.value for e in ctx.pool if isinstance(e.value, legato.Const)]
    if consts and ctx.chance(0.05):
        results.append(ctx.choice(consts))
    return results


def run(seed: int) -> str:
    ctx = build(seed)
    if ctx is None:
        return "skipped"
    module = ctx.b.build(*results_of(ctx))
    round_trip(module, "the built program")
    feeds, other = ctx.feeds, ctx.other_feeds()
    try:
        reference = legato.reference(module)  # refuses ops without a cpu_ref kernel
    except LegatoError as err:
        return _refused(module, feeds, err)
    try:
        want = _run(reference, feeds, "the reference")
        want_other = _run(reference, other, "the reference")
    except LegatoError as err:
        if not ctx.edge:  # ordinary values are valid data for any program that type-checks
            raise Mismatch(f"the reference fails at run time on a program that type-checks: "
                           f"{str(err)[:300]}") from None
        return _refused(module, feeds, err)
    # exact programs agree on any values; others on ordinary ones
    values_too = tolerance(ctx.ops) == 0 or (
        not ctx.edge and ordinary(want) and ordinary(want_other) and
        periodic_arguments_small(module, (feeds, other)))
    # the second run's inputs in odd memory layouts (strided, big-endian, ...)
    runs = ((feeds, want), ([ctx.odd_layout(f) for f in other], want_other))
    options = compile_options(ctx)
    for backend in EXECUTING:
        _check_backend(module, backend, runs, ctx.ops, values_too, options)
    if ctx.chance(0.5):
        _check_layout(module, runs, ctx.ops, values_too)
    _check_passes(module)
    compiled = _check_tosa(module, options)
    if compiled is not None and ctx.chance(TOSA_RUN_SHARE):
        _check_tosa_results(compiled, runs[0], ctx.ops, values_too)
    return "ok"


def compile_options(ctx: ProgramContext) -> dict:
    """legato.compile keyword arguments: sometimes a config that keeps (a custom op where
    the backend has no kernel for it) or decomposes one or two of the program's ops, or a
    max_level that stops decomposition early."""
    options, ops = {}, sorted(set(ctx.ops) - {"custom"})
    if ops and ctx.chance(0.35):
        chosen = ctx.rng.permutation(ops)[:ctx.int(1, 2)].tolist()
        section = {ctx.choice(["keep", "keep", "decompose"]): chosen}
        options["config"] = {"backends": {name: section for name in
                                          ("cpu_ref", "c_kernels", EMITTING)}}
    elif ctx.chance(0.2):
        options["max_level"] = 1
    return options


def _check_layout(module, runs, ops, values_too: bool) -> None:
    """The program converted to NHWC computes the same results."""
    converted = legato.convert_layout(module, "NHWC")
    round_trip(converted, "the program converted to NHWC")
    reference = legato.reference(converted)
    for feeds, want in runs:
        compare(_run(reference, feeds, "the NHWC program"), want, ops,
                "the program converted to NHWC", values_too)


def _refused(module, feeds, err) -> str:
    print(f"the reference refuses: {err}"[:500], file=sys.stderr)
    for backend in EXECUTING:  # others may refuse too, but must not crash
        _refusal_only(module, backend, feeds)
    _check_passes(module)
    _check_tosa(module)
    return "refused"


def _check_passes(module) -> None:
    """What partitioning, partial lowering and fusion produce reads back from text."""
    round_trip(legato.partition(module, ["c_kernels", "cpu_ref"]), "the partitioned program")
    round_trip(legato.legalize(module, max_level=0).module, "the program lowered to level 0")
    round_trip(legato.fuse(module), "the fused program")


def _run(compiled, feeds, who: str, names=None):
    """Call with the feeds (by parameter name when `names` are given); check that the
    inputs are left alone and the results are fresh."""
    before = copies(feeds)
    result = as_tuple(compiled(**dict(zip(names, feeds))) if names else compiled(*feeds))
    check_untouched(before, feeds, who)
    check_fresh(result, feeds, who)
    return result


def _refusal_only(module, backend, feeds) -> None:
    try:
        legato.compile(module, backend=list(backend) if isinstance(backend, tuple)
                       else backend)(*feeds)
    except LegatoError:
        pass


def _check_backend(module, backend, runs, ops, values_too: bool, options: dict) -> None:
    where = name(backend) + (f" with {options}" if options else "")
    try:
        compiled = legato.compile(module, list(backend) if isinstance(backend, tuple)
                                  else backend, **options)
    except LegatoError:
        return  # legalization may refuse (capabilities); the reference's verdict stands
    round_trip(compiled.module, f"the module compiled for {where}")
    str(compiled.report), repr(compiled)  # noqa: B018 - neither may raise
    names = [p.name for p in module.main.params]
    for index, (feeds, want) in enumerate(runs):
        try:
            got = _run(compiled, feeds, where, names if index else None)
        except LegatoError as err:
            if any(f.dtype.byteorder == ">" for f in feeds) and "endian" in str(err):
                continue  # refusing big-endian data is fine when the message says so
            raise Mismatch(f"{where} refuses at run time what the reference computes: "
                           f"{type(err).__name__}: {str(err)[:200]}") from None
        compare(got, want, ops, where, values_too)
    _check_bad_calls(compiled, runs[0][0], where)


def _check_bad_calls(compiled, feeds, where: str) -> None:
    """An input of another size, or one input too few, is refused with a LegatoError."""
    if not feeds:
        return
    index = len(feeds) - 1
    wrong = np.zeros(feeds[index].shape + (2,), feeds[index].dtype)
    for bad in (feeds[:index] + [wrong], feeds[:index]):
        try:
            compiled(*bad)
        except LegatoError:
            continue
        raise Mismatch(f"{where} accepts a call with input {index} "
                       + ("missing" if len(bad) == index else f"of shape {list(wrong.shape)}"))


def _check_tosa(module, options=None):
    """The compiled TOSA module (None if refused), checked by tosa-opt."""
    try:
        compiled = legato.compile(module, EMITTING, **(options or {}))
    except LegatoError:
        return None
    round_trip(compiled.module, f"the module compiled for {EMITTING}")
    validate_tosa(compiled.artifact)
    return compiled


def _check_tosa_results(compiled, run, ops, values_too: bool) -> None:
    """The TOSA reference model computes the reference's results (modules with custom
    ops excepted: only their backend knows what those compute)."""
    feeds, want = run
    if '"tosa.custom"' in compiled.artifact:
        return
    got = run_tosa(compiled.artifact, feeds)
    if got is not None:
        compare(got, want, ops, "the TOSA reference model", values_too)
