"""Converters for what transformers' default mixture-of-experts path computes:
`aten.histc` (tokens per expert: a histogram of the sorted expert ids) and grouped matrix
products over rows sorted by expert (`transformers::grouped_mm_fallback`, the custom op it
exports on CPU, and `aten._grouped_mm`), each row times the weight of its expert's group.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from .ops import aten
from .registry import register


@aten("aten.histc.default")
def histc(b, x, bins=100, min=0, max=0):  # noqa: A002 - torch's argument names
    """`bins` equal bins over [min, max]; values outside the range and NaN are not counted.
    torch puts x in bin floor((x - min) * bins / (max - min)) (the last bin closed), each
    step rounded to x's dtype; that is monotonic in x, so a bin's count is the number of
    values at or above its least value less those at or above the next bin's: only
    comparisons, and exact integer counts, on every backend."""
    if not x.dtype.startswith(("float", "bfloat")):
        raise LegatoError(f"histc of {x.dtype}: torch's histc takes floating-point input")
    if min == max:
        raise LegatoError(f"histc with min == max ({min}) takes its range from the data; "
                          "legato needs a static range: pass min < max")
    if not (math.isfinite(min) and math.isfinite(max) and min < max):
        raise LegatoError(f"histc range [{min}, {max}]: torch needs finite min < max")
    cmp = "float64" if x.dtype == "float64" else "float32"  # holds x's values exactly
    starts, high = (np.asarray(v, cmp) for v in _bin_starts(x.dtype, min, max, bins))
    flat = b.reshape(x if x.dtype == cmp else b.cast(x, dtype=cmp), shape=[-1, 1])
    above = b.logical_and(b.greater_equal(flat, Const.of(starts)),
                          b.less_equal(flat, Const.of(high)))
    at_least = b.sum(b.cast(above, dtype="int64"), axes=[0])  # values in bin k or above
    following = b.concat(b.strided_slice(at_least, begin=[1], end=[bins], strides=[1],
                                         axes=[0]), Const.of(np.zeros(1, np.int64)), axis=0)
    return b.cast(b.subtract(at_least, following), dtype=x.dtype)


def _bin_starts(dtype: str, low, high, bins: int):
    """(the least value of `dtype` in each bin, the range's top) as torch bins them: a
    binary search per bin over the values of `dtype`, in order, between low and high."""
    if dtype == "bfloat16":
        import ml_dtypes  # noqa: F401  (numpy learns the dtype's name)
    kind, size = np.dtype(dtype).type, np.dtype(dtype).itemsize
    low, high = kind(low), kind(high)
    width, count = high - low, kind(bins)
    bits = np.dtype(f"uint{8 * size}").type
    sign = bits(1) << bits(8 * size - 1)

    def key(v):  # floats to unsigned integers in the same order
        u = np.asarray(v, dtype).view(bits)
        return np.where(u & sign, ~u, u | sign).astype(bits)

    def value(k):
        return np.where(k & sign, k ^ sign, ~k).astype(bits).view(dtype)

    wanted = np.arange(bins)
    lo, hi = np.full(bins, key(low)), np.full(bins, key(high) + bits(1))
    while (lo < hi).any():
        mid = lo + (hi - lo) // bits(2)
        ok = np.floor((value(mid) - low) * count / width) >= wanted
        lo, hi = np.where((lo < hi) & ~ok, mid + bits(1), lo), np.where(ok, mid, hi)
    return value(lo), high


def grouped_mm(b, x, weight, offs):
    """x [rows, k] sorted by group, weight [groups, k, n], offs [groups] the cumulative row
    ends: row r belongs to the first group ending after it; rows past the last end are 0
    (transformers' fallback leaves them so)."""
    if (x.rank, weight.rank, offs.rank) != (2, 3, 1):
        raise LegatoError(f"grouped matmul of {x.type} by {weight.type} with offsets "
                          f"{offs.type}: legato imports [rows, k] by [groups, k, n] only")
    rows, groups = x.shape[0], weight.shape[0]
    row = Const.of(np.arange(rows, dtype=offs.dtype).reshape(rows, 1))
    ended = b.less_equal(b.reshape(offs, shape=[1, groups]), row)  # groups ended by row r
    group = b.sum(b.cast(ended, dtype="int64"), axes=[1])
    chosen = b.take(weight, b.minimum(group, groups - 1), axis=0)  # [rows, k, n]
    out = b.reshape(b.matmul(b.expand_dims(x, axes=[1]), chosen), shape=[rows, -1])
    return b.where(b.expand_dims(b.less(group, groups), axes=[1]), out, 0.0)


register("transformers::grouped_mm_fallback", grouped_mm)


@aten("aten._grouped_mm.default")
def grouped_mm_aten(b, x, weight, offs=None, bias=None, out_dtype=None):
    if offs is None or bias is not None or out_dtype not in (None, x.dtype):
        raise LegatoError("legato imports _grouped_mm with offsets, no bias and the input's "
                          "dtype only")
    return grouped_mm(b, x, weight, offs)
