"""topk (and so sorts) on TOSA 1.0, which has no sort: every element's rank is counted from
a pairwise comparison along the axis (the elements that come before it: larger, or equal
at a lower index; NaN counts as the largest), and output position r takes the element of
rank r. Exact, and total for NaN and infinities; the comparison holds axis x axis values
per row, so axes whose pairs would exceed MAX_PAIRS elements are declined.
"""
from __future__ import annotations

import numpy as np
from legato.plugin_api import is_float, norm_axis

from .integers import INT_DTYPES, via_float_call
from .limits import shaped_rule
from .rules import permute, reshape

MAX_PAIRS = 1 << 22  # elements of the pairwise comparison of one topk


def _isnan(b, v):
    return b.logical_not(b.equal(v, v))


def _comes_first(b, other, this, largest: bool):
    """other[i] is ordered strictly before this[j]: larger (smaller), NaN largest."""
    if largest:
        beyond = b.logical_and(_isnan(b, other), b.logical_not(_isnan(b, this)))
        return b.logical_or(b.greater(other, this), beyond)
    beyond = b.logical_and(_isnan(b, this), b.logical_not(_isnan(b, other)))
    return b.logical_or(b.less(other, this), beyond)


@shaped_rule
def topk(b, call):
    x = call.inputs[0]
    if x.dtype in INT_DTYPES:
        return via_float_call(b, call, [0], topk)
    if not is_float(x.dtype) or x.rank == 0:
        return None
    k, largest = call.attrs["k"], call.attrs["largest"]
    axis = norm_axis(call.attrs["axis"], x.rank)
    n = x.shape[axis]
    if x.type.size * n > MAX_PAIRS:
        return None
    order = [a for a in range(x.rank) if a != axis] + [axis]
    xt = permute(b, x, order)  # [..., n]
    this = reshape(b, xt, xt.shape + (1,))  # [..., n (j), 1]
    other = reshape(b, xt, xt.shape[:-1] + (1, n))  # [..., 1, n (i)]
    same = b.logical_or(b.equal(other, this),
                        b.logical_and(_isnan(b, other), _isnan(b, this)))
    lower = b.const(np.arange(n)[None, :] < np.arange(n)[:, None])  # [j, i]: i < j
    before = b.logical_or(_comes_first(b, other, this, largest), b.logical_and(same, lower))
    one, zero = b.scalar(1.0, "float32"), b.scalar(0.0, "float32")
    rank = b.sum(b.where(before, one, zero), axes=[-1], keepdims=True)  # [..., n, 1]
    hit = b.equal(rank, b.const(np.arange(k, dtype=np.float32)))  # [..., n (j), k]
    values = b.max(b.where(hit, this, b.scalar(-np.inf, x.dtype)), axes=[-2], keepdims=False)
    where = b.const(np.arange(n, dtype=np.float32).reshape(n, 1))
    index = b.max(b.where(hit, where, b.scalar(-1.0, "float32")), axes=[-2], keepdims=False)
    back = [int(a) for a in np.argsort(order)]
    return (permute(b, values, back),
            permute(b, b.call("tosa.cast", index, dtype=call.outputs[1].dtype), back))
