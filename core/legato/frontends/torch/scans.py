"""ATen's running maxima, minima and log-sum-exps (cummax, cummin, logcumsumexp) over a
static axis of n elements, as reductions over the pairs (i, j <= i): n * n work, exact, and
free of the underflow a single shift by the overall maximum would have. They register in
ops.ATEN."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from ...ir.shapes import norm_axis
from .ops import aten


def _pairs(b, x, axis: int):
    """x[j] for every (i, j) (a new axis i of size 1 before `axis`, now j's), and where
    j <= i, shaped to broadcast against it."""
    n = x.shape[axis]
    lower = np.tri(n, dtype=bool).reshape([n, n] + [1] * (x.rank - axis - 1))
    return b.expand_dims(x, axes=[axis]), Const.of(lower)


def _positions(x, axis: int) -> Const:
    """j along the pairs' axis j."""
    n = x.shape[axis]
    return Const.of(np.arange(n, dtype=np.int64).reshape([n] + [1] * (x.rank - axis - 1)))


def _floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _running_extreme(largest: bool):
    """(values, indices) as torch's scan keeps them: a later equal value takes over the
    index, and a NaN, once seen, stays (at the last NaN's index)."""
    def convert(b, x, dim):
        if x.rank == 0:
            norm_axis(dim, 1, "dim")
            return x, Const.of(np.int64(0))
        axis = norm_axis(dim, x.rank, "dim")
        if x.shape[axis] == 0:
            return x, Const.of(np.zeros(x.shape, np.int64))
        data = b.cast(x, dtype="uint8") if x.dtype == "bool" else x
        floating = _floating(data.dtype)
        worst = (-np.inf if largest else np.inf) if floating else \
            int(np.iinfo(data.dtype).min if largest else np.iinfo(data.dtype).max)
        pairs, lower = _pairs(b, data, axis)
        clean = b.where(b.isnan(pairs), b.scalar(worst, data.dtype), pairs) if floating \
            else pairs
        best = b.call("max" if largest else "min", b.where(lower, clean, b.scalar(
            worst, data.dtype)), axes=[axis + 1], keepdims=True)
        j, none = _positions(x, axis), b.scalar(-1, "int64")
        hits = b.logical_and(lower, b.equal(clean, best))
        index = b.max(b.where(hits, j, none), axes=[axis + 1])
        if floating:
            nans = b.max(b.where(b.logical_and(lower, b.isnan(pairs)), j, none),
                         axes=[axis + 1])
            index = b.where(b.greater_equal(nans, 0), nans, index)
        return b.gather_elements(x, index, axis=axis), index
    return convert


aten("aten.cummax.default")(_running_extreme(True))
aten("aten.cummin.default")(_running_extreme(False))


@aten("aten.logcumsumexp.default")
def logcumsumexp(b, x, dim):
    """log(sum over j <= i of exp(x[j])), each i shifted by its own running maximum (an
    infinite maximum by 0, so -inf and inf come out as themselves)."""
    if x.rank == 0:
        norm_axis(dim, 1, "dim")
        return x
    axis = norm_axis(dim, x.rank, "dim")
    if x.shape[axis] == 0:
        return x
    pairs, lower = _pairs(b, x, axis)
    masked = b.where(lower, pairs, b.scalar(-np.inf, x.dtype))
    top = b.max(masked, axes=[axis + 1], keepdims=True)
    shift = b.where(b.logical_or(b.isinf(top), b.isnan(top)), b.scalar(0.0, x.dtype), top)
    total = b.sum(b.exp(b.subtract(masked, shift)), axes=[axis + 1])
    return b.add(b.log(total), b.squeeze(shift, axes=[axis + 1]))
