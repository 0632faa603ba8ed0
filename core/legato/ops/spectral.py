"""The discrete Fourier transform (level 1), on real and complex tensors.

legato has no complex dtype: a complex tensor of shape S is a float tensor of shape S + [2]
holding (real, imag) in its last axis, a real signal may come as S + [1]. That is ONNX DFT's
convention and the layout `torch.view_as_real` gives, so importers map complex values
without copies. The decomposition is one matmul by a constant table of cosines and sines
(computed in float64, rounded once to the data's dtype): every backend with a matmul runs
it, and for the transform sizes models use (token mixing, spectrogram frames) a dense
table is as fast as an FFT on such hardware.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import TensorType
from ..ir.errors import LegatoError
from .base import T, composite, f32, fail

NORMS = ("backward", "ortho", "forward")
# a table of more elements than this would be a constant of a gigabyte or more
MAX_TABLE_ELEMENTS = 1 << 28


def dft_axis(axis: int, rank: int) -> int:
    """The signal axis, counted as ONNX DFT does: in [-rank, -2] or [0, rank - 2] (the
    last axis holds the components, so it is never the signal axis)."""
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        fail(f"axis {axis} is not a signal axis of a rank-{rank} tensor (the last axis "
             "holds the real and imaginary parts)")
    return axis % rank


def dft_sizes(shape, axis: int, inverse: bool, onesided: bool, length) -> tuple[int, int]:
    """(n, bins): the transform length and the result's size along the axis."""
    size = shape[axis]
    half_to_real = inverse and onesided  # one-sided spectrum in, real signal out
    n = length if length is not None else 2 * (size - 1) if half_to_real else size
    if n < 1:
        fail(f"the transform length is {n}: give length >= 1 (an axis of {size})")
    return n, n if half_to_real or not onesided else n // 2 + 1


def _infer(types, attrs):
    (x,) = types
    if x.dtype not in ("float16", "float32", "float64"):
        fail(f"data must be float16, float32 or float64, got {x.dtype}")
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        fail(f"data {list(x.shape)} must end in an axis of 1 (real) or 2 (real, imag) values")
    axis = dft_axis(attrs["axis"], x.rank)
    n, bins = dft_sizes(x.shape, axis, attrs["inverse"], attrs["onesided"], attrs["length"])
    parts = 1 if attrs["inverse"] and attrs["onesided"] else 2
    return TensorType(x.shape[:axis] + (bins,) + x.shape[axis + 1:-1] + (parts,), x.dtype)


def scale_of(norm: str, n: int, inverse: bool) -> float:
    """numpy.fft's `norm`: "backward" scales the inverse by 1/n, "forward" the forward
    transform, "ortho" both by 1/sqrt(n)."""
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1 / n if (norm == "forward") != inverse else 1.0


def dft_table(rows: int, parts: int, n: int, bins: int, inverse: bool, onesided: bool,
              scale: float) -> np.ndarray:
    """float64 (rows * parts, bins * out_parts): the signal's first `rows` points, each
    (real[, imag]), times the table give the bins interleaved as (real, imag), or the real
    signal for a one-sided inverse."""
    k = np.arange(rows).reshape(-1, 1)
    turns = (k * np.arange(bins).reshape(1, -1)) % n  # in n-ths of a turn, exact
    cos, sin = np.cos(2 * np.pi * turns / n), np.sin(2 * np.pi * turns / n)
    # quarter turns exactly: the imaginary part of a real signal's bins 0 and n/2 is then
    # exactly 0, as an FFT gives it (angle() of them sits on the branch cut)
    quarter = (4 * turns) % n == 0
    cos[quarter], sin[quarter] = np.round(cos[quarter]), np.round(sin[quarter])
    cos, sin = cos * scale, sin * scale
    if inverse and onesided:
        # the other half of the spectrum is the conjugate of this one: bins strictly
        # between 0 and n/2 count twice; only the real part of the sum is kept
        twice = np.where((k > 0) & (2 * k < n), 2.0, 1.0)
        table = np.stack([cos * twice, -sin * twice], axis=1)      # (rows, 2, bins)
        return table[:, :parts].reshape(rows * parts, bins) + 0.0
    # (+ 0.0 below turns negative zeros positive: sums of products with them stay +0)
    sign = 1.0 if inverse else -1.0
    # (a + ib)(cos + i s sin) = (a cos - b s sin) + i (a s sin + b cos)
    table = np.stack([np.stack([cos, sign * sin], axis=-1),
                      np.stack([-sign * sin, cos], axis=-1)], axis=1)  # (rows, 2, bins, 2)
    return table[:, :parts].reshape(rows * parts, bins * 2) + 0.0


X = f32(3, 8, 1)
Z = f32(2, 6, 4, 2)
EXAMPLES = [((X, ), {}), ((Z,), {"axis": 1}), ((Z,), {"axis": -2, "inverse": True}),
            ((X,), {"onesided": True, "length": 6}), ((Z,), {"length": 11, "norm": "ortho"}),
            ((f32(2, 5, 2),), {"inverse": True, "onesided": True, "norm": "forward"}),
            ((T("float64", 4, 3, 1),), {"axis": 0, "onesided": True})]


@composite("signal.dft", "data", _infer, "opaque", 1, EXAMPLES,
           {"axis": ("int", -2), "inverse": ("bool", False), "onesided": ("bool", False),
            "length": ("int?", None), "norm": ("str:" + "|".join(NORMS), "backward")})
def dft(b, x, axis, inverse, onesided, length, norm):
    """ONNX DFT: `data` is `(..., 1)` real or `(..., 2)` (real, imag); the transform of
    `length` points along `axis` (the axis truncated or zero-padded; default its size, or
    `2 (size - 1)` for a one-sided inverse); `onesided` keeps bins `0..n/2`, or with
    `inverse` takes such a half spectrum and returns the real signal `(..., n, 1)`; `norm`
    as numpy.fft"""
    rank = x.rank
    axis = dft_axis(axis, rank)
    n, bins = dft_sizes(x.shape, axis, inverse, onesided, length)
    rows, parts = min(x.shape[axis], n if not (inverse and onesided) else n // 2 + 1), x.shape[-1]
    out_parts = 1 if inverse and onesided else 2
    if rows * parts * bins * out_parts > MAX_TABLE_ELEMENTS:
        raise LegatoError(f"signal.dft: a {n}-point transform of {x.type} needs a table of "
                          f"{rows * parts} x {bins * out_parts} values, too large a constant")
    if rows < x.shape[axis]:  # points past the transform length do not count
        x = b.strided_slice(x, begin=[0], end=[rows], axes=[axis])
    # the signal axis next to the components, so (points, parts) flatten into one axis
    order = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    moved = x if axis == rank - 2 else b.permute_dims(x, axes=order)
    lead = list(moved.shape[:-2])
    table = dft_table(rows, parts, n, bins, inverse, onesided, scale_of(norm, n, inverse))
    y = b.matmul(b.reshape(moved, shape=lead + [rows * parts]), b.const(table, dtype=x.dtype))
    y = b.reshape(y, shape=lead + [bins, out_parts])
    if axis == rank - 2:
        return y
    return b.permute_dims(y, axes=[order.index(d) for d in range(rank)])
