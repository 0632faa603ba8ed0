"""Index arithmetic both importers write: the flat row of N-d index tuples, writing rows
into a tensor seen as (rows, rest), and one-hot encoding."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.shapes import norm_axis


def flat_index(b, indices, dims):
    """The row of each index tuple (the last axis of `indices`, one entry per dim of
    `dims`) in the data with those dims flattened; negative entries count from the end."""
    k = len(dims)
    index = indices if indices.dtype == "int64" else b.call("cast", indices, dtype="int64")
    index = b.call("where", b.call("less", index, 0),
                   b.call("add", index, Const.of(np.array(dims, np.int64))), index)
    strides = np.array([math.prod(dims[j + 1:]) for j in range(k)], np.int64)
    return b.call("sum", b.call("multiply", index, Const.of(strides)), axes=[-1])


def scatter_rows(b, data, rows, updates, k: int, reduction: str):
    """Write `updates` (rows.shape + data.shape[k:]) into `data` at flat `rows` of its first
    `k` dims, as scatter_elements along axis 0 of the data seen as (rows, rest)."""
    rest = math.prod(data.shape[k:])
    count = rows.type.size
    table = b.call("reshape", data, shape=[math.prod(data.shape[:k]), rest])
    rows = b.call("broadcast_to", b.call("reshape", rows, shape=[count, 1]),
                  shape=[count, rest])
    values = b.call("reshape", updates, shape=[count, rest])
    out = b.call("scatter_elements", table, rows, values, axis=0, reduction=reduction)
    return b.call("reshape", out, shape=list(data.shape))


def one_hot_values(b, indices, depth: int, axis: int, on, off):
    """`on` where the position along the new `axis` equals the index (negative indices
    count from `depth`), else `off`."""
    axis = norm_axis(axis, indices.rank + 1)
    index = b.call("where", b.call("less", indices, 0), b.call("add", indices, depth), indices)
    shape = [1] * (indices.rank + 1)
    shape[axis] = depth
    positions = Const.of(np.arange(depth, dtype=indices.dtype).reshape(shape))
    hit = b.call("equal", b.call("expand_dims", index, axes=[axis]), positions)
    return b.call("where", hit, on, off)
