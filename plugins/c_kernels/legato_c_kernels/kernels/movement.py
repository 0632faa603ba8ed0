"""Data movement and comparisons of any dtype: slices, broadcasts, concat, split, pad,
take (embedding gathers), where, scatter_elements (no reduction), comparisons and
logical ops.

Their results depend on where the data is, not on float arithmetic, so numpy moves
the memory; what makes them fast in a planned executor is `bind`: the view of the
input a result copies (a slice, a broadcast, a split part, the interior of a pad) is
worked out once, on the planned buffer, and each run is one numpy copy or ufunc with
`out=` (no attribute parsing, no temporaries). Semantics follow the reference kernels
(cpu_ref) through the same `legato.ir.shapes` rules.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

import legato
from legato.plugin_api import norm_axis, slice_params, split_sizes

from .common import Array, error


def _result(out: Optional[Array], shape: tuple[int, ...], dtype, op: str = "") -> Array:
    """A fresh result, or the caller's `out` once it is checked to fit."""
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape) or out.dtype != dtype:
        raise error(op, f"out must be a {np.dtype(dtype)} array of shape {tuple(shape)}, got "
                        f"{getattr(out, 'dtype', type(out).__name__)} "
                        f"{getattr(out, 'shape', '')}")
    return out


def _copier(view_of: Callable[..., Array]) -> Callable[..., Array]:
    """A kernel whose result is a copy of a view of its first input (`view_of(data,
    **attrs)`), with `bind` taking the view once."""
    def kernel(data: Array, *, out: Optional[Array] = None, **attrs: Any) -> Array:
        view = view_of(data, **attrs)
        out = _result(out, view.shape, data.dtype, kernel.__name__)
        np.copyto(out, view)
        return out

    def bind(data: Array, *, out: Array, **attrs: Any) -> Callable[[], None]:
        return functools.partial(np.copyto, out, view_of(data, **attrs))
    kernel.bind = bind
    kernel.__name__ = kernel.__qualname__ = view_of.__name__.lstrip("_")
    kernel.__doc__ = view_of.__doc__
    return kernel


def _strided_slice(data: Array, *, begin: Sequence[int], end: Sequence[int],
                   strides: Optional[Sequence[int]] = None,
                   axes: Optional[Sequence[int]] = None) -> Array:
    """strided_slice: a copy of data[begin:end:strides] along `axes`."""
    params = slice_params(data.shape, {"begin": begin, "end": end, "strides": strides,
                                       "axes": axes})
    return data[tuple(p.as_slice() for p in params)]


def _broadcast_to(data: Array, *, shape: Sequence[int]) -> Array:
    """broadcast_to: numpy broadcasting to `shape`."""
    target = tuple(int(d) for d in shape)
    try:
        return np.broadcast_to(data, target)
    except ValueError:
        raise error("broadcast_to", f"cannot broadcast {data.shape} to {target}") from None


strided_slice = _copier(_strided_slice)
broadcast_to = _copier(_broadcast_to)


def concat(*data: Array, axis: int = 0, out: Optional[Array] = None) -> Array:
    """concat: the inputs joined along `axis`."""
    if not data:
        raise error("concat", "needs at least one input")
    axis = norm_axis(int(axis), data[0].ndim, "axis")
    if out is None:
        return np.concatenate(data, axis=axis)
    np.concatenate(data, axis=axis, out=out)
    return out


def _concat_bind(*data: Array, out: Array, axis: int = 0) -> Callable[[], None]:
    if not data:
        raise error("concat", "needs at least one input")
    axis = norm_axis(int(axis), data[0].ndim, "axis")
    return functools.partial(np.concatenate, data, axis=axis, out=out)


concat.bind = _concat_bind


def _split_parts(data: Array, sections: Any, axis: int) -> list[Array]:
    axis = norm_axis(int(axis), data.ndim, "axis")
    bounds = np.cumsum(split_sizes(data.shape[axis], sections))[:-1]
    return np.split(data, bounds, axis=axis)


def split(data: Array, *, sections: Any = 2, axis: int = 0) -> tuple[Array, ...]:
    """split: `sections` equal parts (an int) or parts of the given sizes along `axis`."""
    return tuple(part.copy() for part in _split_parts(data, sections, axis))


def _split_bind_outs(data: Array, *, outs: Sequence[Array], sections: Any = 2,
                     axis: int = 0) -> Callable[[], None]:
    pairs = list(zip(outs, _split_parts(data, sections, axis)))

    def run() -> None:
        for out, part in pairs:
            np.copyto(out, part)
    return run


split.bind_outs = _split_bind_outs
split.bind = lambda data, *, out, **attrs: _split_bind_outs(data, outs=[out], **attrs)


def _pad_interior(data: Array, pads: Sequence[int], value: float, mode: str):
    """(the result's shape, the slices of its interior) of a constant pad."""
    if mode != "constant":
        raise error("pad", f"mode {mode!r} is not supported by c_kernels (only 'constant')")
    rank = data.ndim
    pads = [int(p) for p in pads]
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise error("pad", f"pads must be {2 * rank} non-negative ints, got {pads}")
    shape = tuple(d + lo + hi for d, lo, hi in zip(data.shape, pads[:rank], pads[rank:]))
    return shape, tuple(slice(lo, lo + d) for d, lo in zip(data.shape, pads[:rank]))


def pad(data: Array, *, pads: Sequence[int], value: float = 0.0, mode: str = "constant",
        out: Optional[Array] = None) -> Array:
    """pad (constant mode): `value` around data, pads = all begins then all ends."""
    shape, interior = _pad_interior(data, pads, value, mode)
    out = _result(out, shape, data.dtype, "pad")
    out.fill(value)
    out[interior] = data
    return out


def _pad_bind(data: Array, *, out: Array, pads: Sequence[int], value: float = 0.0,
              mode: str = "constant") -> Callable[[], None]:
    shape, interior = _pad_interior(data, pads, value, mode)
    inner = out[interior + (Ellipsis,)]  # a view even of a 0-d result

    def run() -> None:  # every run: the arena may lend this buffer to other values
        out.fill(value)
        np.copyto(inner, data)
    return run


pad.bind = _pad_bind


def _indices(indices: Array) -> Array:
    if indices.dtype.kind not in "iu":
        raise error("take", f"indices must be integers, got {indices.dtype}")
    return indices


# np.take with out= and mode="raise" gathers into a temporary and copies that into out
# (so a bad id cannot leave out half-written): twice the memory traffic, which for
# large gathers (MoE expert weights, 2 MB each) cost 5x. Those check the ids once and
# gather straight into out; small ones keep numpy's check, cheaper than a min/max.
_DIRECT_TAKE_BYTES = 1 << 16


def _gather(data: Array, indices: Array, axis: int, out: Optional[Array]) -> Array:
    if out is None or out.nbytes < _DIRECT_TAKE_BYTES or indices.size == 0:
        return np.take(data, indices, axis=axis, out=out)
    n = data.shape[axis]
    lo, hi = int(indices.min()), int(indices.max())
    if lo < -n or hi >= n:
        raise IndexError(f"index {lo if lo < -n else hi} is out of bounds for axis {axis} with size {n}")
    if lo < 0:
        indices = np.where(indices < 0, indices + n, indices)
    return np.take(data, indices, axis=axis, out=out, mode="clip")


def take(data: Array, indices: Array, *, axis: int = 0, out: Optional[Array] = None) -> Array:
    """take: data's entries at `indices` along `axis` (negative ids count from the end;
    ids outside [-dim, dim) are an error)."""
    axis = norm_axis(int(axis), data.ndim, "axis")
    try:
        return _gather(data, _indices(indices), axis, out)
    except IndexError as err:
        raise error("take", str(err)) from None


def _take_bind(data: Array, indices: Array, *, out: Array, axis: int = 0) -> Callable[[], None]:
    _indices(indices)
    axis = norm_axis(int(axis), data.ndim, "axis")

    def run() -> None:
        try:
            _gather(data, indices, axis, out)
        except IndexError as err:
            raise error("take", str(err)) from None
    return run


take.bind = _take_bind


def where(cond: Array, x: Array, y: Array, *, out: Optional[Array] = None) -> Array:
    """where: x where cond holds, else y (broadcast), in x's dtype."""
    result = np.asarray(np.where(cond, x, y), dtype=x.dtype)
    if out is None:
        return result
    np.copyto(out, result)
    return out


def _where_bind(cond: Array, x: Array, y: Array, *, out: Array) -> Callable[[], None]:
    """y copied into out, then x where cond holds: two copies, no temporaries. Where out
    overlaps cond or x (or y other than exactly), the plain kernel instead."""
    def exactly(a: Array) -> bool:
        return a.shape == out.shape and a.__array_interface__["data"][0] == \
            out.__array_interface__["data"][0]
    if cond.dtype != np.bool_ or out.dtype != x.dtype or np.may_share_memory(out, cond) or \
            np.may_share_memory(out, x) or (np.may_share_memory(out, y) and not exactly(y)):
        return functools.partial(where, cond, x, y, out=out)

    def run() -> None:
        np.copyto(out, y, casting="unsafe")
        np.copyto(out, x, casting="unsafe", where=cond)
    return run


where.bind = _where_bind


def _scatter_setup(op: str, data: Array, indices: Array, updates: Array, axis: int,
                   reduction: str) -> tuple[int, list]:
    """(axis, index grids of the other axes) of a scatter, after its checks."""
    if indices.dtype.kind not in "iu":
        raise error(op, f"indices must be integers, got {indices.dtype}")
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise error(op, f"indices {indices.shape} and updates {updates.shape} must have one "
                        f"shape, of data's rank {data.ndim}")
    axis = norm_axis(int(axis), data.ndim, "axis")
    return axis, list(np.indices(indices.shape, sparse=True)) if indices.ndim else []


def _scatter_into(out: Array, indices: Array, updates: Array, axis: int, grid: list) -> None:
    """out[index tuple] = updates, the tuple made of `grid` with the (range-checked, wrapped)
    ids along `axis`: numpy's assignment, so a repeated id keeps the last update, as in the
    reference kernel."""
    if not indices.size:
        return
    dim = out.shape[axis]
    low, high = int(indices.min()), int(indices.max())
    if low < -dim or high >= dim:
        raise error("scatter_elements", f"indices out of range [{-dim}, {dim - 1}]")
    where = list(grid)
    where[axis] = indices if low >= 0 else np.where(indices < 0, indices + dim, indices)
    out[tuple(where)] = updates


def scatter_elements(data: Array, indices: Array, updates: Array, *, axis: int = 0,
                     reduction: str = "none", include_self: bool = True,
                     out: Optional[Array] = None) -> Array:
    """scatter_elements: data with `updates` written at `indices` along `axis` (negative
    ids count from the end; ids outside [-dim, dim) are an error). The reductions are the
    reference kernel's (the backend declares only reduction none legal: see
    capability.yaml)."""
    axis, grid = _scatter_setup("scatter_elements", data, indices, updates, axis, reduction)
    out = _result(out, data.shape, data.dtype, "scatter_elements")
    if reduction != "none":
        reference = legato.context().backend("cpu_ref").kernel("scatter_elements")
        np.copyto(out, reference(data, indices, updates, axis=axis, reduction=reduction,
                                 include_self=include_self))
        return out
    np.copyto(out, data)
    _scatter_into(out, indices, updates, axis, grid)
    return out


def _scatter_bind(data: Array, indices: Array, updates: Array, *, out: Array, axis: int = 0,
                  reduction: str = "none", include_self: bool = True) -> Callable[[], None]:
    """The index grids of the other axes made once; each run copies data and assigns."""
    axis, grid = _scatter_setup("scatter_elements", data, indices, updates, axis, reduction)
    _result(out, data.shape, data.dtype, "scatter_elements")
    if reduction != "none":
        return functools.partial(scatter_elements, data, indices, updates, axis=axis,
                                 reduction=reduction, include_self=include_self, out=out)

    def run() -> None:
        np.copyto(out, data)
        _scatter_into(out, indices, updates, axis, grid)
    return run


scatter_elements.bind = _scatter_bind


def _ufunc_kernel(name: str, ufunc: np.ufunc, doc: str) -> Callable[..., Array]:
    """A comparison or logical op: the numpy ufunc computing into `out` (bool)."""
    def kernel(*operands: Array, out: Optional[Array] = None) -> Array:
        if out is None:  # an array even for 0-d operands (a ufunc returns a scalar)
            return np.asarray(ufunc(*operands), dtype=np.bool_)
        ufunc(*operands, out=out)
        return out

    def bind(*operands: Array, out: Array) -> Callable[[], None]:
        return functools.partial(ufunc, *operands, out=out)
    kernel.bind = bind
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = doc
    return kernel


_UFUNCS = {
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_not": np.logical_not,
}

def cumsum(data: Array, *, axis: int = 0, exclusive: bool = False, reverse: bool = False,
           out: Optional[Array] = None) -> Array:
    """cumsum: the running sum along `axis`, each element added in order (from the end
    where `reverse`; left out of its own sum where `exclusive`), floats summed in float64
    as the reference does, integers wrapping in their dtype. A decoder's positions are
    such a count over a symbolic length, which the op's decomposition (log2(n) shifted
    adds) cannot express before n is known."""
    axis = norm_axis(int(axis), data.ndim, "axis")
    out = _result(out, data.shape, data.dtype, "cumsum")
    if np.may_share_memory(out, data):
        data = data.copy()
    x, running = (np.flip(data, axis), np.flip(out, axis)) if reverse else (data, out)
    n, acc = data.shape[axis], np.float64 if data.dtype.kind == "f" else data.dtype
    if n and exclusive:  # 0 first, then the running sum of all but the last element

        def part(start, stop):
            index = [slice(None)] * data.ndim
            index[axis] = slice(start, stop)
            return tuple(index)
        running[part(0, 1)] = 0
        np.copyto(running[part(1, n)], np.cumsum(x[part(0, n - 1)], axis=axis, dtype=acc),
                  casting="unsafe")
    elif n:
        np.copyto(running, np.cumsum(x, axis=axis, dtype=acc), casting="unsafe")
    return out


cumsum.bind = lambda data, *, out, **attrs: functools.partial(cumsum, data, out=out, **attrs)


KERNELS: dict[str, Callable[..., Any]] = {
    "strided_slice": strided_slice, "broadcast_to": broadcast_to, "concat": concat,
    "split": split, "pad": pad, "take": take, "where": where,
    "scatter_elements": scatter_elements, "cumsum": cumsum,
    **{name: _ufunc_kernel(name, fn, f"{name}: numpy.{fn.__name__}, bool result")
       for name, fn in _UFUNCS.items()},
}
