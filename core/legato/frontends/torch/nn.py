"""ATen converters for activations with parameters, padding, the generic convolution,
resizing and adaptive pooling. They register in ops.ATEN."""
from __future__ import annotations

import math

from ...ir.errors import LegatoError
from ..common import conv_nd, resample
from .ops import ATEN, aten


# --- activations ----------------------------------------------------------------------------

@aten("aten.hardtanh.default")
def hardtanh(b, x, min_val=-1.0, max_val=1.0):
    return b.clip(x, min=min_val, max=max_val)


@aten("aten.clamp.Tensor")
def clamp_tensor(b, x, min=None, max=None):  # noqa: A002 - ATen's argument names
    y = x if min is None else b.maximum(x, min)
    return y if max is None else b.minimum(y, max)


@aten("aten.reciprocal.default")
def reciprocal(b, x):
    return ATEN["aten.div.Tensor"](b, 1.0, x)  # integers and bools: in float32


@aten("aten.relu6.default")
def relu6(b, x):
    return b.clip(x, min=0.0, max=6.0)


@aten("aten.leaky_relu.default")
def leaky_relu(b, x, negative_slope=0.01):
    return b.nn_leaky_relu(x, alpha=negative_slope)


@aten("aten.hardsigmoid.default")
def hardsigmoid(b, x):
    return b.nn_hardsigmoid(x, alpha=1 / 6, beta=0.5)


@aten("aten.elu.default")
def elu(b, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1)): ATen's elu carries
    selu's scale, and input_scale scales the negative branch's exponent only."""
    if input_scale == 1.0:
        y = b.nn_elu(x, alpha=alpha)
    else:
        y = b.where(b.greater(x, 0.0), x, b.multiply(b.expm1(b.multiply(x, input_scale)), alpha))
    return y if scale == 1.0 else b.multiply(y, scale)


@aten("aten.celu.default")
def celu(b, x, alpha=1.0):
    return b.nn_celu(x, alpha=alpha)


@aten("aten.softplus.default")
def softplus(b, x, beta=1.0, threshold=20.0):
    return b.nn_softplus(x, beta=beta, threshold=threshold)


@aten("aten.threshold.default")
def threshold(b, x, threshold, value):
    return b.where(b.greater(x, threshold), x, value)


@aten("aten.hardshrink.default")
def hardshrink(b, x, lambd=0.5):
    return b.nn_shrink(x, lambd=lambd, bias=0.0)


@aten("aten.softshrink.default")
def softshrink(b, x, lambd=0.5):
    return b.nn_shrink(x, lambd=lambd, bias=lambd)


_DIRECT_SIGN = ATEN["aten.sign.default"]


def sign(b, x):
    """torch's sign is 0 at NaN (`(0 < x) - (x < 0)`); legato's, as ONNX's, keeps NaN."""
    y = _DIRECT_SIGN(b, x)
    return b.where(b.isnan(x), 0.0, y) if x.dtype.startswith(("float", "bfloat")) else y


ATEN["aten.sign.default"] = sign  # the direct converter, wrapped


@aten("aten.prelu.default", "aten._prelu_kernel.default")
def prelu(b, x, weight):
    if weight.rank == 1 and weight.shape[0] > 1 and x.rank >= 2:  # one slope per channel
        weight = b.reshape(weight, shape=[weight.shape[0]] + [1] * (x.rank - 2))
    return b.nn_prelu(x, weight)


# --- padding ----------------------------------------------------------------------------------

@aten("aten.constant_pad_nd.default")
def constant_pad_nd(b, x, pad, value=0.0):
    """torch's pad list: (begin, end) pairs from the last dim backwards; negative values
    crop."""
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise LegatoError(f"pad {list(pad)} must be (begin, end) pairs for at most "
                          f"{x.rank} dims")
    begins, ends = [0] * x.rank, [0] * x.rank
    for k in range(len(pad) // 2):
        begins[x.rank - 1 - k], ends[x.rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    grow = [max(p, 0) for p in begins + ends]
    if any(grow):
        x = b.pad(x, pads=grow, value=float(value))
    if any(p < 0 for p in begins + ends):
        x = b.strided_slice(x, begin=[max(-p, 0) for p in begins],
                            end=[d - max(-p, 0) for d, p in zip(x.shape, ends)])
    return x


# --- convolution ------------------------------------------------------------------------------

@aten("aten.convolution.default")
def convolution(b, x, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    spatial = x.rank - 2
    if not 1 <= spatial <= 3:
        raise LegatoError(f"{spatial}-d convolution is not supported (1-d to 3-d)")
    stride, padding, dilation, output_padding = (
        list(v) * (spatial if len(v) == 1 else 1)
        for v in (stride, padding, dilation, output_padding))
    if transposed:
        return conv_nd.conv_transpose(b, x, weight, bias, stride, padding + padding,
                                      dilation, groups, output_padding)
    return conv_nd.conv(b, x, weight, bias, stride, padding + padding, dilation, groups)


# --- resizing ---------------------------------------------------------------------------------

def _resize(b, x, output_size, scale_factors, mode, coordinates, nearest_mode="floor"):
    """Resize the trailing dims: to `output_size`, or by `scale_factors` (which then also
    set the coordinate scale, as PyTorch computes it)."""
    spatial = len(output_size or scale_factors)
    axes = list(range(x.rank - spatial, x.rank))
    if output_size:
        sizes = [int(s) for s in output_size]
        scales = [s / x.shape[a] for a, s in zip(axes, sizes)]
    else:
        scales = [float(s) for s in scale_factors]
        sizes = [int(math.floor(x.shape[a] * s)) for a, s in zip(axes, scales)]
        if coordinates == "align_corners":  # torch aligns the corners of the whole sizes
            scales = [s / x.shape[a] for a, s in zip(axes, sizes)]
    for axis, size, scale in zip(axes, sizes, scales):
        if size == x.shape[axis] and scale == 1:
            continue
        coords = resample.source_coordinates(coordinates, x.shape[axis], size, scale)
        x = resample.resize_axis(b, x, axis, size, coords, mode, nearest_mode, scale)
    return x


@aten("aten.upsample_nearest1d.vec")  # 2-d: layers.py, as its kernel rounds
def upsample_nearest(b, x, output_size=None, scale_factors=None):
    return _resize(b, x, output_size, scale_factors, "nearest", "asymmetric", "floor")


@aten("aten._upsample_nearest_exact2d.vec", "aten._upsample_nearest_exact1d.vec")
def upsample_nearest_exact(b, x, output_size=None, scale_factors=None):
    return _resize(b, x, output_size, scale_factors, "nearest", "half_pixel",
                   "round_prefer_ceil")


@aten("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(b, x, output_size):
    """Output cell i of an axis averages input [floor(i * n / m), ceil((i + 1) * n / m)):
    an avg_pool2d when m divides n, else one mean per cell."""
    out = [x.shape[-2 + k] if s is None else int(s) for k, s in enumerate(output_size)]
    (h, w), (oh, ow) = x.shape[-2:], out
    if h % oh == 0 and w % ow == 0:
        if (oh, ow) == (1, 1):
            return b.mean(x, axes=[-2, -1], keepdims=True)
        return b.nn_avg_pool2d(x, pool_size=[h // oh, w // ow], strides=[h // oh, w // ow])
    for axis, (n, m) in ((x.rank - 2, (h, oh)), (x.rank - 1, (w, ow))):
        cells = [b.mean(b.strided_slice(x, begin=[i * n // m], end=[-(-(i + 1) * n // m)],
                                        axes=[axis]), axes=[axis], keepdims=True)
                 for i in range(m)]
        x = b.concat(*cells, axis=axis) if len(cells) > 1 else cells[0]
    return x
