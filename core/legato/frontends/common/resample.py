"""Resizing as the importers write it: one axis at a time, each output element a weighted
sum of a few input elements along that axis (take with constant indices, multiply by
constant weights, add). Shapes are static, so every index and weight is known at import;
nearest is one take, linear two taps, cubic four. ONNX Resize and PyTorch's upsample ops
differ only in how an output index maps to an input coordinate (`source_coordinates`).
"""
from __future__ import annotations

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(mode: str, size_in: int, size_out: int, scale: float,
                       roi: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """For each output index, the input coordinate it samples (ONNX Resize's
    coordinate_transformation_mode; `scale` is output/input as the model states it, and
    the resized length it implies, `scale * size_in`, need not be an integer)."""
    i = np.arange(size_out, dtype=np.float64)
    width = scale * size_in
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if width != 1 else np.full(size_out, -0.5)
    if mode == "align_corners":
        return i * (size_in - 1) / (width - 1) if width != 1 else np.zeros(size_out)
    if mode == "asymmetric":
        return i / scale
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        return offset + (i + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            return np.full(size_out, (end - start) * (size_in - 1) / 2 + start * (size_in - 1))
        return i * (end - start) * (size_in - 1) / (width - 1) + start * (size_in - 1)
    raise LegatoError(f"coordinate mode {mode!r} is not supported ({', '.join(COORDINATE_MODES)})")


def nearest_indices(coords: np.ndarray, mode: str, size_in: int) -> np.ndarray:
    if mode == "round_prefer_floor":
        index = np.ceil(coords - 0.5)
    elif mode == "round_prefer_ceil":
        index = np.floor(coords + 0.5)
    elif mode == "floor":
        index = np.floor(coords)
    elif mode == "ceil":
        index = np.ceil(coords)
    else:
        raise LegatoError(f"nearest mode {mode!r} is not supported ({', '.join(NEAREST_MODES)})")
    return np.clip(index, 0, size_in - 1).astype(np.int64)


def _cubic(d, a: float):
    """Keys' cubic convolution kernel at distance d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _coefficients(ratio: float, scale: float, mode: str, cubic_a: float,
                  antialias: bool) -> np.ndarray:
    """The weights of the taps around a coordinate whose distance past the tap left of it
    is `ratio` in (0, 1]; antialiased downscaling widens the kernel by 1 / scale."""
    if mode not in ("linear", "cubic"):
        raise LegatoError(f"resize mode {mode!r} is not supported (nearest, linear, cubic)")
    support = 1 if mode == "linear" else 2
    scale = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-support / scale) + 1)
    distances = (np.arange(start, 2 - start) - ratio) * scale
    weights = np.clip(1 - np.abs(distances), 0, 1) if mode == "linear" else \
        _cubic(distances, cubic_a)
    return weights / weights.sum() if antialias else weights


def taps(coords: np.ndarray, size_in: int, mode: str, scale: float = 1.0,
         cubic_a: float = -0.75, exclude_outside: bool = False, antialias: bool = False
         ) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (size_out, taps): the input elements each output element
    sums and their weights; taps outside the input repeat the edge element."""
    rows, weights = [], []
    for x in coords:
        left = np.floor(x)
        ratio = 1.0 if x == left else x - left  # the tap left of x, even at an integer
        w = _coefficients(ratio, scale, mode, cubic_a, antialias)
        first = int(np.ceil(x)) - len(w) // 2
        index = np.arange(first, first + len(w))
        if exclude_outside:
            w = np.where((index >= 0) & (index < size_in), w, 0.0)
            w = w / w.sum()
        rows.append(np.clip(index, 0, size_in - 1))
        weights.append(w)
    return np.array(rows, np.int64), np.array(weights)


def resize_axis(b, x, axis: int, size_out: int, coords: np.ndarray, mode: str,
                nearest_mode: str = "round_prefer_floor", scale: float = 1.0,
                cubic_a: float = -0.75, exclude_outside: bool = False,
                antialias: bool = False):
    """x resampled along `axis` to `size_out` elements sampling input `coords`."""
    size_in = x.shape[axis]
    if size_out == 0:  # no output element, so no taps: an empty take
        return b.take(x, Const.of(np.zeros((0,), np.int64)), axis=axis)
    if mode == "nearest":
        return b.take(x, Const.of(nearest_indices(coords, nearest_mode, size_in)), axis=axis)
    if not x.dtype.startswith(("float", "bfloat")):
        raise LegatoError(f"{mode} resizing needs a float tensor, got {x.dtype}")
    index, weights = taps(coords, size_in, mode, scale, cubic_a, exclude_outside, antialias)
    shape = [1] * x.rank
    shape[axis] = size_out
    total = None
    for k in range(index.shape[1]):
        part = b.take(x, Const.of(index[:, k]), axis=axis)
        part = b.multiply(part, Const.of(weights[:, k].reshape(shape).astype(x.dtype)))
        total = part if total is None else b.add(total, part)
    return total
