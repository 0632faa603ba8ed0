"""Constant folding of shape arithmetic at import, in the core with numpy.

Shape subgraphs (Shape -> Gather -> Concat -> Reshape, Slice of a shape, Cast, integer
arithmetic) must become constants at import, as later operands such as Reshape's shape
must be known. The calls a converter emitted for one node are evaluated here: primitive
ops with numpy, composite ops through their decompositions. Folding is bounded (tensor
sizes, decomposition depth) and gives up (returns None) on anything it does not know or
whose result is not exactly defined, which leaves the calls in the model; it never
depends on an installed backend.
"""
from __future__ import annotations

import numpy as np

from ...ir import Call, Const, TensorType, Value
from ...ir.calls import Emitter, run_decomposition
from ...ir.errors import LegatoError
from ...ir.shapes import norm_axes, norm_axis, slice_params, split_sizes
from ...ir.symbols import Expr, assume_le, never_negative

FOLD_DTYPES = ("int64", "int32", "int8", "uint8", "bool")
# float results fold only through the kernels below (each one IEEE-exact, as on any
# backend): shape code casts sizes to float and back, e.g. to compute a Resize's sizes
FLOAT_DTYPES = ("float32", "float64")
FOLD_MAX_ELEMENTS = 4096
MAX_DEPTH = 8  # nested decompositions; core composites need far fewer


class _CannotFold(Exception):
    """An op, value or input this folder does not evaluate."""


def foldable(values) -> bool:
    """Whether results of these types are worth folding (small integer shape data, or
    small floats on their way to becoming such)."""
    return bool(values) and all(v.dtype in FOLD_DTYPES + FLOAT_DTYPES and
                                not v.type.symbolic and v.type.size <= FOLD_MAX_ELEMENTS
                                for v in values)


def fold_calls(calls, values, registry) -> list[np.ndarray] | None:
    """The arrays of `values` computed from `calls` (whose inputs are constants or earlier
    results), or None when some call cannot be folded."""
    env: dict[int, np.ndarray] = {}
    # decompositions may compute differently from a backend's kernel, so only for integers
    registry = registry if all(v.dtype in FOLD_DTYPES for v in values) else None
    try:
        for call in calls:
            _evaluate(call, env, registry, 0)
        return [_array(v, env) for v in values]
    except (_CannotFold, LegatoError, ValueError, TypeError, IndexError, OverflowError):
        return None


def _array(value: Value, env) -> np.ndarray:
    if isinstance(value, Const):
        return value.data
    if id(value) not in env:
        raise _CannotFold(value)
    return env[id(value)]


def _evaluate(call: Call, env, registry, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _CannotFold(call.op)
    inputs = [None if v is None else _array(v, env) for v in call.inputs]
    if any(a is not None and a.size > FOLD_MAX_ELEMENTS for a in inputs):
        raise _CannotFold(call.op)
    kernel = KERNELS.get(call.op)
    if call.op in SHAPED:  # the result's shape is the call's inferred one
        results = (SHAPED[call.op](inputs[0], call.outputs[0].shape),)
    elif kernel is not None:
        results = kernel(*inputs, **call.attrs)
        results = results if isinstance(results, tuple) else (results,)
    else:
        opdef = None if registry is None else registry.get(call.op)
        if opdef is None or opdef.decompose is None:
            raise _CannotFold(call.op)
        emitter = Emitter(registry)
        outs = run_decomposition(emitter, opdef, call.inputs, call.attrs)
        for inner in emitter.calls:
            _evaluate(inner, env, registry, depth + 1)
        results = tuple(_array(v, env) for v in outs)
    if len(results) != len(call.outputs):
        raise _CannotFold(call.op)
    for out, array in zip(call.outputs, results):
        array = np.asarray(array)
        if array.shape != out.shape or array.size > FOLD_MAX_ELEMENTS:
            raise _CannotFold(call.op)
        env[id(out)] = _symbolic_ints(array, out.dtype) if array.dtype == object else \
            array.astype(out.dtype, copy=False)


# --- symbolic sizes: Shape of an input with symbolic dims, and the arithmetic on it --------

def shape_const(values) -> Const:
    """A constant of sizes: int64, or (some sizes being symbolic) a symbolic constant that
    holds them in an object array. Symbolic constants live only during import: shape
    arithmetic folds through them into reshape targets; one left as a call's operand is
    refused (check_no_symbolic_consts)."""
    array = np.asarray(values, dtype=object)
    if all(isinstance(v, (int, np.integer)) for v in array.ravel()):
        return Const.of(array.astype(np.int64))
    array.setflags(write=False)
    return Const(TensorType(array.shape, "int64"), None, array)


def is_symbolic_const(value) -> bool:
    return isinstance(value, Const) and value.data.dtype == object


def _symbolic_ints(array: np.ndarray, dtype: str) -> np.ndarray:
    if np.dtype(dtype).kind not in "iu":
        raise _CannotFold("symbolic sizes as non-integers")
    if all(isinstance(v, (int, np.integer)) for v in array.ravel()):
        return array.astype(dtype)
    return array


def _equal(a, b):
    if a.dtype != object and b.dtype != object:
        return np.equal(a, b)

    def known(x, y):
        if isinstance(x, Expr) or isinstance(y, Expr):
            if x == y:
                return True
            if any(never_negative(u) and isinstance(v, (int, np.integer)) and v < 0
                   for u, v in ((x, y), (y, x))):
                return False  # a size is never negative (ONNX exports test for -1)
            raise _CannotFold("equality of symbolic sizes")
        return x == y
    return np.frompyfunc(known, 2, 1)(a, b).astype(bool)


# --- numpy kernels of the primitives that shape arithmetic uses ----------------------------

def _is_int(*arrays) -> bool:
    return np.issubdtype(np.result_type(*arrays), np.integer)


def _divide(a, b):
    if a.dtype == object or b.dtype == object:  # symbolic sizes: exact or floor division
        return np.frompyfunc(_divide_size, 2, 1)(a, b)
    if not _is_int(a, b):
        return np.divide(a, b)
    if np.any(b == 0):
        raise _CannotFold("integer division by zero")
    quotient = np.floor_divide(a, b)  # integer division truncates toward zero
    return quotient + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


def _divide_size(x, y):
    """ONNX's integer Div (truncating) of a size: floor division where the dividend is
    not negative, which a difference of sizes (seq - 1) is guarded to be."""
    if not (isinstance(y, (int, np.integer)) and y > 0):
        raise _CannotFold("division of symbolic sizes")
    if not isinstance(x, Expr):
        return int(x) // int(y) if x >= 0 else -(-int(x) // int(y))
    if not never_negative(x):
        assume_le(0, x, f"a division of {x} by {y}")
    return x // int(y)


def _power(a, b):
    if _is_int(a, b) and np.any(b < 0):
        raise _CannotFold("negative integer exponent")
    return np.power(a, b)


def _wrapping(fn):
    def kernel(*arrays):
        with np.errstate(over="ignore"):  # integers wrap, as in every backend
            return fn(*arrays)
    return kernel


def _cast(data, *, dtype):
    if data.dtype == object:
        return _symbolic_ints(data, dtype)
    if data.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        if not np.all(np.isfinite(data)):
            raise _CannotFold("cast of a non-finite float to an integer")
        data = np.trunc(data)
        info = np.iinfo(dtype)
        if np.any((data < info.min) | (data > info.max)):
            raise _CannotFold("cast out of the integer range")
    return data.astype(dtype)


def _rounding(fn):
    return lambda a: a if a.dtype.kind in "iub" else fn(a)


def _reduction(fn):
    def kernel(data, *, axes=None, keepdims=False):
        axes = norm_axes(axes, data.ndim)
        if fn is not np.sum and any(data.shape[a] == 0 for a in axes):
            raise _CannotFold("max/min of an empty axis")
        with np.errstate(over="ignore"):
            return fn(data, axis=axes, keepdims=keepdims)
    return kernel


def _take(data, indices, *, axis=0):
    axis = norm_axis(axis, data.ndim)
    dim = data.shape[axis]
    if indices.dtype.kind not in "iu" or np.any((indices < -dim) | (indices >= dim)):
        raise _CannotFold("take: indices out of range")
    return np.take(data, np.where(indices < 0, indices + dim, indices), axis=axis)


def _strided_slice(data, **attrs):
    return data[tuple(p.as_slice() for p in slice_params(data.shape, attrs))]


def _split(data, *, sections=2, axis=0):
    axis = norm_axis(axis, data.ndim)
    bounds = np.cumsum(split_sizes(data.shape[axis], sections))[:-1]
    return tuple(np.split(data, bounds, axis=axis))


def _permute(data, *, axes=None):
    return data.transpose(None if axes is None else tuple(norm_axis(a, data.ndim)
                                                          for a in axes))


def _along(data, axis, *params):
    if params[0].size == 1:
        return [p.reshape(()) for p in params]
    shape = [1] * data.ndim
    shape[norm_axis(axis, data.ndim)] = params[0].size
    return [p.reshape(shape) for p in params]


def _quantize(data, scale, zero, *, axis=1, dtype="int8"):
    """QuantizeLinear of a constant (onnxruntime's quantizer writes Pad's constant value as
    one): `saturate(round_half_even(x / scale) + zero_point)`, divided in x's dtype."""
    scale, zero = _along(data, axis, scale, zero)
    if not (np.all(np.isfinite(scale)) and np.all(scale != 0)):
        raise _CannotFold("a zero or non-finite quantization scale")
    info = np.iinfo(dtype)
    q = np.rint(np.divide(data, scale)) + zero.astype(np.float64)
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantized(call: Call) -> np.ndarray | None:
    """The value of a dequantize call of constants, for an input that must be known at
    import (onnxruntime's quantizer writes Pad's constant value as one); None otherwise.
    Import does not fold dequantize calls by themselves: legato.fold_qdq reads their
    scales and zero points."""
    if call.op != "qnn.dequantize" or not all(isinstance(v, Const) for v in call.inputs):
        return None
    return _dequantize(*(v.data for v in call.inputs), **call.attrs)


def _dequantize(data, scale, zero, *, axis=1):
    """`(x - zero_point) * scale` in the scale's dtype."""
    scale, zero = _along(data, axis, scale, zero)
    return (data.astype(scale.dtype) - zero.astype(scale.dtype)) * scale


KERNELS = {
    "qnn.quantize": _quantize,
    "add": _wrapping(np.add), "subtract": _wrapping(np.subtract),
    "multiply": _wrapping(np.multiply), "divide": _divide, "power": _wrapping(_power),
    "maximum": np.maximum, "minimum": np.minimum, "negative": _wrapping(np.negative),
    "abs": _wrapping(np.abs), "equal": _equal, "greater": np.greater, "less": np.less,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_not": np.logical_not, "where": np.where,
    "floor": _rounding(np.floor), "ceil": _rounding(np.ceil), "round": _rounding(np.round),
    "cast": _cast,
    "sum": _reduction(np.sum), "max": _reduction(np.max), "min": _reduction(np.min),
    "concat": lambda *data, axis=0: np.concatenate(data, axis=norm_axis(axis, data[0].ndim)),
    "permute_dims": _permute, "strided_slice": _strided_slice, "split": _split,
    "take": _take,
}
SHAPED = {"reshape": np.reshape, "broadcast_to": np.broadcast_to}
