"""Reference kernels of the indexing, scan and selection ops (gather_elements, cumsum,
trilu, tile, argmin, topk), written directly with numpy, independent of the
decompositions they check."""
from __future__ import annotations

import numpy as np

from legato.plugin_api import LegatoError, norm_axis


def _fresh(x, dtype=None) -> np.ndarray:
    return np.array(x, dtype=dtype, order="C", copy=True)


def _axis(axis, ndim: int) -> int:
    return norm_axis(int(axis), ndim, "axis")


def wrapped_indices(indices, dim: int) -> np.ndarray:
    """Integer indices into a dim of `dim`, negative ones counted from the end, as int64;
    any out of range is an error (indices are data, so this is a run-time check)."""
    if indices.dtype.kind not in "iu":
        raise LegatoError(f"indices must be integers, got {indices.dtype}")
    index = indices.astype(np.int64)
    if np.any((index < -dim) | (index >= dim)):
        raise LegatoError(f"indices out of range [{-dim}, {dim - 1}]")
    return np.where(index < 0, index + dim, index)


def gather_elements(data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    index = wrapped_indices(indices, data.shape[axis])
    # indices may be smaller than data off the axis: gather from the matching corner
    corner = tuple(slice(None) if a == axis else slice(0, n)
                   for a, n in enumerate(indices.shape))
    return _fresh(np.take_along_axis(data[corner], index, axis=axis), data.dtype)


def _scan(fn, unit):
    def kernel(data, *, axis=0, exclusive=False, reverse=False):
        axis = _axis(axis, data.ndim)
        x = np.flip(data, axis) if reverse else data
        acc = x.astype(np.float64) if x.dtype.kind == "f" else x
        if exclusive:  # the identity in front, the last element dropped
            head = np.full_like(np.take(acc, [0], axis=axis), unit) if acc.shape[axis] else \
                np.take(acc, [], axis=axis)
            acc = np.concatenate([head, np.take(acc, np.arange(acc.shape[axis] - 1),
                                                axis=axis)], axis=axis)
        total = fn(acc, axis=axis, dtype=acc.dtype)  # integers wrap in their dtype
        return _fresh(np.flip(total, axis) if reverse else total, data.dtype)
    return kernel


cumsum = _scan(np.cumsum, 0)
cumprod = _scan(np.cumprod, 1)


def trilu(data, *, k=0, upper=True):
    if data.ndim < 2:
        raise LegatoError(f"trilu needs rank >= 2, got shape {list(data.shape)}")
    return _fresh(np.triu(data, int(k)) if upper else np.tril(data, int(k)), data.dtype)


def tile(data, *, repeats):
    if len(repeats) != data.ndim:
        raise LegatoError(f"repeats {list(repeats)} must be {data.ndim} ints")
    return _fresh(np.tile(data, tuple(int(r) for r in repeats)), data.dtype)


def arg_extreme(find, data, axis, keepdims, select_last_index):
    """argmax/argmin (`find` is np.argmax or np.argmin) as ONNX defines them: int64, the
    axis kept or not, the first or the last of equal extremes."""
    axis = _axis(axis, data.ndim)
    if select_last_index:
        # numpy picks the first extreme; on the reversed axis that is the last one
        index = data.shape[axis] - 1 - find(np.flip(data, axis), axis=axis)
    else:
        index = find(data, axis=axis)
    return _fresh(np.expand_dims(index, axis) if keepdims else index, np.int64)


def argmin(data, *, axis=0, keepdims=True, select_last_index=False):
    return arg_extreme(np.argmin, data, axis, keepdims, select_last_index)


def topk(data, *, k, axis=-1, largest=True):
    axis = _axis(axis, data.ndim)
    if not 0 <= k <= data.shape[axis]:
        raise LegatoError(f"k={k} is not in [0, {data.shape[axis]}]")
    # a stable sort keeps equal values in index order; for the largest, sort the
    # reversed axis ascending and reverse back, so ties still come lowest index first
    if largest:
        flipped = np.flip(data, axis)
        order = np.flip(np.argsort(flipped, axis=axis, kind="stable"), axis)
        order = data.shape[axis] - 1 - order
    else:
        order = np.argsort(data, axis=axis, kind="stable")
    order = np.take(order, np.arange(k), axis=axis)
    return (_fresh(np.take_along_axis(data, order, axis=axis), data.dtype),
            _fresh(order, np.int64))


KERNELS = {"gather_elements": gather_elements, "cumsum": cumsum, "cumprod": cumprod,
           "trilu": trilu,
           "tile": tile, "argmin": argmin, "topk": topk}


_SCATTER = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _identity(reduction: str, dtype: np.dtype):
    """The value a reduction starts from, so that reducing it with x gives x."""
    if reduction in ("add", "mul"):
        return np.array(0 if reduction == "add" else 1, dtype)
    if dtype == np.bool_:
        return np.array(reduction == "min")
    lowest, highest = (-np.inf, np.inf) if dtype.kind == "f" else \
        (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return np.array(lowest if reduction == "max" else highest, dtype)


def scatter_elements(data, indices, updates, *, axis=0, reduction="none", include_self=True):
    axis = _axis(axis, data.ndim)
    dim = data.shape[axis]
    index = indices.astype(np.int64)
    if np.any((index < -dim) | (index >= dim)):
        raise LegatoError(f"indices out of range [{-dim}, {dim - 1}]")
    where = list(np.indices(indices.shape, sparse=True)) if indices.ndim else []
    where[axis] = np.where(index < 0, index + dim, index)
    out = _fresh(data)
    if reduction == "none":
        out[tuple(where)] = updates
    else:
        ufunc = _SCATTER.get(reduction)
        if ufunc is None:
            raise LegatoError(f"unknown reduction {reduction!r}")
        if not include_self:  # the positions hit start from the reduction's identity
            out[tuple(where)] = _identity(reduction, out.dtype)
        ufunc.at(out, tuple(where), updates)
    return out


KERNELS["scatter_elements"] = scatter_elements
