"""ONNX converters for convolution, pooling, normalization, softmax and quantization."""
from __future__ import annotations

import numpy as np

from ...ir import shapes
from ...ir import Const
from ...ir.errors import quote
from ...ops.conv import pad_spatial, window_slices
from ..common import conv_nd, resample
from .convert import converter, onnx_dtype

# --- window geometry ------------------------------------------------------------------------


def window_attrs(node, kernel):
    """strides, dilations and [begins..., ends...] pads of a sliding window, with auto_pad."""
    n, spatial = len(kernel), node.arg(0).shape[2:]
    strides = window_ints(node, "strides", n, 1)
    dilations = window_ints(node, "dilations", n, 1)
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads = window_ints(node, "pads", 2 * n, 0)
    # (the messages are made on failure only: this runs for every conv and pool of a model)
    if not (len(spatial) == n and all(k >= 1 for k in kernel)):
        node.fail(f"kernel_shape {list(kernel)} does not fit an input of shape "
                  f"{list(node.arg(0).shape)}")
    if auto_pad not in shapes.AUTO_PADS:
        node.fail(f"attribute 'auto_pad' = {quote(auto_pad)} is none of "
                  f"{', '.join(shapes.AUTO_PADS)}")
    return strides, dilations, list(shapes.auto_pads(auto_pad, spatial, kernel, strides,
                                                     dilations, pads))


def window_ints(node, name: str, count: int, least: int) -> list[int]:
    """A per-axis window attribute: `count` ints of at least `least` (default all `least`)."""
    values = list(node.attr(name, [least] * count))
    if not (len(values) == count and all(v >= least for v in values)):
        node.fail(f"attribute {name!r} = {values[:8]} must be {count} values of at least {least}")
    return values


def as_2d(node, x, kernel, strides, dilations, pads):
    """Lift a 1-D window op to 2-D (a height of 1); 2-D passes through."""
    if len(kernel) == 2:
        return x, kernel, strides, dilations, pads
    node.require(len(kernel) == 1, f"{len(kernel)}-D windows are not supported (1-D and 2-D)")
    x = node.call("expand_dims", x, axes=[2])
    return x, [1] + kernel, [1] + strides, [1] + dilations, [0, pads[0], 0, pads[1]]


def from_2d(node, y, rank: int):
    return node.call("squeeze", y, axes=[2]) if rank == 3 else y


def conv_attrs(node, kernel):
    strides, dilations, pads = window_attrs(node, kernel)
    return {"strides": strides, "dilation": dilations, "padding": pads,
            "groups": node.positive("group", 1)}


@converter("Conv")
def conv(node):
    x, w, bias = node.arg(0), node.arg(1), node.input(2)
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    attrs = conv_attrs(node, kernel)
    if len(kernel) == 3:
        return conv_nd.conv(node.b, x, w, bias, attrs["strides"], attrs["padding"],
                            attrs["dilation"], attrs["groups"])
    x2, _, strides, dilation, padding = as_2d(node, x, kernel, attrs["strides"],
                                              attrs["dilation"], attrs["padding"])
    if x.rank == 3:
        w = node.call("expand_dims", w, axes=[2])
    y = node.call("nn.conv2d", x2, w, bias, strides=strides, dilation=dilation,
                  padding=padding, groups=attrs["groups"])
    return from_2d(node, y, x.rank)


@converter("ConvTranspose")
def conv_transpose(node):
    x, w, bias = node.arg(0), node.arg(1), node.input(2)
    spatial = x.rank - 2
    node.require(1 <= spatial <= 3 and w.rank == x.rank, f"input {x.type} and weight "
                 f"{w.type} must be 1-D to 3-D NC... and (C, O/groups, k...)")
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    strides = window_ints(node, "strides", spatial, 1)
    dilations = window_ints(node, "dilations", spatial, 1)
    extra = list(node.attr("output_padding", [0] * spatial))
    auto_pad, shape = node.attr("auto_pad", "NOTSET"), node.attr("output_shape")
    full = [s * (n - 1) + e + (k - 1) * d + 1 for s, n, e, k, d in
            zip(strides, x.shape[2:], extra, kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = shape or [n * s for n, s in zip(x.shape[2:], strides)]
        total = [f - o for f, o in zip(full, shape)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        pads = small + big if auto_pad == "SAME_UPPER" else big + small
    elif shape is not None:  # the output is cut or zero-extended at the end
        pads = [0] * spatial + [f - o for f, o in zip(full, shape)]
    else:
        pads = window_ints(node, "pads", 2 * spatial, 0)
    return conv_nd.conv_transpose(node.b, x, w, bias, strides, pads, dilations,
                                  node.positive("group", 1), extra)


@converter("QLinearConv")
def qlinear_conv(node):
    ins = [node.arg(i) for i in range(8)] + [node.input(8)]
    kernel = list(node.attr("kernel_shape", ins[3].shape[2:]))
    node.require(len(kernel) == 2, "only 2-D QLinearConv is supported")
    return node.call("qnn.conv2d", *ins, **conv_attrs(node, kernel))


MAX_INDEX_TAPS = 1024   # MaxPool Indices are built from one comparison per kernel tap

# --- pooling --------------------------------------------------------------------------------

def pool2d(node, op, x, kernel, strides, dilations, pads, ceil_mode=None, **extra):
    ceil_mode = node.flag("ceil_mode", 0) if ceil_mode is None else ceil_mode
    return node.call(op, x, pool_size=kernel, strides=strides, dilation=dilations,
                     padding=pads, ceil_mode=ceil_mode, **extra)


def pool3d(node, op, x, kernel, strides, dilations, pads, **extra):
    """3-D max/average pooling as two 2-D pools, (H, W) then D: both are separable because
    padding and ceil_mode act per axis and the averaged count is a product over axes."""
    n, c, d, h, w = x.shape
    hw = node.call("reshape", x, shape=[n, c * d, h, w])
    hw = pool2d(node, op, hw, kernel[1:], strides[1:], dilations[1:],
                [pads[1], pads[2], pads[4], pads[5]], **extra)
    oh, ow = hw.shape[2:]
    y = node.call("reshape", hw, shape=[n, c, d, oh * ow])
    y = pool2d(node, op, y, [kernel[0], 1], [strides[0], 1], [dilations[0], 1],
               [pads[0], 0, pads[3], 0], **extra)
    return node.call("reshape", y, shape=[n, c, y.shape[2], oh, ow])


@converter("MaxPool", "AveragePool")
def pool(node):
    x, kernel = node.arg(0), list(node.attr("kernel_shape"))
    op = "nn.max_pool2d" if node.op == "MaxPool" else "nn.avg_pool2d"
    extra = {} if node.op == "MaxPool" else \
        {"count_include_pad": node.flag("count_include_pad", 0)}
    strides, dilations, pads = window_attrs(node, kernel)
    if len(kernel) == 3:
        node.require(not node.wants(1), "the Indices output of 3-D MaxPool is not supported")
        return pool3d(node, op, x, kernel, strides, dilations, pads, **extra)
    x2, kernel, strides, dilations, pads = as_2d(node, x, kernel, strides, dilations, pads)
    y = pool2d(node, op, x2, kernel, strides, dilations, pads, **extra)
    if not node.wants(1):
        return from_2d(node, y, x.rank)
    indices = max_pool_indices(node, x2, y, kernel, strides, dilations, pads)
    return from_2d(node, y, x.rank), from_2d(node, indices, x.rank)


def max_pool_indices(node, x, y, kernel, strides, dilations, pads):
    """MaxPool's Indices: the flat input index of each window's first maximum (the
    smallest index among the window's cells equal to the pooled value)."""
    node.budget(x.type.size, "MaxPool's Indices table")
    win = shapes.window(x.shape[2:], kernel, strides, dilations, pads,
                        node.flag("ceil_mode", 0))
    taps = win.kernel[0] * win.kernel[1]  # ceil mode's kernel larger than the map: cut
    node.require(taps <= MAX_INDEX_TAPS, f"MaxPool's Indices output for a kernel of {taps} "
                 f"taps is not supported (at most {MAX_INDEX_TAPS})")
    flat = node.b.const(np.arange(x.type.size, dtype=np.int64).reshape(x.shape))
    lowest = -np.inf if x.dtype.startswith(("float", "bfloat")) else np.iinfo(x.dtype).min
    # padded so that every window, ceil mode's last one too, is in range
    padded_x = pad_spatial(node.b, x, win.sweep_padding, (2, 3), float(lowest))
    padded_i = pad_spatial(node.b, flat, win.sweep_padding, (2, 3), -1.0)
    none = node.b.scalar(np.iinfo(np.int64).max, "int64")
    best = None
    for tap, index in zip(window_slices(node.b, padded_x, win, (2, 3)),
                          window_slices(node.b, padded_i, win, (2, 3))):
        candidate = node.call("where", node.call("equal", tap, y), index, none)
        best = candidate if best is None else node.call("minimum", best, candidate)
    if node.flag("storage_order", 0):  # column-major: look the row-major index up
        n, c, h, w = x.shape
        table = np.arange(x.type.size, dtype=np.int64).reshape(n, c, w, h).transpose(0, 1, 3, 2)
        best = node.call("take", node.b.const(table.ravel()), best)
    return best


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node):
    x = node.arg(0)
    op = "mean" if node.op == "GlobalAveragePool" else "max"
    return node.call(op, x, axes=list(range(2, x.rank)), keepdims=True)


# --- normalization --------------------------------------------------------------------------

@converter("BatchNormalization")
def batch_norm(node):
    x, scale, bias, mean, var = (node.arg(i) for i in range(5))
    epsilon = node.attr("epsilon", 1e-5)
    if not node.flag("training_mode", 0):
        return node.call("nn.batch_norm", x, scale, bias, mean, var, epsilon=epsilon)
    axes = [0] + list(range(2, x.rank))  # training: normalise with the batch statistics
    batch_mean = node.call("mean", x, axes=axes)
    batch_var = node.call("variance", x, axes=axes)
    y = node.call("nn.batch_norm", x, scale, bias, batch_mean, batch_var, epsilon=epsilon)
    momentum = node.attr("momentum", 0.9)

    def running(old, new):
        return node.call("add", node.call("multiply", old, momentum),
                         node.call("multiply", new, 1.0 - momentum))
    return y, running(mean, batch_mean), running(var, batch_var)


@converter("LayerNormalization")
def layer_norm(node):
    x, scale, bias = node.arg(0), node.arg(1), node.input(2)
    axis, epsilon = node.axis("axis", x.rank, -1), node.attr("epsilon", 1e-5)
    axes = list(range(axis, x.rank))
    y = node.call("nn.layer_norm", x, scale, bias, axes=axes, epsilon=epsilon)
    if not (node.wants(1) or node.wants(2)):
        return y
    mean = node.call("mean", x, axes=axes, keepdims=True)
    inv_std = node.call("rsqrt", node.call("add", node.call(
        "variance", x, axes=axes, keepdims=True), epsilon))
    return y, mean, inv_std


@converter("RMSNormalization")
def rms_norm(node):
    x = node.arg(0)
    axis = node.axis("axis", x.rank, -1)
    return node.call("nn.rms_norm", x, node.input(1), axes=list(range(axis, x.rank)),
                     epsilon=node.attr("epsilon", 1e-5))


@converter("GroupNormalization")
def group_norm(node):
    x, scale, bias = node.arg(0), node.arg(1), node.arg(2)
    node.require(x.rank >= 2, f"input of rank {x.rank} has no channel axis")
    groups, channels = node.positive("num_groups", 1), x.shape[1]
    for name, param in (("scale", scale), ("bias", bias)):
        node.require(param.shape in ((channels,), (groups,)) and channels % groups == 0,
                     f"{name} of shape {list(param.shape)} fits neither {channels} channels "
                     f"nor {groups} groups")
    if scale.shape[0] != channels:  # opset 18: one scale per group; legato's is per channel
        scale, bias = (per_group_to_channel(node, p, groups, channels) for p in (scale, bias))
    return node.call("nn.group_norm", x, scale, bias, num_groups=groups,
                     epsilon=node.attr("epsilon", 1e-5))


def per_group_to_channel(node, param, groups: int, channels: int):
    column = node.call("reshape", param, shape=[groups, 1])
    wide = node.call("broadcast_to", column, shape=[groups, channels // groups])
    return node.call("reshape", wide, shape=[channels])


@converter("InstanceNormalization")
def instance_norm(node):
    return node.call("nn.instance_norm", node.arg(0), node.arg(1), node.arg(2), epsilon=node.attr("epsilon", 1e-5))


@converter("Softmax", "LogSoftmax")
def softmax(node):
    op = "nn.softmax" if node.op == "Softmax" else "nn.log_softmax"
    return node.call(op, node.arg(0), axis=node.attr("axis", -1))


# --- quantization ---------------------------------------------------------------------------

QNN_DTYPES = ("int8", "uint8")
QUANT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-2**15, 2**15 - 1),
                "int32": (-2**31, 2**31 - 1)}


def quant_param(node, param, x, axis: int):
    """A scale or zero point shaped to broadcast against x: scalar, per-axis or blocked."""
    block = node.attr("block_size", 0)
    if param.rank == 0 or param.shape == (1,):
        return param
    if block:  # each scale covers `block` consecutive elements along `axis`
        node.budget(x.shape[axis], "the block index of a blocked quantization")
        index = np.arange(x.shape[axis]) // block
        return node.call("take", param, node.b.const(index), axis=axis)
    return node.call("reshape", param, shape=list(shapes.channel_view(param.shape[0], x.rank,
                                                                       axis)))


def quant_axis(node, x, *params) -> int:
    """The quantization axis; ONNX ignores it (whatever its value) when the scale and the
    zero point are per tensor."""
    if all(p is None or p.rank == 0 or p.shape == (1,) for p in params):
        return node.attr("axis", 1) % max(x.rank, 1)
    block = node.attr("block_size", 0)
    node.require(block >= 0, f"attribute 'block_size' = {block} is negative")
    return node.axis("axis", x.rank, 1)


@converter("QuantizeLinear")
def quantize(node):
    x, scale, zero = node.arg(0), node.arg(1), node.input(2)
    axis = quant_axis(node, x, scale, zero)
    dtype = zero.dtype if zero is not None else _output_dtype(node, "uint8")
    if zero is None:
        zero = node.b.const(np.zeros(scale.shape, dtype=dtype))
    if dtype in QNN_DTYPES and not node.attr("block_size", 0):
        return node.call("qnn.quantize", x, scale, zero, axis=axis, dtype=dtype)
    node.require(dtype in QUANT_RANGES, f"quantizing to {dtype} is not supported")
    lo, hi = QUANT_RANGES[dtype]
    q = node.call("round", node.call("divide", x, quant_param(node, scale, x, axis)))
    q = node.call("add", q, node.call("cast", quant_param(node, zero, x, axis), dtype=x.dtype))
    return node.call("cast", node.call("clip", q, min=float(lo), max=float(hi)), dtype=dtype)


@converter("DequantizeLinear")
def dequantize(node):
    x, scale, zero = node.arg(0), node.arg(1), node.input(2)
    axis = quant_axis(node, x, scale, zero)
    if zero is None:
        zero = node.b.const(np.zeros(scale.shape, dtype=x.dtype))
    if x.dtype in QUANT_RANGES and x.dtype != "int16" and not node.attr("block_size", 0):
        y = node.call("qnn.dequantize", x, scale, zero, axis=axis)
    else:
        y = node.call("multiply", node.call("subtract", node.call("cast", x, dtype=scale.dtype),
                                            node.call("cast", quant_param(node, zero, x, axis),
                                                      dtype=scale.dtype)),
                      quant_param(node, scale, x, axis))
    out = _output_dtype(node, y.dtype)
    return y if out == y.dtype else node.call("cast", y, dtype=out)


def _output_dtype(node, default: str) -> str:
    code = node.attr("output_dtype", 0)
    return onnx_dtype(code, "attribute 'output_dtype'") if code else default



# --- activations ----------------------------------------------------------------------------

def _activation(op: str, **defaults):
    """An activation whose ONNX attributes are the op's, under the same names."""
    def convert(node):
        return node.call(op, node.arg(0), **{k: node.attr(k, v) for k, v in defaults.items()})
    return convert


converter("Elu")(_activation("nn.elu", alpha=1.0))
converter("Celu")(_activation("nn.celu", alpha=1.0))
converter("Selu")(_activation("nn.selu", alpha=1.67326319217681884765625,
                              gamma=1.05070102214813232421875))
converter("HardSigmoid")(_activation("nn.hardsigmoid", alpha=0.2, beta=0.5))
converter("ThresholdedRelu")(_activation("nn.thresholded_relu", alpha=1.0))
converter("Shrink")(_activation("nn.shrink", lambd=0.5, bias=0.0))
converter("Softplus")(_activation("nn.softplus"))


# --- resizing ---------------------------------------------------------------------------------

@converter("Resize", const_inputs=(1, 2, 3))
def resize(node):
    x = node.arg(0)
    mode = node.attr("mode", "nearest")
    axes = [shapes.norm_axis(a, x.rank) for a in node.attr("axes", range(x.rank))]
    scales, sizes = node.const(2), node.ints(3)
    scales = None if scales is None or scales.size == 0 else [float(s) for s in scales]
    node.require((scales is None) != (sizes is None), "exactly one of scales and sizes must "
                                                      "be given")
    node.require(len(scales or sizes) == len(axes), f"{len(scales or sizes)} scales or "
                 f"sizes for {len(axes)} axes")
    inputs = [x.shape[a] for a in axes]
    if sizes is not None:
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            scales = [s / d for s, d in zip(sizes, inputs)]
        else:
            node.require(policy in ("not_larger", "not_smaller"), f"keep_aspect_ratio_policy "
                         f"{quote(policy)} is none of stretch, not_larger, not_smaller")
            pick = min if policy == "not_larger" else max
            scale = pick(s / d for s, d in zip(sizes, inputs))
            scales = [scale] * len(axes)
            sizes = [int(np.floor(scale * d + 0.5)) for d in inputs]
    else:
        sizes = [int(np.floor(d * s)) for d, s in zip(inputs, scales)]
    node.require(all(s > 0 for s in scales), f"scales {scales} must be positive")
    roi = node.const(1)
    rois = [(0.0, 1.0)] * len(axes)
    if roi is not None and roi.size:
        node.require(roi.size == 2 * len(axes), f"roi must hold starts and ends of the "
                                                f"{len(axes)} axes, not {roi.size} values")
        rois = list(zip(roi.reshape(2, -1)[0].tolist(), roi.reshape(2, -1)[1].tolist()))
    options = dict(mode=mode, coordinates=node.attr("coordinate_transformation_mode",
                                                    "half_pixel"),
                   nearest_mode=node.attr("nearest_mode", "round_prefer_floor"),
                   cubic_a=node.attr("cubic_coeff_a", -0.75),
                   exclude_outside=bool(node.attr("exclude_outside", 0)),
                   antialias=bool(node.attr("antialias", 0)),
                   extrapolation=node.attr("extrapolation_value", 0.0))
    for axis, size, scale, region in zip(axes, sizes, scales, rois):
        x = resize_one(node.b, x, axis, size, scale, region, **options)
    return x


def resize_one(b, x, axis, size, scale, roi, mode, coordinates, nearest_mode="floor",
               cubic_a=-0.75, exclude_outside=False, antialias=False, extrapolation=0.0):
    """x resized along `axis` (unchanged when it keeps its size at scale 1 and the whole
    region); tf_crop_and_resize writes `extrapolation` where it samples outside."""
    if size == x.shape[axis] and scale == 1 and tuple(roi) == (0.0, 1.0):
        return x
    coords = resample.source_coordinates(coordinates, x.shape[axis], size, scale, roi)
    y = resample.resize_axis(b, x, axis, size, coords, mode, nearest_mode, scale, cubic_a,
                             exclude_outside, antialias and scale < 1)
    if coordinates != "tf_crop_and_resize":
        return y
    outside = (coords < 0) | (coords > x.shape[axis] - 1)
    if not outside.any():
        return y
    shape = [1] * x.rank
    shape[axis] = size
    return b.call("where", Const.of(outside.reshape(shape)), extrapolation, y)


@converter("Upsample", const_inputs=(1,))
def upsample(node):
    x, mode = node.arg(0), node.attr("mode", "nearest")
    scales = [float(s) for s in node.const(1)]
    node.require(len(scales) == x.rank, f"{len(scales)} scales for rank {x.rank}")
    for axis, scale in enumerate(scales):
        x = resize_one(node.b, x, axis, int(np.floor(x.shape[axis] * scale)), scale,
                       (0.0, 1.0), mode, "asymmetric", "floor")
    return x


# --- Lp pooling, LRN, integer matmul ----------------------------------------------------------

def _power_sum(node, x, p):
    return node.call("abs", x) if p == 1 else node.call("multiply", x, x) if p == 2 else \
        node.call("power", node.call("abs", x), float(p))


def _root(node, x, p):
    return x if p == 1 else node.call("sqrt", x) if p == 2 else \
        node.call("power", x, 1.0 / p)


@converter("GlobalLpPool")
def global_lp_pool(node):
    x, p = node.arg(0), node.attr("p", 2)
    axes = list(range(2, x.rank))
    return _root(node, node.call("sum", _power_sum(node, x, p), axes=axes, keepdims=True), p)


@converter("LpPool")
def lp_pool(node):
    """(sum over the window of |x|^p)^(1/p). The input is zero-padded so that every window,
    ceil mode's overhanging last one too, lies whole inside it: a window's sum is then its
    average over the full kernel times the kernel's size."""
    x, p = node.arg(0), node.attr("p", 2)
    kernel = list(node.attr("kernel_shape"))
    strides, dilations, pads = window_attrs(node, kernel)
    n = len(kernel)
    win = shapes.window(x.shape[2:], kernel, strides, dilations, pads,
                        node.flag("ceil_mode", 0), what="LpPool")
    sweep, kernel, strides = win.sweep_padding, list(win.kernel), list(win.strides)
    padding = [0, 0, *sweep[:n], 0, 0, *sweep[n:]]
    powered = _power_sum(node, x, p)
    if any(padding):
        powered = node.call("pad", powered, pads=padding, value=0.0)
    whole = dict(count_include_pad=True, ceil_mode=False)
    if n == 3:
        sums = pool3d(node, "nn.avg_pool2d", powered, kernel, strides, dilations, [0] * 6,
                      **whole)
        return _root(node, node.call("multiply", sums, float(np.prod(kernel))), p)
    powered, kernel, strides, dilations, _ = as_2d(node, powered, kernel, strides,
                                                   dilations, [0] * 2 * n)
    sums = pool2d(node, "nn.avg_pool2d", powered, kernel, strides, dilations, [0] * 4,
                  **whole)
    sums = node.call("multiply", sums, float(kernel[0] * kernel[1]))
    return from_2d(node, _root(node, sums, p), x.rank)


@converter("LRN")
def lrn(node):
    """x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ^ beta."""
    x, size = node.arg(0), node.positive("size", 1)
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    channels = x.shape[1]
    pads = [0] * (2 * x.rank)
    pads[1], pads[x.rank + 1] = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = node.call("pad", node.call("multiply", x, x), pads=pads)
    total = None
    for k in range(size):
        part = node.call("strided_slice", squares, begin=[k], end=[k + channels], axes=[1])
        total = part if total is None else node.call("add", total, part)
    scale = node.call("add", node.call("multiply", total, alpha / size), bias)
    return node.call("divide", x, node.call("power", scale, float(beta)))


def _shifted_const(data, zero, axis: int) -> np.ndarray:
    """`int32(data) - zero_point` of a constant (a weight), computed here: the compile's
    constant folding stops at 2**20 elements, and a weight left as a cast and subtract
    at run time is an int32 operand no backend can tell came from int8 (tosa_custom's
    int8 MATMULs need the constant)."""
    data = np.asarray(data, np.int32)
    if zero is None:
        return data
    zero = np.asarray(zero.data, np.int32)
    if zero.ndim == 1 and zero.shape[0] > 1:  # per column of b
        shape = [1] * data.ndim
        shape[axis] = zero.shape[0]
        zero = zero.reshape(shape)
    return data - zero


@converter("MatMulInteger")
def matmul_integer(node):
    a, b = node.arg(0), node.arg(1)

    def shifted(x, zero, axis):
        if isinstance(x, Const) and (zero is None or isinstance(zero, Const)):
            return node.b.const(_shifted_const(x.data, zero, axis))
        x = node.call("cast", x, dtype="int32")
        if zero is None:
            return x
        zero = node.call("cast", zero, dtype="int32")
        if zero.rank == 1 and zero.shape[0] > 1:  # per row of a, per column of b
            shape = [1] * x.rank
            shape[axis] = zero.shape[0]
            zero = node.call("reshape", zero, shape=shape)
        return node.call("subtract", x, zero)
    return node.call("matmul", shifted(a, node.input(2), -2), shifted(b, node.input(3), -1))
