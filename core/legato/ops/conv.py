"""Convolution and pooling (level 1), decomposed through pad + strided slices.

Convolution becomes im2col by slicing (one strided slice per kernel tap) and a matmul, so a
backend with only matmul and data movement still runs CNNs. Pools reduce the same slices.
"""
from __future__ import annotations

import numpy as np

from .. import shapes
from ..ir import TensorType
from ..shapes import Window, channel_view
from . import layout_rules
from .base import composite, f32, fail, is_float, require_float, same_dtype

SPATIAL_AXES = {"NCHW": (2, 3), "NHWC": (1, 2)}
KERNEL_PERM_TO_OIHW = {"OIHW": None, "HWIO": [3, 2, 0, 1], "OHWI": [0, 3, 1, 2]}
WINDOW_ATTRS = {"strides": ("ints", [1, 1]), "padding": ("ints", [0, 0, 0, 0]),
                "dilation": ("ints", [1, 1]), "data_layout": ("str:NCHW|NHWC", "NCHW")}


def _layout(shape, layout):
    """(N, C, H, W) of a tensor shape in the given data layout."""
    return (shape[0], shape[1], shape[2], shape[3]) if layout == "NCHW" else \
        (shape[0], shape[3], shape[1], shape[2])


def _from_nchw(n, c, h, w, layout):
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def oihw_shape(shape, layout):
    perm = KERNEL_PERM_TO_OIHW[layout]
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def conv_window(data_shape, weight_shape, attrs) -> Window:
    """The validated geometry of an nn.conv2d (or qnn.conv2d) call."""
    _, _, h, w = _layout(data_shape, attrs["data_layout"])
    _, _, kh, kw = oihw_shape(weight_shape, attrs["kernel_layout"])
    return shapes.window((h, w), (kh, kw), attrs["strides"], attrs["dilation"],
                         attrs["padding"], what="conv2d",
                         kernel_name=f"weight {list(weight_shape)} ({attrs['kernel_layout']}) "
                                     "kernel")


def _conv2d(types, attrs):
    data, weight, bias = types
    if data.rank != 4 or weight.rank != 4:
        fail(f"data {list(data.shape)} and weight {list(weight.shape)} must be 4-D")
    if same_dtype(types) == "bool":
        fail("convolution needs numeric tensors, got bool")
    n, c, _, _ = _layout(data.shape, attrs["data_layout"])
    o, cg, _, _ = oihw_shape(weight.shape, attrs["kernel_layout"])
    groups = attrs["groups"]
    if groups < 1 or c % groups or o % groups or cg != c // groups:
        fail(f"{c} input channels, weight {list(weight.shape)} ({attrs['kernel_layout']}) and "
             f"groups={groups} do not match (weight I must be C/groups)")
    if bias is not None and bias.shape != (o,):
        fail(f"bias {list(bias.shape)} must be ({o},)")
    oh, ow = conv_window(data.shape, weight.shape, attrs).out
    return TensorType(_from_nchw(n, o, oh, ow, attrs["data_layout"]), data.dtype)


CONV_ATTRS = {**WINDOW_ATTRS, "groups": ("int", 1),
              "kernel_layout": ("str:OIHW|HWIO|OHWI", "OIHW")}


def window_slices(b, x, win: Window, axes):
    """One strided slice per kernel tap of x (padded by at least win.padding), each
    covering every output position."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = win.kernel, win.strides, win.dilation, win.out
    taps = []
    for i in range(kh):
        for j in range(kw):
            begin = [i * dh, j * dw]
            end = [begin[0] + (oh - 1) * sh + 1, begin[1] + (ow - 1) * sw + 1]
            full = begin == [0, 0] and end == [x.shape[axes[0]], x.shape[axes[1]]] \
                and (sh, sw) == (1, 1)
            taps.append(x if full else b.strided_slice(x, begin=begin, end=end,
                                                        strides=[sh, sw], axes=list(axes)))
    return taps


def pad_spatial(b, x, pads_hw, axes, value):
    """Pad the two spatial axes by (top, left, bottom, right)."""
    if not any(pads_hw):
        return x
    pads = [0] * (2 * x.rank)
    top, left, bottom, right = pads_hw
    pads[axes[0]], pads[axes[1]] = top, left
    pads[x.rank + axes[0]], pads[x.rank + axes[1]] = bottom, right
    return b.pad(x, pads=pads, value=value)


@composite("nn.conv2d", "data, weight, bias?", _conv2d, "out_elemwise_fusable", 1,
           [((f32(1, 4, 5, 5), f32(6, 2, 3, 3), f32(6)),
             {"padding": [1, 1, 1, 1], "groups": 2, "strides": [2, 1]}),
            ((f32(1, 5, 5, 4), f32(3, 3, 4, 6), None),
             {"data_layout": "NHWC", "kernel_layout": "HWIO", "dilation": [2, 2]})],
           CONV_ATTRS, layout_rule=layout_rules.data_layout)
def conv2d(b, x, weight, bias, strides, padding, dilation, groups, data_layout, kernel_layout):
    """2-D convolution; padding `[top, left, bottom, right]`; `data_layout` NCHW or NHWC,
    `kernel_layout` OIHW, HWIO or OHWI (its `I` is `C / groups`); the result in
    `data_layout`"""
    if data_layout == "NHWC":
        x = b.permute_dims(x, axes=[0, 3, 1, 2])
    if KERNEL_PERM_TO_OIHW[kernel_layout]:
        weight = b.permute_dims(weight, axes=KERNEL_PERM_TO_OIHW[kernel_layout])
    (n, c, h, w), (o, cg, kh, kw) = x.shape, weight.shape
    win = shapes.window((h, w), (kh, kw), strides, dilation, padding)
    oh, ow = win.out
    x = pad_spatial(b, x, win.padding, (2, 3), 0.0)
    taps = [b.reshape(t, shape=[n, c, 1, oh * ow]) for t in window_slices(b, x, win, (2, 3))]
    cols = b.concat(*taps, axis=2) if len(taps) > 1 else taps[0]
    cols = b.reshape(cols, shape=[n, groups, cg * kh * kw, oh * ow])
    y = b.matmul(b.reshape(weight, shape=[groups, o // groups, cg * kh * kw]), cols)
    y = b.reshape(y, shape=[n, o, oh, ow])
    if bias is not None:
        y = b.add(y, b.reshape(bias, shape=list(channel_view(o, 4, 1))))
    return b.permute_dims(y, axes=[0, 2, 3, 1]) if data_layout == "NHWC" else y


# --- pooling ------------------------------------------------------------------------------

POOL_ATTRS = {"pool_size": ("ints",), "strides": ("ints?", None),
              "padding": ("ints", [0, 0, 0, 0]), "dilation": ("ints", [1, 1]),
              "ceil_mode": ("bool", False), "data_layout": ("str:NCHW|NHWC", "NCHW")}


def pool_window(data_shape, attrs) -> Window:
    """The validated geometry of an nn.max_pool2d / nn.avg_pool2d call. A window over
    padding alone has no defined value (an average of nothing), so it is refused."""
    _, _, h, w = _layout(data_shape, attrs["data_layout"])
    win = shapes.window((h, w), attrs["pool_size"], attrs["strides"], attrs["dilation"],
                        attrs["padding"], attrs["ceil_mode"], what="pool",
                        kernel_name="pool_size")
    axis = win.blind_axis()
    if axis is not None:
        fail(f"padding {list(win.padding)} with pool_size {list(win.kernel)}, dilation "
             f"{list(win.dilation)} and strides {list(win.strides)} makes a window cover only "
             f"padding along the {('height', 'width')[axis]} ({win.spatial_in[axis]}); keep "
             "each window on at least one input cell")
    return win


def _pool(types, attrs):
    (data,) = types
    if data.rank != 4:
        fail(f"data {list(data.shape)} must be 4-D")
    if data.dtype == "bool":
        fail("pooling needs a numeric tensor, got bool")
    n, c, _, _ = _layout(data.shape, attrs["data_layout"])
    oh, ow = pool_window(data.shape, attrs).out
    return TensorType(_from_nchw(n, c, oh, ow, attrs["data_layout"]), data.dtype)


def _pool_taps(b, x, attrs, value):
    """The window taps of x padded with `value` (explicit padding plus what ceil mode's
    last window needs), and the window."""
    win = pool_window(x.shape, attrs)
    axes = SPATIAL_AXES[attrs["data_layout"]]
    x = pad_spatial(b, x, win.sweep_padding, axes, value)
    return window_slices(b, x, win, axes), win


def _tree(b, op, values):
    while len(values) > 1:
        values = [b.call(op, *values[i:i + 2]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


POOL_EXAMPLES = [((f32(1, 2, 5, 5),), {"pool_size": [2, 2], "ceil_mode": True}),
                 ((f32(1, 5, 5, 2),), {"pool_size": [3, 3], "strides": [1, 1],
                                       "padding": [1, 1, 1, 1], "data_layout": "NHWC"})]


@composite("nn.max_pool2d", "data", _pool, "opaque", 1, POOL_EXAMPLES, POOL_ATTRS,
           tolerance=0.0, layout_rule=layout_rules.data_layout)
def max_pool2d(b, x, **attrs):
    """the maximum of each window; `strides=None` is `pool_size`; padded cells are `-inf`
    """
    lowest = float("-inf") if is_float(x.dtype) else float(np.iinfo(x.dtype).min)
    return _tree(b, "maximum", _pool_taps(b, x, attrs, lowest)[0])


def _window_counts(win: Window, count_include_pad: bool) -> np.ndarray:
    """How many cells each window averages: explicit padding counts only if asked, the
    ceil-mode overhang never."""
    (top, left), (bottom, right) = win.pads_begin, win.pads_end
    ones = np.pad(np.ones(win.spatial_in), [(top, bottom), (left, right)],
                  constant_values=1.0 if count_include_pad else 0.0)
    ones = np.pad(ones, [(0, win.overhang[0]), (0, win.overhang[1])])
    (oh, ow), (kh, kw) = win.out, win.kernel
    (sh, sw), (dh, dw) = win.strides, win.dilation
    counts = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            counts += ones[i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
    return counts


def _avg_pool(types, attrs):
    require_float(types[0])  # ONNX AveragePool is float-only; integer sums would wrap
    return _pool(types, attrs)


@composite("nn.avg_pool2d", "data", _avg_pool, "opaque", 1, POOL_EXAMPLES,
           {**POOL_ATTRS, "count_include_pad": ("bool", False)},
           layout_rule=layout_rules.data_layout)
def avg_pool2d(b, x, count_include_pad, **attrs):
    """ONNX AveragePool: the mean of each window, padded cells counted only with
    `count_include_pad`"""
    taps, win = _pool_taps(b, x, attrs, 0.0)
    total = _tree(b, "add", taps)
    axes = SPATIAL_AXES[attrs["data_layout"]]
    counts = _window_counts(win, count_include_pad)
    shape = [1] * 4
    shape[axes[0]], shape[axes[1]] = counts.shape
    return b.divide(total, b.const(counts.reshape(shape).astype(x.dtype)))

