"""The checks a random program goes through: text round trips, compilation for every
backend, results against the unlegalized reference, untouched inputs, and tosa-opt on the
emitted TOSA."""
from __future__ import annotations

import functools

import numpy as np

import legato
from legato import LegatoError
from legato.ir import Const, Function, Module
from legato.ops.tolerance import DEFAULT_ERROR, ROUNDING_OPS, error_bound

from . import InvalidOutput, Mismatch
from .cases import one_line
from .harness import REPO

EXECUTING = ("cpu_ref", "c_kernels", ("c_kernels", "cpu_ref"), ("cpu_ref", "c_kernels"))
EMITTING = "tosa_custom"
HUGE = 1e6


def name(backend) -> str:
    return "+".join(backend) if isinstance(backend, tuple) else backend


def round_trip(module: legato.Module, what: str) -> None:
    """legato.parse(str(module)) must give the module back."""
    text = str(module)
    try:
        back = legato.parse(text)
    except LegatoError as err:
        raise InvalidOutput(f"{what} does not parse back: {one_line(err)}") from None
    if not legato.structural_equal(back, module):
        raise InvalidOutput(f"{what} parses back into a different module")


def as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def copies(feeds):
    return [np.array(f, copy=True) for f in feeds]


def check_untouched(before, after, where: str) -> None:
    for i, (old, new) in enumerate(zip(before, after)):
        if not np.array_equal(old, new, equal_nan=old.dtype.kind == "f"):
            raise Mismatch(f"{where} modified input {i}")


def check_fresh(results, feeds, where: str) -> None:
    """Results are the caller's to keep: no result is an input's memory, and no two
    results are one array (writing to one would change the other)."""
    for i, result in enumerate(results):
        if not isinstance(result, np.ndarray):
            continue
        if any(np.shares_memory(result, feed) for feed in feeds):
            raise Mismatch(f"{where}: result {i} shares memory with an input")
        if any(result is other for other in results[:i]):
            raise Mismatch(f"{where}: result {i} is the same array as an earlier result")


def compare(got, want, ops, where: str, values_too: bool) -> None:
    """Same count, shapes and dtypes; with `values_too`, values within the tolerance of
    the ops involved (NaN equals NaN)."""
    got, want = as_tuple(got), as_tuple(want)
    if len(got) != len(want):
        raise Mismatch(f"{where}: {len(got)} results, reference has {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, np.ndarray):
            raise Mismatch(f"{where}: result {i} is a {type(g).__name__}, not an ndarray")
        if g.shape != w.shape or g.dtype != w.dtype:
            raise Mismatch(f"{where}: result {i} is {g.dtype}{list(g.shape)}, reference "
                           f"{w.dtype}{list(w.shape)}")
        if values_too and w.size:
            _compare_values(g, w, ops, f"{where}: result {i}")


def tolerance(ops, dtype: str = "float32") -> float:
    """The error bound of a program: exact when every op is, the op's own bound for a
    single inexact op, and at least the default for a chain of them."""
    bounds = [error_bound(op, dtype) for op in ops if error_bound(op, dtype) > 0]
    if len(bounds) <= 1:
        return max(bounds, default=0.0)
    return max(max(bounds), DEFAULT_ERROR)


def _compare_values(got, want, ops, where: str) -> None:
    if want.dtype.kind in "biu":
        slack = 1 if ROUNDING_OPS & set(ops) else 0
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        if diff.max() > slack:
            at = np.unravel_index(int(diff.argmax()), diff.shape)
            raise Mismatch(f"{where} differs at {list(at)}: {got[at]} vs reference {want[at]}")
        return
    tol = tolerance(ops, want.dtype.name)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: compared apart
        err, scale = _errors(got.astype(np.float64), want.astype(np.float64))
    if err.max() > tol:
        at = np.unravel_index(int(err.argmax()), err.shape)
        raise Mismatch(f"{where} differs by {err.max():.2e} of scale {scale:.3g} (tol {tol}) "
                       f"at {list(at)}: {got[at]} vs reference {want[at]}")


def _errors(g: np.ndarray, w: np.ndarray):
    """|g - w| relative to max(|w|, 1) per element (0 where both are the same NaN or
    infinity, inf where only one is), and that scale."""
    same_special = (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
    finite = np.isfinite(w)
    scale = max(float(np.max(np.abs(w[finite]))) if finite.any() else 0.0, 1.0)
    err = np.where(same_special, 0.0, np.abs(g - w) / scale)
    return np.where(np.isnan(err), np.inf, err), scale


PERIODIC = ("sin", "cos", "tan")
PERIODIC_LIMIT = 64.0


def periodic_arguments_small(module, feeds_list) -> bool:
    """Whether every sin/cos/tan of the program reads arguments below PERIODIC_LIMIT in
    magnitude: past it, the one-ulp differences float32 formulations of the ops before are
    allowed (a linear as matmul + add, or fused) move the result by more than the
    tolerance (cos of 2.5e5 moves by 0.016 per ulp)."""
    main = module.main
    args = [c.inputs[0] for c in main.calls if c.op in PERIODIC and c.inputs[0] is not None]
    consts = [np.asarray(a.data) for a in args if isinstance(a, Const)]
    values = tuple(a for a in args if not isinstance(a, Const))
    outs = []
    if values:
        probe = Module({**module.functions, "main": Function(main.params, main.calls, values,
                                                             main.kind, main.attrs)})
        run = legato.reference(probe)
        outs = [np.asarray(o) for feeds in feeds_list for o in as_tuple(run(*feeds))]
    for x in consts + outs:
        finite = np.abs(x[np.isfinite(x)].astype(np.float64)) if x.dtype.kind == "f" else x
        if finite.size and finite.max() > PERIODIC_LIMIT:
            return False
    return True


def ordinary(results) -> bool:
    """Results in a range where float32 formulations agree to the tolerance: no infinity,
    nothing huge (NaN is fine: it must come out as NaN everywhere)."""
    for r in results:
        if r.dtype.kind == "f" and r.size:
            magnitude = np.abs(r[~np.isnan(r)].astype(np.float64))
            if magnitude.size and magnitude.max() > HUGE:
                return False
    return True


@functools.lru_cache(maxsize=1)
def tosa_tools():
    from legato_tosa_custom.tools import TosaTools
    return TosaTools.find(REPO / ".venv-tosa")


def validate_tosa(text: str) -> None:
    tools = tosa_tools()
    if tools is None:
        return
    from legato_tosa_custom.tools import ToolError
    try:
        tools.validate(text)
    except ToolError as err:
        lines = [line for line in str(err).splitlines() if "error:" in line]
        raise InvalidOutput("tosa-opt rejects the emitted module: "
                            + (lines[0].split("error:", 1)[1].strip() if lines
                               else one_line(err))) from None


def run_tosa(text: str, feeds):
    """Results of the TOSA reference model on `feeds` (None without the tools)."""
    tools = tosa_tools()
    if tools is None:
        return None
    from legato_tosa_custom.tools import ToolError
    try:
        return tools.run_reference(text, feeds)
    except ToolError as err:
        raise InvalidOutput(f"the TOSA reference model fails on a module tosa-opt accepts: "
                            f"{one_line(err)}") from None


def check_tosa(module, feeds, expected, rng, compare_results, run_share: float = 0.3) -> None:
    """`module` compiled for tosa_custom passes tosa-opt; a `run_share` of such modules
    (without custom ops, which only their backend can run) also runs on the TOSA
    reference model, its results handed to `compare_results`."""
    try:
        compiled = legato.compile(module, EMITTING)
    except LegatoError:
        return
    validate_tosa(compiled.artifact)
    if rng.random() >= run_share or '"tosa.custom"' in compiled.artifact:
        return
    got = run_tosa(compiled.artifact, feeds)
    if got is not None:
        compare_results(list(got))


def compare_outputs(got, want, where: str, reference: str, rtol: float, atol: float,
                    first: int = 0) -> None:
    """Results against an outside reference (eager torch, onnxruntime): the same count,
    shapes and dtypes, integers exactly, floats within rtol and atol times the largest
    finite reference value (at least 1)."""
    if len(got) != len(want):
        raise Mismatch(f"{where}: {len(got)} outputs, {reference} {len(want)}")
    for index, (mine, theirs) in enumerate(zip(got, want), first):
        mine, theirs = np.asarray(mine), np.asarray(theirs)
        if mine.shape != theirs.shape:
            raise Mismatch(f"{where}: output {index} has shape {list(mine.shape)}, "
                           f"{reference} {list(theirs.shape)}")
        if mine.dtype != theirs.dtype:
            raise Mismatch(f"{where}: output {index} is {mine.dtype}, {reference} {theirs.dtype}")
        if theirs.dtype.kind in "biu":
            if not np.array_equal(mine, theirs):
                raise Mismatch(f"{where}: output {index} differs from {reference} "
                               f"({int(np.sum(mine != theirs))} elements)")
            continue
        a, b = mine.astype(np.float64), theirs.astype(np.float64)
        scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0, where=np.isfinite(b))))
        if not np.allclose(a, b, rtol=rtol, atol=atol * scale, equal_nan=True):
            worst = np.nanmax(np.abs(a - b), initial=0.0)
            raise Mismatch(f"{where}: output {index} differs from {reference} by up to "
                           f"{worst:.3g}")
