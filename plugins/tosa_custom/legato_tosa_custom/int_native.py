"""Integer forms profile pro_int computes exactly where pro_fp goes through float32 copies
(integers.py, exact only up to 2**24): clip, argmax, divide, fmod and take of int32
(int64 is int32 here, narrowing.py).

- clip: MAXIMUM / MINIMUM of int32 (pro_int has CLAMP for int8/int16 only, and clip's
  float bounds truncate: for integers `trunc(min(max(x, lo), hi)) == min(max(x,
  trunc(lo)), trunc(hi))`, trunc being monotone); int8/int16 through int32 CASTs.
- argmax: pro_int's ARGMAX takes int8/int16 only; int32 is the first (or last) index
  where the value equals the axis' REDUCE_MAX, found by SELECT and REDUCE_MIN/MAX.
- max_pool2d: pro_int's MAX_POOL2D takes int8; uint8 (a QDQ model's pooled activations)
  goes through int8 as `x - 128`, which keeps the order, and back (RESCALEs).
- divide, fmod: INTDIV truncates toward zero as legato does; a zero divisor, which INTDIV
  may not see, becomes 1 and its quotient 0 (legato's integer x / 0 and fmod(x, 0)).
"""
from __future__ import annotations

import math

import numpy as np
from legato.plugin_api import Const, norm_axis

from . import rules
from .integers import INT_DTYPES, integer_fmod
from .limits import shaped_rule
from .quantized import rescale, to_int8

I32 = np.iinfo(np.int32)
NATIVE_GATHER = ("int8", "uint8", "int16", "int32", "int64")  # uint8: its i8 bits move


def _bound(value, default: int) -> int:
    if value is None:
        return default
    return int(min(max(math.trunc(value), I32.min), I32.max))


@shaped_rule
def clip(b, call):
    """clip of integers by int32 MAXIMUM and MINIMUM; floats as pro_fp's row has them."""
    x = call.inputs[0]
    if x.dtype not in INT_DTYPES:
        return None
    low, high = _bound(call.attrs["min"], I32.min), _bound(call.attrs["max"], I32.max)
    wide = x if x.dtype in ("int32", "int64") else b.cast(x, dtype="int32")
    y = b.minimum(b.maximum(wide, rules.splat(b, wide, low, np.int32)),
                  rules.splat(b, wide, high, np.int32))
    return y if y.dtype == x.dtype else b.cast(y, dtype=x.dtype)


@shaped_rule
def argmax(b, call):
    """argmax of int32/int64 from REDUCE_MAX, EQUAL, SELECT of the indices, REDUCE_MIN (the
    first) or REDUCE_MAX (select_last_index); other dtypes as pro_fp's rule."""
    x, attrs = call.inputs[0], call.attrs
    if x.dtype not in ("int32", "int64") or x.rank == 0:
        return rules.argmax(b, call)
    axis = norm_axis(attrs["axis"], x.rank)
    shape = [1] * x.rank
    shape[axis] = x.shape[axis]
    index = np.arange(x.shape[axis], dtype=np.int32).reshape(shape)
    top = b.max(x, axes=[axis], keepdims=True)
    last = attrs["select_last_index"]
    missing = b.const(np.full(1, -1 if last else x.shape[axis], np.int32))
    hits = b.where(b.equal(x, top), b.const(np.broadcast_to(index, x.shape).copy()), missing)
    found = (b.max if last else b.min)(hits, axes=[axis], keepdims=attrs["keepdims"])
    return b.cast(found, dtype=call.outputs[0].dtype)


def _quotient(b, x, y):
    """(INTDIV of x by y with zero divisors made 1, where y is zero) in int32."""
    zero = b.equal(y, rules.splat(b, y, 0))
    safe = b.where(zero, rules.splat(b, y, 1), y)
    return b.call("tosa.intdiv", x, safe), zero


@shaped_rule
def divide(b, call):
    """Integer divide by INTDIV (toward zero; x / 0 is 0); floats as pro_fp's rule."""
    x, y = call.inputs
    if x.dtype not in INT_DTYPES or x.dtype != y.dtype or x.dtype not in ("int32", "int64"):
        return rules.divide(b, call)
    q, zero = _quotient(b, x, y)
    return b.where(zero, rules.splat(b, x, 0), q)


@shaped_rule
def fmod(b, call):
    """Integer fmod as `x - INTDIV(x, y) * y` (the sign of x; fmod(x, 0) is 0)."""
    x, y = call.inputs
    if x.dtype not in ("int32", "int64") or x.dtype != y.dtype:
        return integer_fmod(b, call)
    q, zero = _quotient(b, x, y)
    rest = b.subtract(x, b.multiply(q, y))
    return b.where(zero, rules.splat(b, x, 0), rest)


@shaped_rule
def take(b, call):
    """take of int8/uint8/int16/int32 data with integer indices: GATHER of the integers, the
    negative indices wrapped in int32 (pro_fp's rule does both on float32 copies)."""
    data, idx = call.inputs
    if data.dtype not in NATIVE_GATHER or not (isinstance(idx, Const) or
                                                idx.dtype in INT_DTYPES):
        return rules.take(b, call)
    size = data.shape[norm_axis(call.attrs["axis"], data.rank)]
    if isinstance(idx, Const):
        return rules.gather_along(b, call, rules.const_indices(b, idx, size))
    wide = idx if idx.dtype in ("int32", "int64") else b.cast(idx, dtype="int32")
    zero, count = (rules.splat(b, wide, v) for v in (0, size))
    return rules.gather_along(b, call, b.where(b.less(wide, zero), b.add(wide, count), wide))


@shaped_rule
def max_pool2d(b, call):
    """max_pool2d of uint8 as int8 (`x - 128` keeps the order; padded taps are never the
    maximum in either); other dtypes as pro_fp's rule (NHWC, windows fitted)."""
    x = call.inputs[0]
    if x.dtype != "uint8":
        return rules.pool2d(b, call)
    y = rules.pool2d_of(b, call, to_int8(b, x, 0)[0])
    return None if y is None else rescale(b, y, 1.0, -128, 0, "uint8")


RULES = {"take": take, "nn.max_pool2d": max_pool2d, "clip": clip, "argmax": argmax, "divide": divide, "fmod": fmod}
