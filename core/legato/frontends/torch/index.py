"""ATen's advanced indexing: index (x[indices]) and index_put (x[indices] = values, or +=),
index tensors on any dims with None (a whole dim) before, between and after them, or (for
index_put) one boolean mask. They register in ops.ATEN."""
from __future__ import annotations

import math

from ...ir.errors import LegatoError
from ...ir.shapes import broadcast_shapes
from ..common.indexing import flat_index, scatter_rows
from .ops import aten


@aten("aten.index.Tensor")
def index(b, x, indices):
    """x[..., i0, i1, ...]: torch's rule puts the index tensors' broadcast dims in place of
    a run of adjacent indexed dims, and first when a whole dim separates indexed dims (so
    those are moved to the front of x). One take along the run's flattened dims."""
    indices = [*indices, *[None] * (x.rank - len(indices))]
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims:
        return x
    if any(indices[d].dtype == "bool" for d in dims):
        raise LegatoError("boolean masks select a data-dependent number of elements")
    if dims != list(range(dims[0], dims[-1] + 1)):
        x = b.permute_dims(x, axes=[*dims, *(d for d in range(x.rank) if d not in dims)])
        indices, dims = [indices[d] for d in dims], list(range(len(dims)))
    first, last = dims[0], dims[-1]
    if first == last:
        return b.take(x, indices[first], axis=first)
    run = x.shape[first:last + 1]
    strides = [math.prod(run[k + 1:]) for k in range(len(run))]
    flat = None
    for k, d in enumerate(dims):
        i = indices[d] if indices[d].dtype == "int64" else b.cast(indices[d], dtype="int64")
        i = b.where(b.less(i, 0), b.add(i, run[k]), i)
        term = i if strides[k] == 1 else b.multiply(i, strides[k])
        flat = term if flat is None else b.add(flat, term)
    shape = broadcast_shapes(*(indices[d].shape for d in dims))
    if flat.shape != shape:
        flat = b.broadcast_to(flat, shape=list(shape))
    merged = b.reshape(x, shape=list(x.shape[:first]) + [math.prod(run)] +
                       list(x.shape[last + 1:]))
    return b.take(merged, flat, axis=first)


@aten("aten._index_put_impl.default")
def index_put_impl(b, x, indices, values, accumulate=False, unsafe=False):
    """index_put; `unsafe` only skips eager's bounds checks."""
    return index_put(b, x, indices, values, accumulate)


@aten("aten.index_put.default")
def index_put(b, x, indices, values, accumulate=False):
    """x[i0, i1, ...] = values (or +=): torch's advanced indexing, None for a whole dim;
    bools accumulate by logical or."""
    indices = list(indices)
    if values.dtype != x.dtype:
        values = b.cast(values, dtype=x.dtype)
    given = [i for i in indices if i is not None]
    if any(i.dtype == "bool" for i in given):
        if len(given) > 1:
            raise LegatoError("index_put with a boolean mask among other index tensors is "
                              "not supported (one mask, or integer index tensors)")
        return _masked_put(b, x, indices.index(given[0]), given[0], values, accumulate)
    if not given:  # x[:, :] = values
        values = b.broadcast_to(values, shape=list(x.shape))
        return _accumulated(b, x, values) if accumulate else values
    return _scattered(b, x, indices, values, accumulate)


def _accumulated(b, x, values):
    return b.logical_or(x, values) if x.dtype == "bool" else b.add(x, values)


def _scattered(b, x, indices, values, accumulate):
    """Integer index tensors: the indexed dims moved first, their rows scattered, the dims
    moved back."""
    dims = [d for d, i in enumerate(indices) if i is not None]
    others = [d for d in range(x.rank) if d not in dims]
    shape = list(broadcast_shapes(*(indices[d].shape for d in dims)))
    first, k = dims[0], len(shape)
    adjacent = dims == list(range(first, dims[-1] + 1))
    # the shape of x[indices]: the index dims replace a run of adjacent indexed dims in
    # place, and come first when None separates the indexed dims
    if adjacent:
        selected = [*x.shape[:first], *shape, *x.shape[dims[-1] + 1:]]
    else:
        selected = [*shape, *(x.shape[d] for d in others)]
    values = b.broadcast_to(values, shape=selected)
    if adjacent and first:
        values = b.permute_dims(values, axes=[*range(first, first + k), *range(first),
                                              *range(first + k, len(selected))])
    order = [*dims, *others]
    moved = x if order == sorted(order) else b.permute_dims(x, axes=order)
    stacked = b.concat(*(b.reshape(b.broadcast_to(indices[d], shape=shape), shape=shape + [1])
                         for d in dims), axis=-1)
    rows = flat_index(b, stacked, [x.shape[d] for d in dims])
    reduction = ("max" if x.dtype == "bool" else "add") if accumulate else "none"
    out = scatter_rows(b, moved, rows, values, len(dims), reduction)
    if moved is x:
        return out
    return b.permute_dims(out, axes=[order.index(d) for d in range(x.rank)])


def _masked_put(b, x, at: int, mask, values, accumulate):
    """x[..., mask, ...] = values with the mask over dims at, at+1, ...: the selected
    elements in order are the mask's true positions, so where values has one row per
    selected element the k-th true position takes row k (a running count of the mask)."""
    span = mask.rank
    lead, tail = list(x.shape[:at]), list(x.shape[at + span:])
    selected_rank = len(lead) + 1 + len(tail)
    if values.rank > selected_rank:
        raise LegatoError(f"index_put values {values.type} have more dims than "
                          f"x[mask] ({selected_rank})")
    padded = [1] * (selected_rank - values.rank) + list(values.shape)
    count = padded[len(lead)]  # values' extent along the selected elements
    rows = b.broadcast_to(b.reshape(values, shape=padded), shape=[*lead, count, *tail])
    if count == 1:
        spread = b.reshape(rows, shape=[*lead, *[1] * span, *tail])
    else:  # the k-th true position (flat order) takes row k
        flat = b.cast(b.reshape(mask, shape=[-1]), dtype="int64")
        position = b.clip(b.subtract(b.cumsum(flat, axis=0), 1), min=0, max=count - 1)
        spread = b.reshape(b.take(rows, position, axis=len(lead)),
                           shape=[*lead, *mask.shape, *tail])
    spread = b.broadcast_to(spread, shape=list(x.shape))
    where = b.reshape(mask, shape=[*[1] * len(lead), *mask.shape, *[1] * len(tail)])
    if accumulate:
        spread = b.logical_and(where, spread) if x.dtype == "bool" else \
            b.where(where, spread, b.scalar(0, x.dtype))
        return _accumulated(b, x, spread)
    return b.where(where, spread, x)
