"""ATen converters for windowed ops the core has no op for: 3-d and adaptive max pooling
(2-d pools over (H, W) then D, or gathers of each window's taps where torch's indices are
wanted), embedding bags and col2im. They register in ops.ATEN."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from .ops import aten


# --- 3-d pooling: a 2-d pool over (H, W), then one over D -------------------------------------

def _batched(pool):
    """A pool of (N, C, D, H, W) data that also takes unbatched (C, D, H, W) data."""
    def convert(b, x, *args, **kwargs):
        if x.rank == 4:
            y = convert(b, b.expand_dims(x, axes=[0]), *args, **kwargs)
            return tuple(None if v is None else b.squeeze(v, axes=[0]) for v in y) \
                if isinstance(y, tuple) else b.squeeze(y, axes=[0])
        return pool(b, x, *args, **kwargs)
    return convert


def _triple(v, default=None):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (default if not v and default is not None else v * 3 if len(v) == 1 else v)


def _separable_pool3d(b, x, op, kernel, stride, padding, **extra):
    """Windows over D, H and W are boxes, so a max or an average over one is the max or
    average over D of those over (H, W) (average divisors are products per axis too)."""
    n, c, d, h, w = x.shape
    dilation = extra.pop("dilation", [1, 1, 1])
    hw = b.call(op, b.reshape(x, shape=[n, c * d, h, w]), pool_size=kernel[1:],
                strides=stride[1:], padding=[padding[1], padding[2]] * 2,
                dilation=dilation[1:], **extra)
    oh, ow = hw.shape[2:]
    y = b.call(op, b.reshape(hw, shape=[n, c, d, oh * ow]), pool_size=[kernel[0], 1],
               strides=[stride[0], 1], padding=[padding[0], 0] * 2, dilation=[dilation[0], 1],
               **extra)
    return b.reshape(y, shape=[n, c, y.shape[2], oh, ow])


def _window_sizes(sizes, out_sizes, kernel, stride, padding):
    """Per output cell of a box pool: the input cells its window covers (valid) and those
    plus its explicit padding (full), as torch's average divides by them."""
    valid, full = np.ones(()), np.ones(())
    for n, o, k, s, p in zip(sizes, out_sizes, kernel, stride, padding):
        starts = np.arange(o) * s - p
        ends = np.minimum(starts + k, n + p)
        valid = np.multiply.outer(valid, np.minimum(ends, n) - np.maximum(starts, 0))
        full = np.multiply.outer(full, ends - starts)
    return valid, full


@_batched
def avg_pool3d(b, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    kernel, padding = _triple(kernel), _triple(padding)
    stride = _triple(stride, kernel)
    floats = x.dtype.startswith(("float", "bfloat"))
    if floats and not divisor_override:
        return _separable_pool3d(b, x, "nn.avg_pool2d", kernel, stride, padding,
                                 ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    # a window's sum is its mean over the input cells times their count; integers sum in
    # float64 (exact) and divide as torch does, truncating
    mean = _separable_pool3d(b, x if floats else b.cast(x, dtype="float64"), "nn.avg_pool2d",
                             kernel, stride, padding, ceil_mode=ceil_mode,
                             count_include_pad=False)
    valid, full = _window_sizes(x.shape[2:], mean.shape[2:], kernel, stride, padding)
    divisor = divisor_override or (full if count_include_pad else valid)
    if floats:
        return b.multiply(mean, Const.of((valid / divisor).astype(x.dtype)))
    sums = b.cast(b.round(b.multiply(mean, Const.of(valid))), dtype="int64")
    quotient = b.divide(sums, Const.of(np.broadcast_to(divisor, valid.shape).astype(np.int64)))
    return quotient if x.dtype == "int64" else b.cast(quotient, dtype=x.dtype)


def _cells(sizes, taps) -> np.ndarray:
    """(output cells, window taps) row-major input positions of pooling windows from each
    axis' (outputs, taps) positions; a tap outside its axis (padding, or a short adaptive
    window) becomes position prod(sizes), a cell of padding."""
    flat = np.zeros((1, 1), dtype=np.int64)
    inside = np.ones((1, 1), dtype=bool)
    for n, cells in zip(sizes, taps):
        o, k = cells.shape
        flat = (flat[:, None, :, None] * n + cells[None, :, None, :]).reshape(
            flat.shape[0] * o, flat.shape[1] * k)
        inside = (inside[:, None, :, None] & ((cells >= 0) & (cells < n))[None, :, None, :]
                  ).reshape(flat.shape)
    return np.where(inside, flat, math.prod(sizes))


def _window_cells(sizes, out_sizes, kernel, stride, padding, dilation) -> np.ndarray:
    # taps past (n - 1 + p) // d reach no input cell from any window (ceil mode's one
    # window larger than the input, kernel 1280 over 7): left out, not listed as padding
    kernel = [min(k, (n - 1 + p) // d + 1) for n, k, p, d in zip(sizes, kernel, padding,
                                                                  dilation)]
    return _cells(sizes, [np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * d
                          for o, k, s, p, d in zip(out_sizes, kernel, stride, padding,
                                                   dilation)])


def _pool_by_cells(b, x, cells, out_sizes):
    """The maximum of each window of (N, C, spatial...) data and torch's index of it: the
    row-major spatial position of the window's first maximum."""
    n, c = x.shape[:2]
    lowest = -np.inf if x.dtype.startswith("float") else np.iinfo(x.dtype).min
    flat = b.concat(b.reshape(x, shape=[n, c, -1]),
                    Const.of(np.full((n, c, 1), lowest, dtype=x.dtype)), axis=2)
    patches = b.take(flat, Const.of(cells), axis=2)  # (n, c, cells, taps)
    first = b.argmax(patches, axis=3, keepdims=False)
    offsets = Const.of(np.arange(cells.shape[0], dtype=np.int64) * cells.shape[1])
    indices = b.take(Const.of(cells.reshape(-1)), b.add(first, offsets), axis=0)
    return (b.reshape(b.max(patches, axes=[3]), shape=[n, c, *out_sizes]),
            b.reshape(indices, shape=[n, c, *out_sizes]))


def _pool_indices(b, x, out_sizes, kernel, stride, padding, dilation):
    cells = _window_cells(x.shape[2:], out_sizes, kernel, stride, padding, dilation)
    return _pool_by_cells(b, x, cells, out_sizes)[1]


def _adaptive_max(spatial: int):
    def convert(b, x, output_size):
        if x.rank == spatial + 1:  # unbatched
            y = convert(b, b.expand_dims(x, axes=[0]), output_size)
            return tuple(b.squeeze(v, axes=[0]) for v in y)
        sizes, out = x.shape[2:], [int(m) for m in output_size]
        taps = []
        for n, m in zip(sizes, out):  # cell i: [floor(i n / m), ceil((i + 1) n / m))
            starts = np.arange(m) * n // m
            ends = -(-(np.arange(m) + 1) * n // m)
            k = np.arange(int((ends - starts).max()))
            taps.append(np.where(k[None, :] < (ends - starts)[:, None],
                                 starts[:, None] + k[None, :], -1))
        return _pool_by_cells(b, x, _cells(sizes, taps), out)
    return convert


aten("aten.adaptive_max_pool2d.default")(_adaptive_max(2))
aten("aten.adaptive_max_pool3d.default")(_adaptive_max(3))


@_batched
def max_pool3d_with_indices(b, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel, padding, dilation = _triple(kernel), _triple(padding), _triple(dilation)
    stride = _triple(stride, kernel)
    y = _separable_pool3d(b, x, "nn.max_pool2d", kernel, stride, padding,
                          dilation=dilation, ceil_mode=ceil_mode)
    return y, _pool_indices(b, x, y.shape[2:], kernel, stride, padding, dilation)


aten("aten.avg_pool3d.default")(avg_pool3d)
aten("aten.max_pool3d_with_indices.default")(max_pool3d_with_indices)


@aten("aten.max_pool3d.default")
def max_pool3d(b, x, *args, **kwargs):
    return max_pool3d_with_indices(b, x, *args, **kwargs)[0]


def _adaptive_axis(b, x, axis: int, m: int):
    """Output cell i of the axis averages input [floor(i n / m), ceil((i + 1) n / m))."""
    n = x.shape[axis]
    if n == m:
        return x
    if n % m == 0:  # equal cells: one mean over a split axis
        shape = list(x.shape[:axis]) + [m, n // m] + list(x.shape[axis + 1:])
        return b.mean(b.reshape(x, shape=shape), axes=[axis + 1])
    cells = [b.mean(b.strided_slice(x, begin=[i * n // m], end=[-(-(i + 1) * n // m)],
                                    axes=[axis]), axes=[axis], keepdims=True)
             for i in range(m)]
    return b.concat(*cells, axis=axis) if len(cells) > 1 else cells[0]


@aten("aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool3d.default")
def adaptive_avg_pool3d(b, x, output_size):
    sizes = _triple(output_size)
    for k, m in enumerate(sizes):
        axis = x.rank - 3 + k
        x = _adaptive_axis(b, x, axis, x.shape[axis] if m is None else int(m))
    return x


# --- embedding bags and folding ---------------------------------------------------------------

@aten("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default")
def embedding_bag(b, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bag i sums (mode 0), averages (1) or takes the maximum (2) of the rows
    weight[indices[p]] for p in [offsets[i], offsets[i + 1]) (the last bag runs to the end
    unless include_last_offset); an empty bag is zeros; padding_idx's rows are left out.
    Only the first result (the bags) is computed: the others serve backward."""
    count = indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = b.strided_slice(offsets, begin=[0], end=[bags], axes=[0])
    ends = b.strided_slice(offsets, begin=[1], end=[bags + 1], axes=[0]) \
        if include_last_offset or bags > 1 else None
    if not include_last_offset:  # the last bag ends at the last index
        last = Const.of(np.array([count], dtype=np.dtype(offsets.dtype)))
        ends = last if bags == 1 else b.concat(ends, last, axis=0)
    position = Const.of(np.arange(count, dtype=np.dtype(offsets.dtype))[None, :])
    member = b.logical_and(b.greater_equal(position, b.expand_dims(starts, axes=[1])),
                           b.less(position, b.expand_dims(ends, axes=[1])))  # (bags, count)
    if padding_idx is not None and padding_idx >= 0:
        member = b.logical_and(member, b.expand_dims(b.not_equal(indices, padding_idx),
                                                     axes=[0]))
    rows = b.take(weight, indices, axis=0)  # (count, dim)
    if per_sample_weights is not None:
        rows = b.multiply(rows, b.expand_dims(per_sample_weights, axes=[1]))
    if mode == 2:
        lowest = Const.of(np.array(-np.inf, dtype=weight.dtype))
        best = b.max(b.where(b.expand_dims(member, axes=[2]), rows, lowest), axes=[1])
        filled = b.max(member, axes=[1], keepdims=True)
        return b.where(filled, best, 0.0), None, None, None
    total = b.matmul(b.cast(member, dtype=weight.dtype), rows)
    if mode == 1:
        sizes = b.sum(b.cast(member, dtype=weight.dtype), axes=[1], keepdims=True)
        total = b.divide(total, b.maximum(sizes, 1.0))
    return total, None, None, None


@aten("aten.col2im.default")
def col2im(b, x, output_size, kernel_size, dilation, padding, stride):
    """Sum the columns of x (N, C * kh * kw, L) back into (N, C, H, W) images: the column
    of block l, tap k, lands on the cell that tap covers (taps on padding are dropped)."""
    unbatched = x.rank == 2
    if unbatched:
        x = b.expand_dims(x, axes=[0])
    n, ck, blocks = x.shape
    (h, w), (kh, kw) = output_size, kernel_size
    c = ck // (kh * kw)
    out = [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, d, p, s in
           zip((h, w), kernel_size, dilation, padding, stride)]
    cells = _window_cells((h, w), out, kernel_size, stride, padding, dilation)  # (L, K)
    if math.prod(out) != blocks:
        raise LegatoError(f"col2im: {blocks} blocks do not make a {out[0]}x{out[1]} grid")
    # (L, K) -> (K, L) as x's rows are ordered: channel, then tap
    target = np.broadcast_to(cells.T.reshape(1, 1, kh * kw * blocks),
                             (n, c, kh * kw * blocks))
    zeros = Const.of(np.zeros((n, c, h * w + 1), dtype=x.dtype))  # + 1: the padding cell
    sums = b.scatter_elements(zeros, Const.of(np.ascontiguousarray(target)),
                              b.reshape(x, shape=[n, c, kh * kw * blocks]), axis=2,
                              reduction="add")
    y = b.reshape(b.strided_slice(sums, begin=[0], end=[h * w], axes=[2]), shape=[n, c, h, w])
    return b.squeeze(y, axes=[0]) if unbatched else y


def _pool1d_as_2d(convert, b, x, *args):
    """A 1-d pool over (N, C, L) or (C, L) as the 2-d one over a unit height."""
    y = convert(b, b.expand_dims(x, axes=[x.rank - 1]), *args)
    return b.squeeze(y, axes=[y.rank - 2])


@aten("aten.avg_pool1d.default")
def avg_pool1d(b, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True):
    from .ops import ATEN
    (k,), (p,) = _single(kernel), _single(padding)
    (s,) = _single(stride) if stride else (k,)
    return _pool1d_as_2d(ATEN["aten.avg_pool2d.default"], b, x, [1, k], [1, s], [0, p],
                         ceil_mode, count_include_pad)


@aten("aten.adaptive_avg_pool1d.default")
def adaptive_avg_pool1d(b, x, output_size):
    from .ops import ATEN
    (m,) = _single(output_size)
    return _pool1d_as_2d(ATEN["aten.adaptive_avg_pool2d.default"], b, x, [1, m])


def _single(value) -> tuple:
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)
