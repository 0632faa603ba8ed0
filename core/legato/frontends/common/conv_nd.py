"""Convolutions the core has no op for, written with nn.conv2d: 1-D as 2-D of height one,
3-D as a sum of 2-D convolutions over the depth taps, and transposed convolution (any of
these) as a stride-1 convolution of the input with zeros inserted between its elements,
padded by the kernel's reach, with the kernel flipped and its channel axes swapped."""
from __future__ import annotations

from ...ir.errors import LegatoError


def pad_axis(b, x, axis: int, before: int, after: int):
    """Pad (positive) or crop (negative) `axis` at both ends."""
    if before > 0 or after > 0:
        pads = [0] * (2 * x.rank)
        pads[axis], pads[x.rank + axis] = max(before, 0), max(after, 0)
        x = b.pad(x, pads=pads)
    if before < 0 or after < 0:
        x = b.strided_slice(x, begin=[max(-before, 0)],
                            end=[x.shape[axis] - max(-after, 0)], axes=[axis])
    return x


def zero_insert(b, x, axis: int, stride: int):
    """stride - 1 zeros between neighbours along `axis`: n -> (n - 1) * stride + 1."""
    if stride == 1 or x.shape[axis] == 0:
        return x
    n = x.shape[axis]
    y = b.expand_dims(x, axes=[axis + 1])
    y = pad_axis(b, y, axis + 1, 0, stride - 1)
    shape = list(x.shape)
    shape[axis] = n * stride
    y = b.reshape(y, shape=shape)
    return b.strided_slice(y, begin=[0], end=[(n - 1) * stride + 1], axes=[axis])


def conv(b, x, w, bias, strides, pads, dilations, groups):
    """N-d convolution (1 to 3 spatial dims) of NC... data with OI... weights; `pads` is
    all begins then all ends."""
    spatial = x.rank - 2
    if spatial == 2:
        return b.nn_conv2d(x, w, bias, strides=list(strides), padding=list(pads),
                           dilation=list(dilations), groups=groups)
    if spatial == 1:  # height one
        y = b.nn_conv2d(b.expand_dims(x, axes=[2]), b.expand_dims(w, axes=[2]), bias,
                        strides=[1, strides[0]], padding=[0, pads[0], 0, pads[1]],
                        dilation=[1, dilations[0]], groups=groups)
        return b.squeeze(y, axes=[2])
    if spatial == 3:
        return _conv3d(b, x, w, bias, strides, pads, dilations, groups)
    raise LegatoError(f"{spatial}-d convolution is not supported (1-d to 3-d)")


def _conv3d(b, x, w, bias, strides, pads, dilations, groups):
    """Output depth d sums, over the depth taps k, the 2-D convolution of input depth
    d * stride + k * dilation with the weights' depth slice k (depths batched)."""
    x = pad_axis(b, x, 2, pads[0], pads[3])
    n, c, depth = x.shape[:3]
    taps, (sd, dd) = w.shape[2], (strides[0], dilations[0])
    out_depth = (depth - dd * (taps - 1) - 1) // sd + 1
    if out_depth <= 0:
        raise LegatoError(f"a kernel of depth {taps} does not fit a depth of {depth}")
    total = None
    for k in range(taps):
        start = k * dd
        part = b.strided_slice(x, begin=[start], end=[start + (out_depth - 1) * sd + 1],
                               strides=[sd], axes=[2])
        part = b.reshape(b.permute_dims(part, axes=[0, 2, 1, 3, 4]),
                         shape=[n * out_depth, c] + list(x.shape[3:]))
        kernel = b.squeeze(b.strided_slice(w, begin=[k], end=[k + 1], axes=[2]), axes=[2])
        y = b.nn_conv2d(part, kernel, None, strides=list(strides[1:]),
                        padding=[pads[1], pads[2], pads[4], pads[5]],
                        dilation=list(dilations[1:]), groups=groups)
        total = y if total is None else b.add(total, y)
    o, oh, ow = total.shape[1:]
    y = b.permute_dims(b.reshape(total, shape=[n, out_depth, o, oh, ow]),
                       axes=[0, 2, 1, 3, 4])
    return y if bias is None else b.add(y, b.reshape(bias, shape=[o, 1, 1, 1]))


def conv_transpose(b, x, w, bias, strides, pads, dilations, groups, output_padding=None):
    """Transposed convolution of NC... data with (C, O/groups, k...) weights; the output
    length per axis is (n - 1) * stride - pad_begin - pad_end + dilation * (k - 1) +
    output_padding + 1 (a negative pad adds zeros)."""
    spatial = x.rank - 2
    output_padding = list(output_padding or [0] * spatial)
    c, out_per_group = w.shape[:2]
    if c != x.shape[1] or c % groups:
        raise LegatoError(f"weight {w.type} does not fit {x.shape[1]} input channels in "
                          f"{groups} groups")
    kernel = list(w.shape[2:])
    # (C, O/g, k...) -> (O, C/g, k...) with every spatial axis reversed
    w = b.reshape(w, shape=[groups, c // groups, out_per_group] + kernel)
    w = b.permute_dims(w, axes=[0, 2, 1] + list(range(3, 3 + spatial)))
    w = b.reshape(w, shape=[groups * out_per_group, c // groups] + kernel)
    w = b.strided_slice(w, begin=[-1] * spatial, end=[-(1 << 62)] * spatial,
                        strides=[-1] * spatial, axes=list(range(2, 2 + spatial)))
    for i in range(spatial):
        axis = 2 + i
        x = zero_insert(b, x, axis, strides[i])
        reach = dilations[i] * (kernel[i] - 1)
        x = pad_axis(b, x, axis, reach - pads[i], reach - pads[spatial + i] +
                     output_padding[i])
    return conv(b, x, w, bias, [1] * spatial, [0] * (2 * spatial), dilations, groups)
