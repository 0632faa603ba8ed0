"""Lowering rules and legality checks: how legato calls reach the forms TOSA 1.0 takes.

capability.yaml names these. A check `check(call) -> reason | None` says what the YAML's
declarative conditions cannot (equal ranks, one reduction axis, exact window division).
A rule `rule(b, call)` rewrites a call the backend does not take as it stands into calls
it does (legato ops and the TOSA ops of ops.py), or returns None to leave the call to the
generic decomposition; the legalizer sends whatever a rule emits through the same steps.
So 2-D matmuls, NCHW convolutions and rank-mismatched adds are adapted here, and the
emitter prints only calls that are already legal.

Every check also applies the limits of limits.py (no empty tensors, rank at most 6, pro_fp
element types); the rules of ops listed as legal decline calls whose tensors break them, so
the refusal names the limit.

int64 tensors are int32 ones here (narrowing.py): they take the int32 forms, and integer
ops pro_fp has only for floats run on float32 copies of their values (integers.py).
"""
from __future__ import annotations

import math

import numpy as np
from legato.plugin_api import (Const, broadcast_shapes, clip, is_float, norm_axes, norm_axis,
                              slice_params, split_sizes, window)

from .limits import MAX_TENSOR_LIST, TOSA_DTYPES, checked, shaped_rule, window_problem
from .integers import INT_DTYPES, back, int_division, trunc, via_float_call
from .narrowing import narrow_array, tosa_dtype
from .ops import INDEX_DTYPE

# TOSA 1.0 CAST modes of profile pro_fp (bool and integer-to-integer casts need pro_int)
PRO_FP_CASTS = {(src, dst) for src in INT_DTYPES + ("float32", "float16")
                for dst in ("float32", "float16") if src != dst} | \
               {(src, dst) for src in ("float32", "float16") for dst in INT_DTYPES}
NCHW_TO_NHWC, NHWC_TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
TO_OHWI = {"OIHW": (0, 2, 3, 1), "HWIO": (3, 0, 1, 2), "OHWI": None}


# --- helpers: constants are folded instead of reshaped or transposed at run time ----------

def reshape(b, x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if isinstance(x, Const):
        return b.const(x.data.reshape(shape))
    return b.reshape(x, shape=list(shape))


def permute(b, x, axes):
    if axes is None or tuple(axes) == tuple(range(x.rank)):
        return x
    if isinstance(x, Const):
        return b.const(np.transpose(x.data, axes))
    return b.permute_dims(x, axes=list(axes))


def splat(b, x, value, dtype=None):
    """`value` as a constant of x's rank with every dim 1: it broadcasts against x without
    changing its shape (a [1] constant would make a rank-0 result [1])."""
    return b.const(np.full((1,) * x.rank, value, dtype or x.dtype))


def broadcast(b, x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if isinstance(x, Const):
        return b.const(np.broadcast_to(x.data, shape))
    return b.broadcast_to(x, shape=list(shape))


def _index_const(b, indices, what="gather indices"):
    return b.const(narrow_array(np.asarray(indices, dtype=np.int64), what))


# --- checks -------------------------------------------------------------------------------

# for ops whose only conditions are dtypes, ranks and attributes
tosa_tensors = checked(name="tosa_tensors")


def _same_rank(call):
    ranks = sorted({v.rank for v in call.inputs if v is not None})
    return None if len(ranks) <= 1 else f"operands of ranks {ranks} (TOSA needs equal ranks)"


same_rank = checked(_same_rank, "same_rank")


@checked
def select_form(call):
    cond, x, _ = call.inputs
    if not is_float(x.dtype):
        return f"{x.dtype} data (pro_fp selects float tensors)"
    return _same_rank(call)


def _rank_1_up(call, tosa_op: str):
    if call.inputs[0].rank == 0:
        return f"a rank-0 operand (TOSA {tosa_op} takes rank 1 and up)"
    return None


@checked
def gather_form(call):
    values = call.inputs[0]
    if not is_float(values.dtype):
        return f"{values.dtype} values (pro_fp gathers float tensors; integers need pro_int)"
    return None


@checked
def pad_form(call):
    return _rank_1_up(call, "PAD")


@checked
def transpose_form(call):
    return _rank_1_up(call, "TRANSPOSE")


@checked
def concat_form(call):
    if len(call.inputs) > MAX_TENSOR_LIST:
        return f"{len(call.inputs)} operands (TOSA CONCAT takes at most {MAX_TENSOR_LIST})"
    return _rank_1_up(call, "CONCAT")


@checked
def argmax_form(call):
    """TOSA ARGMAX: drops the axis, picks the first maximum (NaN counts as the maximum, as
    in numpy); the int32 result is the int64 one narrowed."""
    if call.attrs["keepdims"] or call.attrs["select_last_index"]:
        return "keepdims or select_last_index (TOSA ARGMAX drops the axis, picks the first)"
    return _rank_1_up(call, "ARGMAX")


@checked
def clamp_bounds(call):
    """CLAMP's bounds are numbers (clip's inference refuses NaN bounds today; should one
    arrive, MAXIMUM / MINIMUM propagate it as the reference does); bounds out of order the
    emitter handles."""
    bounds = [call.attrs[k] for k in ("min", "max") if call.attrs[k] is not None]
    if any(math.isnan(bound) for bound in bounds):
        return "a NaN bound (TOSA CLAMP needs numeric bounds)"
    return None


@checked
def single_axis(call):
    axes = norm_axes(call.attrs["axes"], call.inputs[0].rank)
    return None if len(axes) == 1 else f"axes {list(axes)} (TOSA reduces one axis at a time)"


@checked
def same_batch(call):
    a, b = call.inputs
    return None if a.shape[0] == b.shape[0] else \
        f"batch {a.shape[0]} vs {b.shape[0]} (TOSA MATMUL needs equal N)"


@checked
def full_rank_shape(call):
    x, shape = call.inputs[0], call.attrs["shape"]
    return _rank_1_up(call, "TILE") or (None if x.rank == len(shape) else
                                        f"rank {x.rank} to {len(shape)} (TOSA TILE keeps the rank)")


@checked
def tile_form(call):
    return _rank_1_up(call, "TILE")


@checked
def unit_strides(call):
    strides = call.attrs["strides"]
    return _rank_1_up(call, "SLICE") or (
        None if strides is None or all(s == 1 for s in strides) else
        f"strides {list(strides)} (TOSA SLICE has unit strides)")


@checked
def tosa_cast_mode(call):
    """TOSA CAST as it stands: one of the modes pro_fp has in TOSA 1.0."""
    src, dst = call.inputs[0].dtype, call.attrs["dtype"]
    if (tosa_dtype(src), tosa_dtype(dst)) not in PRO_FP_CASTS:
        return f"{src} to {dst} (not a TOSA 1.0 pro_fp CAST mode)"
    return None


@checked
def cast_supported(call):
    """TOSA CAST where it means what legato's cast means: to a float type (TOSA rounds
    floats to the nearest integer, legato truncates: the cast rule handles those), or
    between int64 and int32, which are one type in the module (the emitter prints none)."""
    src, dst = call.inputs[0].dtype, call.attrs["dtype"]
    if src != dst and tosa_dtype(src) == tosa_dtype(dst):
        return None
    if (tosa_dtype(src), tosa_dtype(dst)) not in PRO_FP_CASTS or not is_float(dst):
        return f"{src} to {dst} (pro_fp CAST: no bool, no integer to integer, float to int " \
               "rounds to nearest)"
    return None


SPATIAL = {"NCHW": slice(2, 4), "NHWC": slice(1, 3)}
KERNEL_HW = {"OIHW": slice(2, 4), "OHWI": slice(1, 3), "HWIO": slice(0, 2)}


def call_window(call):
    """The geometry of a conv2d or pool2d call, in its own layouts."""
    x, a = call.inputs[0], call.attrs
    hw = x.shape[SPATIAL[a["data_layout"]]]
    if call.op == "nn.conv2d":
        kernel = call.inputs[1].shape[KERNEL_HW[a["kernel_layout"]]]
        return window(hw, kernel, a["strides"], a["dilation"], a["padding"], what=call.op)
    return window(hw, a["pool_size"], a["strides"], a["dilation"], a["padding"],
                  a["ceil_mode"], what=call.op, kernel_name="pool_size")


def _level_problem(win) -> str | None:
    """Level 8K's limits on a window (its kernel times the dilation)."""
    return window_problem([k * d for k, d in zip(win.kernel, win.dilation)], win.strides,
                          win.padding)


def _pad_problem(win) -> str | None:
    if any(p >= k for p, k in zip(win.padding, win.kernel * 2)):
        return f"padding {list(win.padding)} (TOSA needs padding below the kernel size)"
    return None


def _exact_problem(win) -> str | None:
    if any(win.unreached):
        return f"padding {list(win.padding)} (TOSA needs the windows to divide the input " \
               "exactly)"
    return None


@checked
def conv2d_fits(call):
    win = call_window(call)
    return _level_problem(win) or _exact_problem(win)


@checked
def pool2d_fits(call):
    win = call_window(call)
    return _pad_problem(win) or _level_problem(win) or _exact_problem(win)


# --- elementwise --------------------------------------------------------------------------

@shaped_rule
def broadcast_ranks(b, call):
    """Reshape lower-rank operands to the result's rank (TOSA broadcasts size-1 dims only)."""
    rank = call.outputs[0].rank
    if all(v.rank == rank for v in call.inputs):
        return None
    inputs = [reshape(b, v, (1,) * (rank - v.rank) + v.shape) for v in call.inputs]
    return b.call(call.op, *inputs, **call.attrs)


def less(b, call):
    x, y = call.inputs
    return b.greater(y, x)


def divide(b, call):
    """x / y = x * (1 / y): TOSA 1.0 has no float divide (INTDIV is integer only);
    integers truncate toward zero (integers.int_division)."""
    x, y = call.inputs
    if x.dtype in INT_DTYPES:
        quotient, _ = int_division(b, call)
        return back(b, quotient, call.outputs[0].dtype)
    if not is_float(x.dtype):
        return None
    if isinstance(y, Const):
        return _divide_by_constant(b, x, y.data)
    return b.multiply(x, b.call("tosa.reciprocal", y))


def _divide_by_constant(b, x, y):
    """x * (1 / y) folded. Where 1 / y overflows (|y| below 1 / max: subnormals) it is
    (x * (1 / (y * s))) * s with a power of two s, so that x / y stays finite where it is;
    x / 0 is +-inf (or NaN), as in numpy."""
    with np.errstate(divide="ignore", over="ignore"):
        inverse = np.reciprocal(y)
        tiny = np.isinf(inverse) & (y != 0)
        if not tiny.any():
            return b.multiply(x, b.const(inverse))
        scale = np.where(tiny, 2.0 ** (np.finfo(y.dtype).maxexp - 1), 1.0).astype(y.dtype)
        return b.multiply(b.multiply(x, b.const(np.reciprocal(y * scale))), b.const(scale))


def power(b, call):
    """numpy's power from TOSA POW, which is only defined for a finite base > 0 and a finite
    exponent: small integer exponents become products; otherwise POW of |x| on inputs made
    valid, exp(y * log|x|) for zero / infinite / NaN operands, then numpy's sign and special
    cases (negative bases: odd integer powers negate, others are NaN; x**0 = 1**y = 1)."""
    x, y = call.inputs
    if not is_float(x.dtype):
        return None
    exponent = float(y.data.reshape(())) if isinstance(y, Const) and y.data.size == 1 else None
    if exponent in (1, 2, 3, 4, -1, -2):
        n = int(exponent)
        z = x
        for _ in range(abs(n) - 1):
            z = b.multiply(z, x)
        z = z if n > 0 else b.call("tosa.reciprocal", z)
        return reshape(b, broadcast(b, z, call.outputs[0].shape), call.outputs[0].shape)
    return _general_power(b, x, y, x.dtype)


def _finite(b, v):
    return b.equal(b.subtract(v, v), 0.0)  # inf - inf and NaN - NaN are NaN


def _general_power(b, x, y, dtype):
    one, nan = b.scalar(1.0, dtype), b.scalar(float("nan"), dtype)
    ax = b.abs(x)
    valid = b.logical_and(b.logical_and(b.greater(ax, 0.0), _finite(b, ax)), _finite(b, y))
    base, expo = b.where(valid, ax, one), b.where(valid, y, one)
    magnitude = b.where(valid, b.call("tosa.pow", base, expo), b.exp(b.multiply(y, b.log(ax))))
    integer = b.equal(b.floor(y), y)
    odd = b.logical_and(integer, b.equal(
        b.subtract(y, b.multiply(b.floor(b.multiply(y, 0.5)), 2.0)), 1.0))
    negative = b.logical_or(b.less(x, 0.0), b.less(b.call("tosa.reciprocal", x), 0.0))  # -0
    signed = b.where(b.logical_and(negative, odd), b.negative(magnitude), magnitude)
    signed = b.where(b.logical_and(b.logical_and(negative, valid), b.logical_not(integer)),
                     nan, signed)
    unit = b.logical_or(b.logical_or(b.equal(y, 0.0), b.equal(x, 1.0)),
                        b.logical_and(b.equal(ax, 1.0), b.equal(b.abs(y), float("inf"))))
    return b.where(unit, one, signed)


def tosa_cast(b, call):
    """A CAST to the type it has is the tensor (TOSA has no such CAST mode); between
    int32 and int64 it is legato's cast, which prints nothing."""
    x, dst = call.inputs[0], call.attrs["dtype"]
    if x.dtype == dst:
        return x
    return b.cast(x, dtype=dst) if tosa_dtype(x.dtype) == tosa_dtype(dst) else None


def sqrt(b, call):
    return b.call("tosa.reciprocal", b.rsqrt(call.inputs[0]))


# the magnitude from which every float of the dtype is an integer
INTEGRAL_FROM = {"float32": 2.0 ** 23, "float16": 2.0 ** 10, "bfloat16": 2.0 ** 7}


def round_half_even(b, call):
    """numpy rint: CAST to int32 and back (TOSA 1.0 rounds float to int to the nearest
    integer, ties to even); a value of INTEGRAL_FROM and more, +-inf and NaN (whose CAST
    TOSA leaves undefined) are their own rounding, and pass as they are."""
    x = call.inputs[0]
    if x.dtype not in INTEGRAL_FROM:
        return None
    back = b.cast(b.call("tosa.cast", x, dtype="int32"), dtype=x.dtype)
    small = b.greater(b.scalar(INTEGRAL_FROM[x.dtype], x.dtype), b.abs(x))
    return b.where(small, back, x)


@shaped_rule
def cast(b, call):
    x, dst = call.inputs[0], call.attrs["dtype"]
    src = x.dtype
    if src == dst:
        return x
    if src not in TOSA_DTYPES or dst not in TOSA_DTYPES:
        return None
    if src in INT_DTYPES and dst in INT_DTYPES:  # pro_fp has no integer CAST
        if np.dtype(tosa_dtype(src)).itemsize > np.dtype(tosa_dtype(dst)).itemsize:
            return None  # narrowing wraps around in legato; TOSA's CAST would saturate
        # widening: int8 / int16 values are exact in float32
        return b.call("tosa.cast", b.cast(x, dtype="float32"), dtype=dst)
    if src in INT_DTYPES:  # to bool: through float (pro_fp compares floats only)
        x = b.cast(x, dtype="float32")
    if dst == "bool":
        return b.logical_not(b.equal(x, b.scalar(0, x.dtype)))
    if src == "bool":
        x = b.where(x, b.scalar(1.0, "float32"), b.scalar(0.0, "float32"))
        if dst in INT_DTYPES:
            return b.call("tosa.cast", x, dtype=dst)
        return x if dst == "float32" else b.cast(x, dtype=dst)
    # float to int: truncate toward zero first, then TOSA's rounding cast is exact (and
    # saturates); NaN, which TOSA leaves undefined, is 0 as in legato's cast
    truncated = b.where(b.equal(x, x), trunc(b, x), b.scalar(0.0, x.dtype))
    return b.call("tosa.cast", truncated, dtype=dst)


# --- reductions and matmul ----------------------------------------------------------------

@shaped_rule
def argmax(b, call):
    """keepdims: a reshape after; the last maximum: the first of the reversed axis."""
    x, attrs = call.inputs[0], call.attrs
    if x.rank == 0:
        return None
    axis = norm_axis(attrs["axis"], x.rank)
    size = x.shape[axis]
    if attrs["select_last_index"]:
        x = b.take(x, _index_const(b, np.arange(size - 1, -1, -1)), axis=axis)
    index = b.argmax(x, axis=axis, keepdims=False, select_last_index=False)
    if attrs["select_last_index"]:
        index = b.subtract(b.scalar(size - 1, index.dtype), index)
    return reshape(b, index, call.outputs[0].shape)


@shaped_rule
def reduce_axes(b, call):
    """One keepdims reduction per axis, then a reshape drops the kept axes if asked."""
    x = call.inputs[0]
    axes = norm_axes(call.attrs["axes"], x.rank)
    for axis in axes:
        x = b.call(call.op, x, axes=[axis], keepdims=True)
    return reshape(b, x, call.outputs[0].shape)


@shaped_rule
def matmul(b, call):
    """numpy matmul as one 3-D TOSA MATMUL [N, M, K] x [N, K, W] between reshapes."""
    x, y = call.inputs
    xs = x.shape if x.rank > 1 else (1,) + x.shape
    ys = y.shape if y.rank > 1 else y.shape + (1,)
    m, k, n = xs[-2], xs[-1], ys[-1]
    if math.prod(ys[:-2]) == 1:  # y has no batch: fold x's batch into the rows
        rows = math.prod(xs[:-1])
        z = b.matmul(reshape(b, x, (1, rows, k)), reshape(b, y, (1, k, n)))
    else:
        batch = broadcast_shapes(xs[:-2], ys[:-2])
        count = math.prod(batch)
        x3 = reshape(b, broadcast(b, reshape(b, x, xs), batch + (m, k)), (count, m, k))
        y3 = reshape(b, broadcast(b, reshape(b, y, ys), batch + (k, n)), (count, k, n))
        z = b.matmul(x3, y3)
    return reshape(b, z, call.outputs[0].shape)


# --- data movement ------------------------------------------------------------------------

@shaped_rule
def broadcast_to(b, call):
    x, shape = call.inputs[0], tuple(call.attrs["shape"])
    x = reshape(b, x, (1,) * (len(shape) - x.rank) + x.shape)
    # nothing left to tile: no TILE (a rank-0 one is not TOSA)
    return x if x.shape == shape else b.broadcast_to(x, shape=list(shape))


def take(b, call):
    """take along any axis as TOSA GATHER ([N, K, C] values, [N, W] int32 indices): an
    embedding lookup with int64 token ids is one GATHER of the i32 ids the module takes.

    Run-time indices are wrapped and shaped as floats (pro_fp has no integer compare,
    select or reshape) and cast to int32 last; exact below 2**24. Integer and bool data
    are gathered as float32.
    """
    data, idx = call.inputs
    axis = norm_axis(call.attrs["axis"], data.rank)
    size = data.shape[axis]
    if not (isinstance(idx, Const) or idx.dtype in INT_DTYPES):
        return None  # uint8 indices: not in TOSA 1.0 pro_fp
    if data.dtype in INT_DTYPES or data.dtype == "bool":  # pro_fp gathers floats
        return via_float_call(b, call, [0], take)
    if not is_float(data.dtype):
        return None
    if isinstance(idx, Const):
        return gather_along(b, call, const_indices(b, idx, size))
    idx = b.cast(idx, dtype="float32")
    idx = b.where(b.less(idx, 0.0), b.add(idx, float(size)), idx)
    return gather_along(b, call, idx)


def const_indices(b, idx, size: int):
    """take's constant indices, negative ones wrapped, as an int32 constant."""
    what = f"take's index constant {clip(idx.name or str(idx.type), 60)}"
    given = narrow_array(idx.data, what).astype(np.int64)  # names the value as given
    return _index_const(b, np.where(given < 0, given + size, given), what)


def gather_along(b, call, idx):
    """take's GATHER of [outer, axis, inner] values at `idx` (wrapped indices, float32 or
    int32; cast to int32 last)."""
    data = call.inputs[0]
    axis = norm_axis(call.attrs["axis"], data.rank)
    size = data.shape[axis]
    outer, inner = math.prod(data.shape[:axis]), math.prod(data.shape[axis + 1:])
    count = math.prod(idx.shape)
    indices = broadcast(b, reshape(b, idx, (1, count)), (outer, count))
    if not isinstance(indices, Const):
        indices = b.call("tosa.cast", indices, dtype=INDEX_DTYPE) if is_float(
            indices.dtype) else b.cast(indices, dtype=INDEX_DTYPE)
    values = reshape(b, data, (outer, size, inner))
    return reshape(b, b.call("tosa.gather", values, indices), call.outputs[0].shape)


@shaped_rule
def strided_slice(b, call):
    """Non-unit steps become a gather of the picked indices; the rest one unit slice."""
    x = call.inputs[0]
    params = slice_params(x.shape, call.attrs)
    for axis, (start, stop, step, length) in enumerate(params):
        if step != 1:
            picked = np.arange(start, stop, step)[:length]
            x = b.take(x, _index_const(b, picked), axis=axis)
    unit = [(axis, p.start, p.start + p.length) for axis, p in enumerate(params)
            if p.step == 1 and (p.start, p.length) != (0, x.shape[axis])]
    if unit:
        x = b.strided_slice(x, begin=[u[1] for u in unit], end=[u[2] for u in unit],
                            axes=[u[0] for u in unit])
    return x


@shaped_rule
def permute_dims(b, call):
    """A permutation of a rank-0 tensor (empty perms) is the tensor: no TOSA TRANSPOSE."""
    x = call.inputs[0]
    return x if x.rank == 0 else None


@shaped_rule
def concat(b, call):
    """More operands than one TOSA CONCAT takes (MAX_TENSOR_LIST_SIZE, 64 at level 8K; an
    LSTM unrolled over 75 steps has 75): a tree of concats along the same axis, each of at
    most that many operands."""
    if len(call.inputs) <= MAX_TENSOR_LIST:
        return None
    axis, level = call.attrs["axis"], list(call.inputs)
    while len(level) > MAX_TENSOR_LIST:
        groups = [level[i:i + MAX_TENSOR_LIST] for i in range(0, len(level), MAX_TENSOR_LIST)]
        level = [g[0] if len(g) == 1 else b.concat(*g, axis=axis) for g in groups]
    return b.concat(*level, axis=axis)


def split(b, call):
    x = call.inputs[0]
    axis = norm_axis(call.attrs["axis"], x.rank)
    parts, start = [], 0
    for size in split_sizes(x.shape[axis], call.attrs["sections"]):
        parts.append(b.strided_slice(x, begin=[start], end=[start + size], axes=[axis]))
        start += size
    return tuple(parts)


@shaped_rule
def pad(b, call):
    """reflect / edge padding as a gather of mirrored or clamped indices per axis."""
    x, pads, mode = call.inputs[0], call.attrs["pads"], call.attrs["mode"]
    if not any(pads):  # nothing to pad (a rank-0 PAD is not TOSA)
        return x
    if mode == "constant":
        return None
    rank = x.rank
    for axis, n in enumerate(x.shape):
        lo, hi = pads[axis], pads[axis + rank]
        if lo or hi:
            idx = np.arange(-lo, n + hi)
            idx = np.clip(idx, 0, n - 1) if mode == "edge" else \
                np.where(idx < 0, -idx, np.where(idx >= n, 2 * (n - 1) - idx, idx))
            x = b.take(x, _index_const(b, idx), axis=axis)
    return x


# --- convolution and pooling: NHWC / OHWI, exact windows ----------------------------------

def _fit_windows(b, x, win):
    """Drop bottom/right padding, then input rows/cols, that no window reaches, so the
    window count divides exactly as TOSA requires; x is NHWC. Returns x and the padding."""
    padding = list(win.padding)
    crop = []
    for i, rest in enumerate(win.unreached):
        cut = min(rest, padding[i + 2])
        padding[i + 2] -= cut
        crop.append(rest - cut)
    if any(crop):
        x = b.strided_slice(x, begin=[0, 0], end=[x.shape[1] - crop[0], x.shape[2] - crop[1]],
                            axes=[1, 2])
    return x, padding


@shaped_rule
def conv2d(b, call):
    x, w, bias = call.inputs
    a, win = call.attrs, call_window(call)
    if a["groups"] != 1 or _level_problem(win):
        return None  # no TOSA CONV2D (groups, level 8K): the generic decomposition
    nchw = a["data_layout"] == "NCHW"
    x = permute(b, x, NCHW_TO_NHWC if nchw else None)
    w = permute(b, w, TO_OHWI[a["kernel_layout"]])
    x, padding = _fit_windows(b, x, win)
    y = b.call("nn.conv2d", x, w, bias, strides=list(win.strides), padding=padding,
               dilation=list(win.dilation), groups=1, data_layout="NHWC", kernel_layout="OHWI")
    return permute(b, y, NHWC_TO_NCHW if nchw else None)


@shaped_rule
def pool2d(b, call):
    return pool2d_of(b, call, call.inputs[0])


def pool2d_of(b, call, x):
    """The pool `call` of `x` (its input, or that input in another dtype) as a TOSA pool:
    NHWC, windows fitted; None where TOSA has no form of it."""
    a, win = dict(call.attrs), call_window(call)
    if any(win.overhang) or win.dilation != (1, 1) or \
            (a.get("count_include_pad") and any(win.padding)) or \
            _pad_problem(win) or _level_problem(win):
        return None  # no TOSA form: the generic decomposition handles it
    nchw = a["data_layout"] == "NCHW"
    x = permute(b, x, NCHW_TO_NHWC if nchw else None)
    x, padding = _fit_windows(b, x, win)
    # ceil mode without an overhanging window is floor mode (a kernel larger than the
    # input is cut to it by the window's geometry: one TOSA pool over the whole map)
    a.update(padding=padding, data_layout="NHWC", strides=list(win.strides),
             pool_size=list(win.kernel), ceil_mode=False)
    if "count_include_pad" in a:
        a["count_include_pad"] = False  # no padding left to count
    y = b.call(call.op, x, **a)
    return permute(b, y, NHWC_TO_NCHW if nchw else None)
