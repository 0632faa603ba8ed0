"""ATen converters for the native normalizations with their saved statistics, distances,
grid sampling, hypot and copysign, sorted search (searchsorted, bucketize) and order
statistics (kthvalue, median). They register in ops.ATEN."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.shapes import norm_axis
from .ops import aten
from .tensors import zeros


# --- normalizations with their saved statistics -----------------------------------------------

def _statistics(b, x, axes, eps):
    """Mean, biased variance and 1 / sqrt(variance + eps) over `axes`, kept as size-1
    dims."""
    var = b.variance(x, axes=axes, keepdims=True)
    return b.mean(x, axes=axes, keepdims=True), var, b.rsqrt(b.add(var, eps))


@aten("aten.native_layer_norm.default")
def native_layer_norm(b, x, normalized_shape, weight, bias, eps):
    axes = list(range(x.rank - len(normalized_shape), x.rank))
    mean, _, rstd = _statistics(b, x, axes, eps)
    return b.nn_layer_norm(x, weight, bias, axes=axes, epsilon=eps), mean, rstd


@aten("aten.native_group_norm.default")
def native_group_norm(b, x, weight, bias, n, c, hw, group, eps):
    y = b.nn_group_norm(x, weight, bias, num_groups=group, epsilon=eps)
    mean, _, rstd = _statistics(b, b.reshape(x, shape=[n, group, -1]), [2], eps)
    return y, b.reshape(mean, shape=[n, group]), b.reshape(rstd, shape=[n, group])


def _batch_norm(b, x, weight, bias, running_mean, running_var, training, eps):
    """(y, saved mean, saved 1 / std): batch statistics in training mode (the running
    ones are not updated: legato computes inference graphs), the running ones otherwise
    (nothing saved)."""
    c = x.shape[1] if x.rank > 1 else 1
    weight = weight if weight is not None else Const.of(np.ones(c, dtype=x.dtype))
    bias = bias if bias is not None else Const.of(np.zeros(c, dtype=x.dtype))
    if not training:
        empty = Const.of(np.zeros(0, dtype=x.dtype))
        return b.nn_batch_norm(x, weight, bias, running_mean, running_var, epsilon=eps), \
            empty, empty
    axes = [a for a in range(x.rank) if a != 1]
    mean, var, rstd = (b.reshape(v, shape=[c]) for v in _statistics(b, x, axes, eps))
    return b.nn_batch_norm(x, weight, bias, mean, var, epsilon=eps), mean, rstd


@aten("aten._native_batch_norm_legit.default", "aten.native_batch_norm.default")
def native_batch_norm(b, x, weight, bias, running_mean, running_var, training, momentum,
                      eps):
    return _batch_norm(b, x, weight, bias, running_mean, running_var, training, eps)


@aten("aten._native_batch_norm_legit.no_stats")
def native_batch_norm_no_stats(b, x, weight, bias, training, momentum, eps):
    return _batch_norm(b, x, weight, bias, None, None, True, eps)


@aten("aten._native_batch_norm_legit_functional.default")
def native_batch_norm_functional(b, x, weight, bias, running_mean, running_var, training,
                                 momentum, eps):
    """batch_norm with the running statistics' updated values as results too (the importer
    keeps the program's user outputs only, so unread updates are not computed)."""
    y, mean, rstd = _batch_norm(b, x, weight, bias, running_mean, running_var, training, eps)
    if not training:
        return y, mean, rstd, running_mean, running_var
    n = x.type.size // (x.shape[1] if x.rank > 1 else 1)
    var = b.subtract(b.divide(1.0, b.multiply(rstd, rstd)), eps)
    updates = [b.add(b.multiply(old, 1.0 - momentum), b.multiply(new, momentum * scale))
               for old, new, scale in ((running_mean, mean, 1.0),
                                       (running_var, var, n / max(n - 1, 1)))]
    return (y, mean, rstd, *updates)


# --- distances --------------------------------------------------------------------------------

def _p_norm(b, d, p: float, axis: int):
    """The p-norm of d along `axis` (p = 0 counts the non-zeros)."""
    if p == 0:
        return b.sum(b.cast(b.not_equal(d, 0.0), dtype=d.dtype), axes=[axis])
    if p == math.inf:
        return b.max(b.abs(d), axes=[axis])
    if p == 1:
        return b.sum(b.abs(d), axes=[axis])
    if p == 2:
        return b.sqrt(b.sum(b.multiply(d, d), axes=[axis]))
    return b.power(b.sum(b.power(b.abs(d), float(p)), axes=[axis]), 1.0 / p)


@aten("aten._cdist_forward.default")
def cdist(b, x1, x2, p=2.0, compute_mode=None):
    """Distances between the rows of x1 (..., P, M) and of x2 (..., R, M): (..., P, R)."""
    d = b.subtract(b.expand_dims(x1, axes=[x1.rank - 1]), b.expand_dims(x2, axes=[x2.rank - 2]))
    return _p_norm(b, d, p, -1)


@aten("aten._pdist_forward.default")
def pdist(b, x, p=2.0):
    """Distances between the rows i < j of x (N, M), row by row: N (N - 1) / 2 values."""
    n = x.shape[0]
    rows, cols = np.triu_indices(n, k=1)
    if n < 2:
        return Const.of(np.zeros(0, dtype=x.dtype))
    pairs = b.subtract(b.take(x, Const.of(rows.astype(np.int64)), axis=0),
                       b.take(x, Const.of(cols.astype(np.int64)), axis=0))
    return _p_norm(b, pairs, p, -1)


# --- grid sampling ------------------------------------------------------------------------------

GRID_MODES = ("bilinear", "nearest", "bicubic")
GRID_PADDINGS = ("zeros", "border", "reflection")


@aten("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default",
      "aten.grid_sampler.default")
def grid_sampler(b, x, grid, interpolation_mode, padding_mode, align_corners):
    return b.nn_grid_sample(x, grid, mode=GRID_MODES[interpolation_mode],
                            padding_mode=GRID_PADDINGS[padding_mode],
                            align_corners=bool(align_corners))


# --- elementwise odds and ends, sorted search, order statistics --------------------------------

@aten("aten.hypot.default")
def hypot(b, x, y):
    return b.sqrt(b.add(b.multiply(x, x), b.multiply(y, y)))


def _negative_sign(b, v):
    """v's sign bit: below zero, or -0.0 (whose reciprocal is -inf)."""
    return b.logical_or(b.less(v, 0.0), b.less(b.divide(1.0, v), 0.0))


@aten("aten.copysign.Tensor", "aten.copysign.Scalar")
def copysign(b, x, y):
    if not x.dtype.startswith(("float", "bfloat")):  # torch computes integers in float32
        x = b.cast(x, dtype="float32")
    if not hasattr(y, "type"):
        y = Const.of(np.array(y, dtype=x.dtype))
    elif y.dtype != x.dtype:
        y = b.cast(y, dtype=x.dtype)
    size = b.abs(x)
    return b.where(_negative_sign(b, y), b.negative(size), size)


@aten("aten.searchsorted.Tensor", "aten.searchsorted.Scalar")
def searchsorted(b, sequence, values, out_int32=False, right=False, side=None, sorter=None):
    """How many entries of each sorted row lie below each value (right: at or below)."""
    if sorter is not None:
        sequence = b.gather_elements(sequence, sorter, axis=-1)
    if not hasattr(values, "type"):
        values = Const.of(np.array(values, dtype=sequence.dtype))
    elif values.dtype != sequence.dtype:
        common = np.result_type(values.dtype, sequence.dtype).name
        values, sequence = (v if v.dtype == common else b.cast(v, dtype=common)
                            for v in (values, sequence))
    dtype = "int32" if out_int32 else "int64"
    if sequence.shape[-1] == 0:  # nothing lies below
        return Const.of(np.zeros(values.shape, dtype=dtype))
    rows = b.expand_dims(sequence, axes=[sequence.rank - 1]) if sequence.rank > 1 else sequence
    below = (b.less_equal if right or side == "right" else b.less)(
        rows, b.expand_dims(values, axes=[values.rank]))
    return b.sum(b.cast(below, dtype=dtype), axes=[-1])


@aten("aten.bucketize.Tensor", "aten.bucketize.Scalar")
def bucketize(b, x, boundaries, out_int32=False, right=False):
    return searchsorted(b, boundaries, x, out_int32, right)


def _kth_smallest(b, x, k: int, dim: int, keepdim: bool):
    """The k-th smallest value along dim (1-based) and its index."""
    if x.rank == 0:
        return x, Const.of(np.int64(0))
    dim = norm_axis(dim, x.rank, "dim")
    values, indices = b.topk(x, k=k, axis=dim, largest=False)
    picks = [b.strided_slice(v, begin=[k - 1], end=[k], axes=[dim]) for v in (values, indices)]
    return tuple(p if keepdim else b.squeeze(p, axes=[dim]) for p in picks)


@aten("aten.kthvalue.default")
def kthvalue(b, x, k, dim=-1, keepdim=False):
    return _kth_smallest(b, x, k, dim, keepdim)


@aten("aten.median.dim")
def median_dim(b, x, dim, keepdim=False):
    n = x.shape[norm_axis(dim, x.rank, "dim")] if x.rank else 1
    return _kth_smallest(b, x, (n - 1) // 2 + 1, dim, keepdim)


@aten("aten.median.default")
def median(b, x):
    """The lower median of every element."""
    flat = b.reshape(x, shape=[-1])
    return b.reshape(_kth_smallest(b, flat, (flat.shape[0] - 1) // 2 + 1, 0, False)[0],
                     shape=[])
