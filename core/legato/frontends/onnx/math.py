"""ONNX converters that compose existing legato ops: reductions of norms and logs, constant
generators, Hardmax, Swish and Lp normalization."""
from __future__ import annotations

import math
from functools import reduce

import numpy as np

from ...ir import Const, TensorType
from ...ir.shapes import norm_axes
from ...ir.symbols import Expr, assume_le
from ..common import linalg, shifts
from ..common.indexing import one_hot_values
from .convert import converter, onnx_dtype
from .helpers import _axes, _empty_identity, cast_to


@converter("Mean")
def mean(node):
    args = node.args()
    total = reduce(lambda a, b: node.call("add", a, b), args)
    return total if len(args) == 1 else node.call("divide", total, float(len(args)))


@converter("CastLike")
def cast_like(node):
    return cast_to(node, node.arg(0), node.arg(1).dtype)


@converter("ConstantOfShape", const_inputs=(0,))
def constant_of_shape(node):
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if node.const(0).dtype == object:  # symbolic sizes: the value broadcast at run time
        return node.call("broadcast_to", Const.of(fill[:1].reshape(())),
                         shape=[d if isinstance(d, Expr) else int(d) for d in node.const(0)])
    shape = node.ints(0)
    node.budget(math.prod(shape), "ConstantOfShape")
    return Const.of(np.full(shape, fill[0], dtype=fill.dtype))


@converter("Range", const_inputs=(0, 1, 2))
def range_(node):
    start, limit, delta = (node.const(i) for i in range(3))
    node.require(delta.item() != 0, "delta must not be 0")
    if object in (start.dtype, limit.dtype):
        return _symbolic_range(node, start.item(), limit.item(), delta)
    count = max(0, math.ceil((limit.item() - start.item()) / delta.item()))
    node.budget(count, "Range")
    return Const.of((start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype))


def _symbolic_range(node, start, limit, delta):
    """A range between sizes (a decoder's positions `Range(past, past + seq)`): `count`
    steps of `delta` summed, the running sum shifted to start at `start`, which the
    importer computes at run time when it is symbolic (sizes.py)."""
    step = delta.item()
    node.require(isinstance(step, int) and step > 0, f"a range over symbolic sizes needs a "
                                                     f"positive integer delta, not {step}")
    count = (limit - start + step - 1) // step
    assume_le(0, count, f"Range node {node.label} from {start} to {limit}")
    steps = node.call("broadcast_to", Const.of(delta.reshape(())), shape=[count])
    running = node.call("cumsum", steps, axis=0, exclusive=True)
    first = Const(TensorType((), running.dtype), None, np.array(start, dtype=object)) \
        if isinstance(start, Expr) else Const.of(np.array(start, running.dtype))
    return node.call("add", running, first)


@converter("EyeLike")
def eye_like(node):
    x = node.arg(0)
    node.require(x.rank == 2, f"input must be 2-D, got {x.type}")
    dtype = onnx_dtype(node.attr("dtype"), "attribute 'dtype'") \
        if node.attr("dtype") is not None else x.dtype
    node.budget(x.type.size, "EyeLike")
    return Const.of(np.eye(*x.shape, k=node.attr("k", 0), dtype=dtype))


@converter("Swish")
def swish(node):
    x, alpha = node.arg(0), node.attr("alpha", 1.0)
    if alpha == 1.0:
        return node.call("nn.silu", x)
    return node.call("multiply", x, node.call("sigmoid", node.call("multiply", x, alpha)))


@converter("Hardmax")
def hardmax(node):
    x = node.arg(0)
    axis = node.axis("axis", x.rank, -1)
    index = node.call("argmax", x, axis=axis, keepdims=False)
    one, zero = (Const.of(np.array(v, dtype=x.dtype)) for v in (1, 0))
    return one_hot_values(node.b, index, x.shape[axis], axis, one, zero)


# --- reductions built from sum and max --------------------------------------------------------

def _reduce_axes(node, x):
    """(axes, keepdims), or None when the node reduces nothing (noop_with_empty_axes)."""
    axes, keepdims = _axes(node), node.flag("keepdims", 1)
    if not axes:
        if node.flag("noop_with_empty_axes", 0):
            return None
        axes = None
    return list(norm_axes(axes, x.rank)), keepdims


NOOP = None  # the axes of a reduction over nothing (noop_with_empty_axes)


def _sum(node, x, axes, keepdims):
    return x if axes is NOOP else node.call("sum", x, axes=axes, keepdims=keepdims)


LOG_REDUCTIONS = {
    "ReduceSumSquare": lambda n, x, a, k: _sum(n, n.call("multiply", x, x), a, k),
    "ReduceL1": lambda n, x, a, k: _sum(n, n.call("abs", x), a, k),
    "ReduceL2": lambda n, x, a, k: n.call("sqrt", _sum(n, n.call("multiply", x, x), a, k)),
    "ReduceLogSum": lambda n, x, a, k: n.call("log", _sum(n, x, a, k)),
    "ReduceLogSumExp": lambda n, x, a, k: _log_sum_exp(n, x, a, k),
}
EMPTY = {"ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceLogSum": -math.inf,
         "ReduceLogSumExp": -math.inf}


def _log_sum_exp(node, x, axes, keepdims):
    if axes is NOOP:  # log(exp(x))
        return x
    if not x.dtype.startswith(("float", "bfloat")):
        return node.call("log", _sum(node, node.call("exp", x), axes, keepdims))
    peak = node.call("max", x, axes=axes, keepdims=True)
    # a row of -inf has peak -inf: shift by 0 there so the result is -inf, not NaN
    peak = node.call("where", node.call("isinf", peak), 0.0, peak)
    total = _sum(node, node.call("exp", node.call("subtract", x, peak)), axes, True)
    out = node.call("add", node.call("log", total), peak)
    return out if keepdims else node.call("squeeze", out, axes=axes)


@converter(*LOG_REDUCTIONS, const_inputs=(1,))
def log_reduction(node):
    x = node.arg(0)
    found = _reduce_axes(node, x)
    if found is None:  # the function body's elementwise part still applies: x^2, |x|, ...
        return LOG_REDUCTIONS[node.op](node, x, NOOP, True)
    axes, keepdims = found
    if any(x.shape[a] == 0 for a in axes):
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)
                 if keepdims or i not in axes]
        return Const.of(_empty_identity(EMPTY[node.op], x.dtype, shape))
    return LOG_REDUCTIONS[node.op](node, x, axes, keepdims)



# --- normalizations ---------------------------------------------------------------------------

@converter("LpNormalization")
def lp_normalization(node):
    x, p = node.arg(0), node.attr("p", 2)
    axis = node.axis("axis", x.rank, -1)
    node.require(p in (1, 2), f"p = {p} must be 1 or 2")
    size = node.call("abs", x) if p == 1 else node.call("multiply", x, x)
    norm = node.call("sum", size, axes=[axis], keepdims=True)
    norm = norm if p == 1 else node.call("sqrt", norm)
    # a zero vector stays zero (the reference implementation divides by 1 there)
    norm = node.call("where", node.call("equal", norm, 0.0), 1.0, norm)
    return node.call("divide", x, norm)



# --- constants from shapes: window functions ---------------------------------------------------

WINDOWS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
           "BlackmanWindow": (0.42, 0.5, 0.08)}


@converter(*WINDOWS, const_inputs=(0,))
def window(node):
    """a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic) or size - 1."""
    size = int(node.scalar(0))
    node.budget(size, node.op)
    a0, a1, a2 = WINDOWS[node.op]
    n = np.arange(size, dtype=np.float64)
    period = size if node.flag("periodic", 1) else size - 1
    values = a0 - a1 * np.cos(2 * np.pi * n / period) + a2 * np.cos(4 * np.pi * n / period) \
        if period > 0 else np.ones(size)
    dtype = onnx_dtype(node.attr("output_datatype", 1), "attribute 'output_datatype'")
    return Const.of(values.astype(dtype))


@converter("BitShift")
def bit_shift(node):
    """Shifts as integer arithmetic (shifts.shift); a shift outside [0, bits) gives 0 (-1
    for a negative value shifted right), as onnx's reference defines it."""
    x, amount = node.arg(0), node.arg(1)
    node.require(x.dtype in ("int8", "int16", "int32", "int64", "uint8"),
                 f"BitShift needs an integer tensor, got {x.dtype}")
    if amount.dtype != x.dtype:
        amount = node.call("cast", amount, dtype=x.dtype)
    return shifts.shift(node.b, x, amount, node.attr("direction") == "LEFT")


@converter("Det")
def det(node):
    """Gaussian elimination with partial pivoting (linalg.det); singular matrices give 0."""
    a = node.arg(0)
    node.require(a.rank >= 2 and a.shape[-1] == a.shape[-2] and a.dtype.startswith("float"),
                 f"input {a.type} must be a float tensor of square matrices")
    return linalg.det(node.b, a)
