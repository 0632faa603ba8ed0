"""Constant folding before emission: calls whose inputs are all constants become constants.

Models compute tables from constants: a detection transformer's 2-D sine-cosine position
table is an arange in float64, divided, put through sin and cos, concatenated and cast to
float32. An executing backend runs such calls like any other (through its fallback where
it lacks the dtype), and `legato run` compares them call by call with the reference. An
emitting backend has no fallback: TOSA has no float64, so `sin(float64[16, 16])` could not
be emitted although its value is known before the model runs. So `compile` folds the
constant calls of a module for backends that emit, before legalization, every dtype.

Each call is evaluated with the reference kernels (cpu_ref's, the ground truth `legato
run` checks against): a folded float differs from what the target would have computed by
its own rounding only, as when onnxruntime folds constants. Calls the reference has no
kernel for, custom ops and function calls stay, as do results above FOLD_MAX_ELEMENTS:
a constant is written out in full, so folding a small table broadcast to an attention
mask of [1, 1, 4096, 4096] would put 64 MiB into the artifact that the model computes
from a few bytes, while position tables (DETR: 256 x 25 x 34) stay well below it.
"""
from __future__ import annotations

import numpy as np

from ..ir import CALL_OP, CUSTOM_OP, Call, Const, Function, Module, Value
from ..ir.errors import LegatoError
from .manager import FunctionPass

FOLD_MAX_ELEMENTS = 1 << 20  # elements of one folded result (4 MiB of float32)


class FoldConstants(FunctionPass):
    """Replace each call whose inputs are all constants by constants of its results,
    computed by `kernel_for(op)` (a callable, or None where the op is not folded)."""

    name = "fold-constants"

    def __init__(self, kernel_for, max_elements: int = FOLD_MAX_ELEMENTS):
        self.kernel_for, self.max_elements = kernel_for, max_elements

    def run_function(self, name: str, fn: Function, module: Module) -> tuple[Function, bool]:
        remap: dict[Value, Value] = {}
        calls = []
        for call in fn.calls:
            inputs = tuple(remap.get(v, v) for v in call.inputs)
            if inputs != call.inputs:
                call = Call(call.op, inputs, call.attrs, call.outputs, call.origin)
            folded = self._fold(call)
            if folded is None:
                calls.append(call)
            else:
                remap.update(zip(call.outputs, folded))
        if not remap:
            return fn, False
        return fn.with_calls(calls, tuple(remap.get(r, r) for r in fn.results)), True

    def _fold(self, call: Call) -> tuple[Const, ...] | None:
        """The call's results as constants, or None when it is not folded."""
        if call.op in (CALL_OP, CUSTOM_OP) or \
                not all(v is None or isinstance(v, Const) for v in call.inputs) or \
                any(o.type.symbolic or o.type.size > self.max_elements for o in call.outputs):
            return None  # (a result of symbolic size is computed once the size is bound)
        kernel = self.kernel_for(call.op)
        if kernel is None:
            return None
        try:
            with np.errstate(all="ignore"):  # inf and NaN fold as the reference makes them
                results = kernel(*[None if v is None else v.data for v in call.inputs],
                                 **dict(call.attrs))
        except Exception:  # noqa: BLE001 - left to legalization, which names the problem
            return None
        results = results if isinstance(results, tuple) else (results,)
        if len(results) != len(call.outputs):
            return None
        consts = []
        for out, array in zip(call.outputs, results):
            array = np.asarray(array)
            if array.shape != out.shape or array.dtype.name != out.dtype:
                return None  # not what the call's types say: do not trust it
            consts.append(Const.of(array))
        return tuple(consts)


def fold_constants(module: Module, context, keep=(),
                   max_elements: int = FOLD_MAX_ELEMENTS) -> Module:
    """`module` with its constant calls folded by the reference kernels of `context`
    (unchanged without cpu_ref, the reference backend). Ops in `keep` (a config's) stay:
    the user asked for them to reach the backend whole."""
    try:
        reference = context.backend("cpu_ref")
    except LegatoError:
        return module

    def kernel_for(op: str):
        return reference.kernel(op) if op not in keep and reference.has_kernel(op) else None
    return FoldConstants(kernel_for, max_elements)(module).module
