"""ATen layer ops that eager-era entry points reach and the default decompositions leave:
`_convolution`; upsampling (the `.default` overloads: output sizes plus optional scales,
and the nearest and linear `.vec` ones through them), rounded as eager's CPU kernels
round, which is not always as PyTorch's own decompositions do; and random layers in eval
mode (`rrelu_with_noise`, `native_dropout`), which are then deterministic. They register
in ops.ATEN."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from ..common import resample
from .nn import convolution
from .ops import RANDOM, aten


@aten("aten._convolution.default", "aten._convolution.deprecated")
def convolution_(b, x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups, *backend_flags):
    """convolution; the flags (benchmark, deterministic, cudnn, tf32) choose eager's
    kernels, not what they compute."""
    return convolution(b, x, weight, bias, stride, padding, dilation, transposed,
                       output_padding, groups)


# --- upsampling to output sizes, the coordinates scaled by the given factors ----------------

def _factors(x, sizes, scales) -> list[float]:
    """Per resized axis, output/input as eager's kernels scale coordinates: the given
    factor, or the sizes' ratio where none (or a non-positive one) is given."""
    scales = [*(scales or ()), *[None] * (len(sizes) - len(scales or ()))]
    return [s if s is not None and s > 0 else size / n
            for s, size, n in zip(scales, sizes, x.shape[x.rank - len(sizes):])]


def _nearest(exact: bool, shortcuts: bool = False):
    """Output i takes input floor(i / scale) (exact: floor((i + 0.5) / scale)), in float32
    as eager's kernel computes it, so a boundary rounds as it does there. `shortcuts`:
    eager's 2-d nearest kernel takes an axis of the input's size as it is and one of twice
    its size as i // 2, whatever the scale says."""
    def convert(b, x, output_size, *scales):
        sizes = [int(s) for s in output_size]
        for k, (size, factor) in enumerate(zip(sizes, _factors(x, sizes, scales))):
            axis, step = x.rank - len(sizes) + k, np.float32(1.0 / factor)
            i = np.arange(size, dtype=np.float32)
            coords = np.float32((i + 0.5) * np.float64(step)) if exact else i * step
            index = np.minimum(np.floor(coords).astype(np.int64), x.shape[axis] - 1)
            if shortcuts and size in (x.shape[axis], 2 * x.shape[axis]):
                index = np.arange(size) * x.shape[axis] // size
            x = b.take(x, Const.of(index), axis=axis)
        return x
    return convert


def _interpolating(mode: str):
    """Linear or cubic taps at half-pixel coordinates (align_corners: corner to corner,
    whatever the scales say); a cubic axis of unchanged size is still resampled when its
    scale is not 1, as eager's bicubic kernel does."""
    def convert(b, x, output_size, align_corners, *scales):
        sizes = [int(s) for s in output_size]
        coordinates = "align_corners" if align_corners else "half_pixel"
        if align_corners:
            scales = None
        for k, (size, factor) in enumerate(zip(sizes, _factors(x, sizes, scales))):
            axis = x.rank - len(sizes) + k
            if size == x.shape[axis] and (mode == "linear" or factor == 1):
                continue  # eager's linear kernels copy an axis that keeps its size
            # a negative coordinate takes the edge, as eager clamps it to 0
            coords = resample.source_coordinates(coordinates, x.shape[axis], size, factor)
            x = resample.resize_axis(b, x, axis, size, coords, mode, scale=factor)
        return x
    return convert


def _vec(convert):
    """A `.vec` overload through its `.default` converter: the output sizes, or floor(n *
    factor) per axis with the factors passed on as the scales (interpolate's
    scale_factor=1.3 of 5 rows gives 6, sampled at i / 1.3 as eager does, not i * 5 / 6)."""
    def vec(b, x, output_size, *args):
        *flags, factors = args
        if output_size is not None:
            return convert(b, x, output_size, *flags)
        sizes = [math.floor(n * s) for n, s in zip(x.shape[x.rank - len(factors):], factors)]
        return convert(b, x, sizes, *flags, *factors)
    return vec


aten("aten.upsample_nearest1d.default", "aten.upsample_nearest3d.default")(_nearest(False))
aten("aten.upsample_nearest2d.default")(_nearest(False, shortcuts=True))
aten("aten.upsample_nearest2d.vec")(_vec(_nearest(False, shortcuts=True)))
aten("aten._upsample_nearest_exact1d.default", "aten._upsample_nearest_exact2d.default",
     "aten._upsample_nearest_exact3d.default")(_nearest(True))
aten("aten.upsample_linear1d.default", "aten.upsample_bilinear2d.default",
     "aten.upsample_trilinear3d.default")(_interpolating("linear"))
aten("aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec",
     "aten.upsample_trilinear3d.vec")(_vec(_interpolating("linear")))
aten("aten.upsample_bicubic2d.default")(_interpolating("cubic"))


# --- random layers in eval mode ---------------------------------------------------------------

@aten("aten.rrelu_with_noise.default")
def rrelu_with_noise(b, x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    """In eval a leaky relu of slope (lower + upper) / 2; training draws the slopes."""
    if training:
        raise LegatoError(f"rrelu in training mode (refused: {RANDOM}; call .eval())")
    return b.nn_leaky_relu(x, alpha=(lower + upper) / 2)


@aten("aten.rrelu_with_noise_functional.default")
def rrelu_with_noise_functional(b, x, noise, *args, **kwargs):
    """(result, noise): eval leaves the noise as it was."""
    return rrelu_with_noise(b, x, noise, *args, **kwargs), noise


@aten("aten.native_dropout.default")
def native_dropout(b, x, p, train):
    """(x, an all-True keep mask) in eval or with p = 0; training with p > 0 draws the
    mask."""
    if train and p > 0:
        raise LegatoError(f"dropout with p={p} in training mode (refused: {RANDOM}; call "
                          ".eval())")
    return x, Const.of(np.ones(x.shape, dtype=bool))
