"""ATen converters for views with static strides (diagonal, unfold, as_strided) as takes of
constant indices, copies and fills, scatters into slices, and reflection and replication
padding (normalizations, distances, sorted search and order statistics are in
statistics.py, windowed ops in pool.py). They register in ops.ATEN."""
from __future__ import annotations

import operator

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from ...ir.shapes import broadcast_shapes, norm_axis
from .ops import ATEN, aten
from .tensors import full_like, zeros

# --- reductions, copies and fills ------------------------------------------------------------


@aten("aten.mean.default")
def mean_all(b, x, dtype=None):
    return ATEN["aten.mean.dim"](b, x, None, False, dtype)


@aten("aten.copy.default")
def copy(b, x, src, non_blocking=False):
    """src written into a tensor like x: broadcast to x's shape, in x's dtype."""
    y = src if src.dtype == x.dtype else b.cast(src, dtype=x.dtype)
    return y if y.shape == x.shape else b.broadcast_to(y, shape=list(x.shape))


@aten("aten.fill.Scalar")
def fill(b, x, value):
    return full_like(b, x, value)


@aten("aten.fill.Tensor")
def fill_tensor(b, x, value):
    return copy(b, x, value)


@aten("aten.empty_permuted.default")
def empty_permuted(b, size, physical_layout, dtype=None, **_):
    return zeros(b, size, dtype)  # any values will do: zeros are deterministic


@aten("aten.empty_strided.default")
def empty_strided(b, size, stride, dtype=None, **_):
    return zeros(b, size, dtype)


@aten("aten.atan2.out")
def atan2_out(b, y, x, out=None):
    return ATEN["aten.atan2.default"](b, y, x)  # functional graphs never write into `out`


# --- views with static strides: takes of constant indices ------------------------------------

def _take_flat(b, x, indices: np.ndarray):
    """x's elements (row-major) at the constant `indices`, in their shape."""
    size = x.type.size
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise LegatoError(f"a view reaches element {int(indices.max())} of {x.type}, which "
                          f"has {size}")
    flat = x if x.rank == 1 else b.reshape(x, shape=[size])
    return b.take(flat, Const.of(indices.astype(np.int64)), axis=0)


def _strided_positions(size, stride, offset: int) -> np.ndarray:
    """The storage position of each element of a (size, stride, offset) view, row-major."""
    grid = np.full([int(n) for n in size], int(offset), dtype=np.int64)
    for axis, (n, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = int(n)
        grid = grid + np.arange(int(n), dtype=np.int64).reshape(shape) * int(step)
    return grid


class Site:
    """The FX node the importer converts and the values of the nodes before it, for the
    converters that mark themselves `reads_site`: those whose meaning depends on how
    torch lays tensors out in memory, which only the exported graph records."""

    def __init__(self, node, env: dict):
        self.node, self.env = node, env


@aten("aten.as_strided.default", "aten.as_strided_copy.default")
def as_strided(b, x, size, stride, storage_offset=None, *, site: Site | None = None):
    """The view with `size`, `stride` and `storage_offset` of the storage x lives in.
    From the importer (`site`) it reads that storage through the strides torch.export
    recorded for the tensor owning it (a placeholder laid out as the example input was,
    a channels-last copy, ...); called directly, x is taken as contiguous at offset 0."""
    if site is None:
        offset = 0 if storage_offset is None else storage_offset
        return _take_flat(b, x, _strided_positions(size, stride, offset))
    node, env = site.node, site.env
    owner = _storage_owner(node.args[0])
    layout, view = (n.meta.get("val") for n in (owner, node.args[0]))
    if not all(hasattr(v, "stride") for v in (layout, view)):
        raise LegatoError(f"as_strided on {owner.name}, whose storage layout torch.export "
                          "did not record: legato cannot tell which elements it reads")
    offset = view.storage_offset() if storage_offset is None else storage_offset
    wanted = _strided_positions(size, stride, offset)
    held = _strided_positions(layout.shape, layout.stride(), layout.storage_offset())
    return _take_flat(b, env[owner], _storage_elements(owner.name, layout, held, wanted))


as_strided.reads_site = True


def _storage_owner(fx_node):
    """The node whose tensor owns the storage fx_node's tensor views: back through the
    view ops (their schema says the result aliases the first argument), and through the
    pieces of those returning several views (split, unbind, chunk)."""
    while fx_node.op == "call_function":
        op = fx_node.args[0] if fx_node.target is operator.getitem else fx_node
        if not (hasattr(op, "target") and _is_view(op.target)):
            break
        fx_node = op.args[0]
    return fx_node


def _is_view(target) -> bool:
    if str(target) == "aten._unsafe_view.default":  # a view its schema does not declare
        return True
    returns = getattr(getattr(target, "_schema", None), "returns", None)
    alias = returns[0].alias_info if returns else None
    return alias is not None and not alias.is_write


def _storage_elements(name: str, layout, held: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each storage position in `wanted`, the row-major index of an element of the
    owner (laid out at positions `held`) stored there."""
    end = int(max(held.max(initial=-1), wanted.max(initial=-1))) + 1
    element = np.full(end, -1, dtype=np.int64)
    element[held.ravel()] = np.arange(held.size, dtype=np.int64)
    found = np.where(wanted >= 0, element[np.maximum(wanted, 0)], -1) if end else wanted
    if wanted.size and found.min() < 0:
        missing = int(wanted.ravel()[np.argmin(found.ravel())])
        raise LegatoError(
            f"it reads storage position {missing}, which no element of {name} "
            f"(shape {list(layout.shape)}, strides {list(layout.stride())}, offset "
            f"{layout.storage_offset()}) holds: legato does not track that memory")
    return found


def _diagonal_cells(shape, offset: int) -> np.ndarray:
    """Row-major positions in an (n1, n2) matrix of its diagonal `offset`."""
    n1, n2 = shape
    count = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rows = np.arange(count, dtype=np.int64) + max(-offset, 0)
    return rows * n2 + rows + offset


def _last_two(b, x, dim1: int, dim2: int):
    """x with dims dim1 and dim2 moved last and merged into one."""
    rest = [a for a in range(x.rank) if a not in (dim1, dim2)]
    y = b.permute_dims(x, axes=rest + [dim1, dim2]) if rest + [dim1, dim2] != \
        list(range(x.rank)) else x
    return b.reshape(y, shape=[x.shape[a] for a in rest] + [x.shape[dim1] * x.shape[dim2]])


@aten("aten.diagonal.default", "aten.diagonal_copy.default")
def diagonal(b, x, offset=0, dim1=0, dim2=1):
    dim1, dim2 = norm_axis(dim1, x.rank, "dim1"), norm_axis(dim2, x.rank, "dim2")
    if dim1 == dim2:
        raise LegatoError(f"diagonal dims {dim1} and {dim2} must differ")
    cells = _diagonal_cells((x.shape[dim1], x.shape[dim2]), offset)
    return b.take(_last_two(b, x, dim1, dim2), Const.of(cells), axis=-1)


@aten("aten.unfold.default", "aten.unfold_copy.default")
def unfold(b, x, dimension, size, step):
    """Windows of `size` elements every `step` along `dimension`: that dim becomes the
    window count and the window's elements a new last dim."""
    if x.rank == 0:
        return b.reshape(x, shape=[1]) if size == 1 else unfold(b, b.reshape(
            x, shape=[1]), 0, size, step)
    dim = norm_axis(dimension, x.rank, "dimension")
    n = x.shape[dim]
    if size > n or step <= 0:
        raise LegatoError(f"unfold size {size} step {step} does not fit a dim of {n}")
    windows = (n - size) // step + 1
    cells = np.arange(windows)[:, None] * step + np.arange(size)[None, :]
    y = b.take(x, Const.of(cells.astype(np.int64)), axis=dim)  # dims ..., windows, size, ...
    axes = list(range(y.rank))
    axes.append(axes.pop(dim + 1))
    return y if axes == list(range(y.rank)) else b.permute_dims(y, axes=axes)


# --- scatters into views: where over a constant mask -------------------------------------------

def _along(mask: np.ndarray, rank: int, axis: int) -> Const:
    shape = [1] * rank
    shape[axis] = mask.size
    return Const.of(mask.reshape(shape))


def _in_dtype(b, src, x):
    return src if src.dtype == x.dtype else b.cast(src, dtype=x.dtype)


def _fits(src, shape, part: str) -> None:
    """src must have the shape of the part of x it is written into, as torch checks. An
    exported program breaks that when an `out=` view was too small and torch resized it
    in place (writing past the view's end), which the exported graph does not say."""
    if tuple(src.shape) != tuple(shape):
        raise LegatoError(f"src {src.type} does not fit the {part} {list(shape)} it is "
                          "written into (an out= view that torch resized past its end?)")


@aten("aten.select_scatter.default")
def select_scatter(b, x, src, dim, index):
    dim = norm_axis(dim, x.rank, "dim")
    index = norm_axis(index, x.shape[dim], "index")
    _fits(src, x.shape[:dim] + x.shape[dim + 1:], f"index {index} of dim {dim}")
    mask = np.arange(x.shape[dim]) == index
    return b.where(_along(mask, x.rank, dim), b.expand_dims(_in_dtype(b, src, x), axes=[dim]),
                   x)


@aten("aten.slice_scatter.default")
def slice_scatter(b, x, src, dim=0, start=None, end=None, step=1):
    dim = norm_axis(dim, x.rank, "dim")
    n = x.shape[dim]
    positions = range(n)[slice(start, end, step)]
    _fits(src, x.shape[:dim] + (len(positions),) + x.shape[dim + 1:],
          f"slice {start}:{end}:{step} of dim {dim}")
    if not len(positions):
        return x
    mask = np.zeros(n, dtype=bool)
    mask[list(positions)] = True
    source = np.zeros(n, dtype=np.int64)  # which element of src lands at each position
    source[list(positions)] = np.arange(len(positions))
    spread = b.take(_in_dtype(b, src, x), Const.of(source), axis=dim)
    return b.where(_along(mask, x.rank, dim), spread, x)


@aten("aten.diagonal_scatter.default")
def diagonal_scatter(b, x, src, offset=0, dim1=0, dim2=1):
    dim1, dim2 = norm_axis(dim1, x.rank, "dim1"), norm_axis(dim2, x.rank, "dim2")
    n1, n2 = x.shape[dim1], x.shape[dim2]
    cells = _diagonal_cells((n1, n2), offset)
    _fits(src, tuple(d for a, d in enumerate(x.shape) if a not in (dim1, dim2)) +
          (cells.size,), f"diagonal {offset} of dims {dim1}, {dim2}")
    if not cells.size:
        return x
    mask = np.zeros(n1 * n2, dtype=bool)
    mask[cells] = True
    source = np.zeros(n1 * n2, dtype=np.int64)
    source[cells] = np.arange(cells.size)
    rest = [a for a in range(x.rank) if a not in (dim1, dim2)]
    # src's diagonal (its last dim) spread over the (n1, n2) cells, then put back in place
    spread = b.reshape(b.take(_in_dtype(b, src, x), Const.of(source), axis=-1),
                       shape=[x.shape[a] for a in rest] + [n1, n2])
    order = rest + [dim1, dim2]
    back = [order.index(a) for a in range(x.rank)]
    spread = b.permute_dims(spread, axes=back) if back != list(range(x.rank)) else spread
    full = np.zeros((n1, n2), dtype=bool)
    full.flat[cells] = True
    shape = [1] * x.rank
    shape[dim1], shape[dim2] = n1, n2
    return b.where(Const.of(full.reshape(shape) if dim1 < dim2 else
                            full.T.reshape(shape)), spread, x)


@aten("aten.masked_scatter.default")
def masked_scatter(b, x, mask, source):
    """x with the elements where mask is true taken from source's elements in order: the
    k-th true cell (row-major) gets source's k-th element."""
    shape = list(broadcast_shapes(x.shape, mask.shape))
    if x.shape != tuple(shape):
        x = b.broadcast_to(x, shape=shape)
    if mask.shape != tuple(shape):
        mask = b.broadcast_to(mask, shape=shape)
    count = source.type.size
    if count == 0:
        return x
    flat = b.reshape(b.cast(mask, dtype="int64"), shape=[-1])
    order = b.clip(b.subtract(b.cumsum(flat, axis=0), 1), min=0, max=count - 1)
    taken = b.take(b.reshape(_in_dtype(b, source, x), shape=[-1]), order, axis=0)
    return b.where(mask, b.reshape(taken, shape=shape), x)


# --- padding by reflection and replication ----------------------------------------------------

def _pad_mode(mode: str):
    def convert(b, x, padding):
        """torch's pad list: (begin, end) pairs from the last dim backwards; negative values
        crop."""
        k = len(padding) // 2
        begins = [0] * (x.rank - k) + [padding[2 * (k - 1 - i)] for i in range(k)]
        ends = [0] * (x.rank - k) + [padding[2 * (k - 1 - i) + 1] for i in range(k)]
        if any(p < 0 for p in begins + ends):
            x = b.strided_slice(x, begin=[max(-p, 0) for p in begins],
                                end=[d - max(-p, 0) for d, p in zip(x.shape, ends)])
        grow = [max(p, 0) for p in begins + ends]
        return b.pad(x, pads=grow, mode=mode) if any(grow) else x
    return convert


aten("aten.reflection_pad1d.default", "aten.reflection_pad2d.default",
     "aten.reflection_pad3d.default")(_pad_mode("reflect"))
aten("aten.replication_pad1d.default", "aten.replication_pad2d.default",
     "aten.replication_pad3d.default")(_pad_mode("edge"))
