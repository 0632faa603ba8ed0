"""ATen converters for activations with parameters, padding and the generic convolution.
They register in torch_ops.ATEN."""
from __future__ import annotations

from ..errors import LegatoError
from .torch_ops import aten


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
    return b.divide(1.0, x)


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
    if input_scale != 1.0:
        x = b.multiply(x, input_scale)
    y = b.nn_elu(x, alpha=alpha)  # ATen's elu carries selu's scale and input_scale
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
    if transposed:
        raise LegatoError("transposed convolution is not supported yet")
    spatial = x.rank - 2
    if spatial not in (1, 2):
        raise LegatoError(f"{spatial}-d convolution is not supported (1-d and 2-d)")
    stride, padding, dilation = (list(v) * (spatial if len(v) == 1 else 1)
                                 for v in (stride, padding, dilation))
    if spatial == 1:  # as a 2-d convolution of height 1
        x = b.expand_dims(x, axes=[2])
        weight = b.expand_dims(weight, axes=[2])
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
    y = b.nn_conv2d(x, weight, bias, strides=stride, padding=padding + padding,
                    dilation=dilation, groups=groups)
    return b.squeeze(y, axes=[2]) if spatial == 1 else y
