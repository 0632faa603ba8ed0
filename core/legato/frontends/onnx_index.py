"""ONNX converters for the N-d gathers and scatters (GatherND, ScatterElements, ScatterND),
written as take and scatter_elements on the data with its indexed dims flattened."""
from __future__ import annotations

import math

import numpy as np

from ..ir import Const
from .onnx_convert import converter

REDUCTIONS = ("none", "add", "mul", "max", "min")


def flat_index(b, indices, dims):
    """The row of each index tuple (the last axis of `indices`, one entry per dim of
    `dims`) in the data with those dims flattened; negative entries count from the end."""
    k = len(dims)
    index = indices if indices.dtype == "int64" else b.call("cast", indices, dtype="int64")
    index = b.call("where", b.call("less", index, 0),
                   b.call("add", index, Const.of(np.array(dims, np.int64))), index)
    strides = np.array([math.prod(dims[j + 1:]) for j in range(k)], np.int64)
    return b.call("sum", b.call("multiply", index, Const.of(strides)), axes=[-1])


@converter("GatherND")
def gather_nd(node):
    data, indices = node.arg(0), node.arg(1)
    batch = node.attr("batch_dims", 0)
    k = indices.shape[-1]
    node.require(0 <= batch < min(data.rank, indices.rank) and batch + k <= data.rank,
                 f"batch_dims {batch} and index depth {k} do not fit data {data.type}")
    b = node.b
    rows = flat_index(b, indices, data.shape[batch:batch + k])
    count = math.prod(data.shape[batch:batch + k])
    if batch:  # each batch element indexes its own block of rows
        batches = math.prod(data.shape[:batch])
        offsets = np.arange(batches, dtype=np.int64).reshape(
            data.shape[:batch] + (1,) * (indices.rank - 1 - batch)) * count
        rows = b.call("add", rows, Const.of(offsets))
    rest = list(data.shape[batch + k:])
    flat = b.call("reshape", data, shape=[-1] + rest) if data.type.size else \
        b.call("reshape", data, shape=[math.prod(data.shape[:batch + k])] + rest)
    return b.call("take", flat, rows, axis=0)


@converter("ScatterElements")
def scatter_elements(node):
    reduction = node.attr("reduction", "none")
    node.require(reduction in REDUCTIONS, f"reduction {reduction!r} is none of {REDUCTIONS}")
    return node.call("scatter_elements", node.arg(0), node.arg(1), node.arg(2),
                     axis=node.attr("axis", 0), reduction=reduction)


@converter("ScatterND")
def scatter_nd(node):
    data, indices, updates = node.arg(0), node.arg(1), node.arg(2)
    reduction = node.attr("reduction", "none")
    node.require(reduction in REDUCTIONS, f"reduction {reduction!r} is none of {REDUCTIONS}")
    k = indices.shape[-1]
    node.require(k <= data.rank, f"index depth {k} exceeds the rank of data {data.type}")
    return scatter_rows(node.b, data, flat_index(node.b, indices, data.shape[:k]), updates,
                        k, reduction)


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
