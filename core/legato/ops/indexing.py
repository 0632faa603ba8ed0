"""Indexing, scans and selection: gather_elements, cumsum/cumprod, trilu, tile, argmin,
topk, scatter_elements.

The composites here decompose into data movement a backend surely has (take on the
flattened data, pad and slice, broadcast and reshape); topk is a primitive.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import TensorType
from .base import T, composite, f32, fail, is_float, norm_axis, primitive
from .primitives import INT_DTYPES, _argmax

X23 = f32(2, 3)


def _strides(shape) -> list[int]:
    """Element strides of a C-contiguous array of `shape`."""
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def _require_indices(t: TensorType, what: str = "indices"):
    if t.dtype not in INT_DTYPES:
        fail(f"{what} must be integers, got {t.dtype}")


# --- gather_elements --------------------------------------------------------------------

def _gather_elements(types, attrs):
    data, indices = types
    _require_indices(indices)
    axis = norm_axis(attrs["axis"], data.rank)
    if indices.rank != data.rank or any(
            i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        fail(f"indices {list(indices.shape)} must have the rank of data {list(data.shape)} "
             f"and no larger dims except on axis {axis}")
    if data.shape[axis] == 0 and indices.size:
        fail(f"cannot gather from empty axis {axis} of {list(data.shape)}")
    return TensorType(indices.shape, data.dtype)


@composite("gather_elements", "data, indices", _gather_elements, "injective", 1,
           [((X23, T("int64", 2, 2)), {"axis": 1}), ((X23, T("int32", 1, 3)), {})],
           {"axis": ("int", 0)}, tolerance=0.0)
def gather_elements(b, x, indices, axis):
    """ONNX GatherElements / `torch.gather`: `out[i][j] = data[indices[i][j]][j]` for axis
    0 (and so on); negative indices count from the end; indices may be smaller than data
    off the axis"""
    axis = norm_axis(axis, x.rank)
    dim, strides = x.shape[axis], _strides(x.shape)
    index = indices if indices.dtype == "int64" else b.cast(indices, dtype="int64")
    index = b.where(b.less(index, 0), b.add(index, dim), index)
    # the flat position of every element but for the gathered axis: a constant
    grid = np.indices(indices.shape, dtype=np.int64)
    base = sum((grid[a] * strides[a] for a in range(x.rank) if a != axis),
               np.zeros(indices.shape, np.int64))
    flat = b.add(b.multiply(index, strides[axis]), b.const(np.asarray(base, np.int64)))
    return b.take(b.reshape(x, shape=[-1]), flat, axis=0)


# --- cumsum -------------------------------------------------------------------------------

def _cumsum(types, attrs):
    (t,) = types
    if t.dtype == "bool":
        fail("cumsum needs a numeric tensor, got bool (cast it first)")
    if t.rank == 0:
        fail("cumsum needs a tensor of rank >= 1")
    norm_axis(attrs["axis"], t.rank)
    return t


SCAN_EXAMPLES = [((X23,), {"axis": 1}), ((T("int64", 2, 5),), {"axis": -1, "exclusive": True}),
                 ((f32(4, 2),), {"reverse": True, "exclusive": True})]
SCAN_ATTRS = {"axis": ("int", 0), "exclusive": ("bool", False), "reverse": ("bool", False)}


def scan(b, x, axis, exclusive, reverse, combine, identity):
    """Hillis-Steele: log2(n) combines of x with itself shifted along `axis`, `identity`
    coming in (the shifted copy is a slice padded at the start, or at the end if
    `reverse`); `exclusive` shifts the result once more."""
    axis = norm_axis(axis, x.rank)
    n = x.shape[axis]

    def shifted(v, k):
        part = b.strided_slice(v, begin=[k if reverse else 0], end=[n if reverse else n - k],
                               axes=[axis])
        pads = [0] * (2 * x.rank)
        pads[axis + x.rank if reverse else axis] = min(k, n)
        return b.pad(part, pads=pads, value=identity)

    step = 1
    while step < n:
        x = combine(x, shifted(x, step))
        step *= 2
    return shifted(x, 1) if exclusive else x


@composite("cumsum", "data", _cumsum, "opaque", 1, SCAN_EXAMPLES, SCAN_ATTRS)
def cumsum(b, x, axis, exclusive, reverse):
    """running sum along `axis` (ONNX CumSum): `exclusive` leaves the current element
    out, `reverse` sums from the end"""
    return scan(b, x, axis, exclusive, reverse, b.add, 0.0)


@composite("cumprod", "data", _cumsum, "opaque", 1, SCAN_EXAMPLES, SCAN_ATTRS)
def cumprod(b, x, axis, exclusive, reverse):
    """running product along `axis` (ONNX CumProd): `exclusive` leaves the current
    element out, `reverse` multiplies from the end"""
    return scan(b, x, axis, exclusive, reverse, b.multiply, 1.0)


# --- triangles and tiles ------------------------------------------------------------------

def _trilu(types, attrs):
    if types[0].rank < 2:
        fail(f"trilu needs a tensor of rank >= 2, got {types[0]}")
    return types[0]


@composite("trilu", "data", _trilu, "injective", 1,
           [((f32(3, 4),), {}), ((T("int64", 2, 3, 3),), {"k": -1, "upper": False})],
           {"k": ("int", 0), "upper": ("bool", True)}, tolerance=0.0)
def trilu(b, x, k, upper):
    """ONNX Trilu: keep the upper (`numpy.triu`) or lower (`numpy.tril`) triangle of the
    last two dims from diagonal `k`, zeros elsewhere"""
    rows, cols = x.shape[-2:]
    keep = np.triu(np.ones((rows, cols), bool), k) if upper else \
        np.tril(np.ones((rows, cols), bool), k)
    return b.where(b.const(keep), x, False if x.dtype == "bool" else 0)


def _tile(types, attrs):
    (t,) = types
    repeats = attrs["repeats"]
    if len(repeats) != t.rank or any(r < 0 for r in repeats):
        fail(f"repeats {list(repeats)} must be {t.rank} non-negative ints")
    return TensorType(tuple(d * r for d, r in zip(t.shape, repeats)), t.dtype)


@composite("tile", "data", _tile, "injective", 1,
           [((X23,), {"repeats": [2, 1]}), ((T("bool", 3),), {"repeats": [4]})],
           {"repeats": ("ints",)}, tolerance=0.0)
def tile(b, x, repeats):
    """`numpy.tile` with one repeat count per dim (ONNX Tile)"""
    # a new axis of `r` copies only before the dims that are repeated and longer than 1
    # (the others broadcast in place), so the rank grows no more than it must
    spread, target = [], []
    for d, r in zip(x.shape, repeats):
        whole = r != 1 and d != 1
        spread += [1, d] if whole else [d]
        target += [r, d] if whole else [d * r]
    y = x if spread == list(x.shape) else b.reshape(x, shape=spread)
    y = b.broadcast_to(y, shape=target)
    return b.reshape(y, shape=[d * r for d, r in zip(x.shape, repeats)])


# --- argmin and topk ----------------------------------------------------------------------

ARG_ATTRS = {"axis": ("int", 0), "keepdims": ("bool", True), "select_last_index": ("bool", False)}


@composite("argmin", "data", _argmax, "reduce", 1,
           [((X23,), {"axis": 1}), ((T("int8", 2, 3),), {}), ((T("uint8", 4),), {}),
            ((T("bool", 3),), {"keepdims": False})], ARG_ATTRS, tolerance=0.0)
def argmin(b, x, axis, keepdims, select_last_index):
    """index of the minimum along `axis`, as int64 (ONNX ArgMin); the axis may not be
    empty"""
    # argmax of an order-reversing map: -x, ~x = -1 - x (no overflow), 255 - x, not x
    if is_float(x.dtype):
        flipped = b.negative(x)
    elif x.dtype == "bool":
        flipped = b.logical_not(x)
    else:
        flipped = b.subtract(np.iinfo(x.dtype).max if x.dtype == "uint8" else -1, x)
    return b.argmax(flipped, axis=axis, keepdims=keepdims,
                    select_last_index=select_last_index)


def _topk(types, attrs):
    (t,) = types
    if t.rank == 0:
        fail("topk needs a tensor of rank >= 1")
    axis = norm_axis(attrs["axis"], t.rank)
    if not 0 <= attrs["k"] <= t.shape[axis]:
        fail(f"k={attrs['k']} is not in [0, {t.shape[axis]}] (the dim of axis {axis})")
    shape = t.shape[:axis] + (attrs["k"],) + t.shape[axis + 1:]
    return TensorType(shape, t.dtype), TensorType(shape, "int64")


primitive("topk", "data", _topk, "opaque",
          {"k": ("int",), "axis": ("int", -1), "largest": ("bool", True)}, tolerance=0.0,
          doc="the `k` largest (or smallest) elements along `axis`, sorted, and their "
              "int64 indices (two results); equal values in index order, NaN largest "
              "(ONNX TopK; a sort is topk with k the whole axis)")



# --- scatter ------------------------------------------------------------------------------

def _scatter_elements(types, attrs):
    data, indices, updates = types
    _require_indices(indices)
    axis = norm_axis(attrs["axis"], data.rank)
    if updates.dtype != data.dtype:
        fail(f"updates dtype {updates.dtype} differs from data dtype {data.dtype}")
    if updates.shape != indices.shape:
        fail(f"updates {list(updates.shape)} must have the shape of indices "
             f"{list(indices.shape)}")
    if indices.rank != data.rank or any(
            i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        fail(f"indices {list(indices.shape)} must have the rank of data {list(data.shape)} "
             f"and no larger dims except on axis {axis}")
    if data.dtype == "bool" and attrs["reduction"] in ("add", "mul"):
        fail(f"reduction {attrs['reduction']} needs numeric data, got bool")
    return data


primitive("scatter_elements", "data, indices, updates", _scatter_elements, "opaque",
          {"axis": ("int", 0), "reduction": ("str:none|add|mul|max|min", "none"),
           "include_self": ("bool", True)},
          tolerance=0.0,
          doc="ONNX ScatterElements / `torch.scatter`: a copy of data with `updates` written "
              "(or, by `reduction`, added, multiplied, maxed, mined) at `indices` along "
              "`axis`; with reduction none an index written twice keeps one of its updates; "
              "`include_self` false reduces a position some index hits over its updates "
              "alone, leaving its data out (`torch.scatter_reduce`'s include_self)")
