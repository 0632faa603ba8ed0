"""Convolution and pooling (level 1), decomposed through pad + strided slices.

Convolution becomes im2col by slicing (one strided slice per kernel tap) and a matmul, so a
backend with only matmul and data movement still runs CNNs. Pools reduce the same slices.
"""
from __future__ import annotations

import numpy as np

from ..ir import TensorType
from . import layout_rules
from .base import composite, f32, fail, is_float, require_float, same_dtype

SPATIAL_AXES = {"NCHW": (2, 3), "NHWC": (1, 2)}
KERNEL_PERM_TO_OIHW = {"OIHW": None, "HWIO": [3, 2, 0, 1], "OHWI": [0, 3, 1, 2]}
WINDOW_ATTRS = {"strides": ("ints", [1, 1]), "padding": ("ints", [0, 0, 0, 0]),
                "dilation": ("ints", [1, 1]), "data_layout": ("str:NCHW|NHWC", "NCHW")}


def window_dims(size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int,
                ceil_mode: bool = False) -> int:
    """Output length of a sliding window (ONNX rules, incl. ceil_mode)."""
    span = dilation * (kernel - 1) + 1
    room = size + pad_lo + pad_hi - span
    if room < 0:
        fail(f"window of {span} (kernel {kernel}, dilation {dilation}) does not fit input "
             f"{size} with padding {pad_lo}+{pad_hi}")
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1  # the last window must start inside the input or the left padding
    return out


WINDOW_ATTR_LIMIT = 2**31  # bounds the index arithmetic of every backend


def _check_window_attrs(attrs, what: str):
    for key, n in (("strides", 2), ("padding", 4), ("dilation", 2)):
        value = attrs.get(key)
        low = 0 if key == "padding" else 1
        if value is not None and (len(value) != n or
                                  any(not low <= v < WINDOW_ATTR_LIMIT for v in value)):
            fail(f"{what} {key} {list(value)} must be {n} "
                 f"{'non-negative' if key == 'padding' else 'positive'} ints below 2**31")


def _check_kernel(kernel, what: str):
    if any(k < 1 for k in kernel):
        fail(f"{what} {list(kernel)} must be at least 1 in each spatial dim")


def _window_misses_input(size, kernel, stride, pad_lo, dilation, out) -> bool:
    """Whether some window of a sweep has no tap inside the input (only padding)."""
    span = dilation * (kernel - 1) + 1
    if span <= pad_lo or (out - 1) * stride >= pad_lo + size:  # the first or last window
        return True
    if dilation <= size:  # a window reaching the input cannot step over it
        return False
    # Windows starting in the left padding may step over an input narrower than the
    # dilation; where their first tap at or after pad_lo lands repeats with period
    # <= dilation, so that many windows (at most 2**20) decide it.
    count = min(-(-pad_lo // stride), out, dilation, 1 << 20)
    starts = np.arange(count, dtype=np.int64) * stride
    first_tap = starts - ((starts - pad_lo) // dilation) * dilation
    return bool(np.any(first_tap >= pad_lo + size))


def _check_windows_see_input(hw, attrs, out):
    """A pool window over padding alone has no defined value (an average of nothing)."""
    s, p, d = attrs["strides"], attrs["padding"], attrs["dilation"]
    for k, name in enumerate(("height", "width")):
        if _window_misses_input(hw[k], attrs["pool_size"][k], s[k], p[k], d[k], out[k]):
            fail(f"padding {list(p)} with pool_size {list(attrs['pool_size'])}, dilation "
                 f"{list(d)} and strides {list(s)} makes a window cover only padding along "
                 f"the {name} ({hw[k]}); keep each window on at least one input cell")


def out_hw(hw, kernel, attrs, ceil_mode=False):
    (h, w), (kh, kw) = hw, kernel
    s, p, d = attrs["strides"], attrs["padding"], attrs["dilation"]
    return (window_dims(h, kh, s[0], p[0], p[2], d[0], ceil_mode),
            window_dims(w, kw, s[1], p[1], p[3], d[1], ceil_mode))


def _layout(shape, layout):
    """(N, C, H, W) of a tensor shape in the given data layout."""
    return (shape[0], shape[1], shape[2], shape[3]) if layout == "NCHW" else \
        (shape[0], shape[3], shape[1], shape[2])


def _from_nchw(n, c, h, w, layout):
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def oihw_shape(shape, layout):
    perm = KERNEL_PERM_TO_OIHW[layout]
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def _conv2d(types, attrs):
    data, weight, bias = types
    if data.rank != 4 or weight.rank != 4:
        fail(f"data {list(data.shape)} and weight {list(weight.shape)} must be 4-D")
    if same_dtype(types) == "bool":
        fail("convolution needs numeric tensors, got bool")
    _check_window_attrs(attrs, "conv2d")
    n, c, h, w = _layout(data.shape, attrs["data_layout"])
    o, cg, kh, kw = oihw_shape(weight.shape, attrs["kernel_layout"])
    groups = attrs["groups"]
    if groups < 1 or c % groups or o % groups or cg != c // groups:
        fail(f"{c} input channels, weight {list(weight.shape)} ({attrs['kernel_layout']}) and "
             f"groups={groups} do not match (weight I must be C/groups)")
    if bias is not None and bias.shape != (o,):
        fail(f"bias {list(bias.shape)} must be ({o},)")
    _check_kernel((kh, kw), f"weight {list(weight.shape)} ({attrs['kernel_layout']}) kernel")
    oh, ow = out_hw((h, w), (kh, kw), attrs)
    return TensorType(_from_nchw(n, o, oh, ow, attrs["data_layout"]), data.dtype)


CONV_ATTRS = {**WINDOW_ATTRS, "groups": ("int", 1),
              "kernel_layout": ("str:OIHW|HWIO|OHWI", "OIHW")}


def window_slices(b, x, kernel, attrs, axes):
    """One strided slice per kernel tap, each covering every output position."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, attrs["strides"], attrs["dilation"]
    oh, ow = attrs["_out"]
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
    attrs = {"strides": strides, "padding": padding, "dilation": dilation}
    oh, ow = attrs["_out"] = out_hw((h, w), (kh, kw), attrs)
    x = pad_spatial(b, x, padding, (2, 3), 0.0)
    taps = [b.reshape(t, shape=[n, c, 1, oh * ow])
            for t in window_slices(b, x, (kh, kw), attrs, (2, 3))]
    cols = b.concat(*taps, axis=2) if len(taps) > 1 else taps[0]
    cols = b.reshape(cols, shape=[n, groups, cg * kh * kw, oh * ow])
    y = b.matmul(b.reshape(weight, shape=[groups, o // groups, cg * kh * kw]), cols)
    y = b.reshape(y, shape=[n, o, oh, ow])
    if bias is not None:
        y = b.add(y, b.reshape(bias, shape=[1, o, 1, 1]))
    return b.permute_dims(y, axes=[0, 2, 3, 1]) if data_layout == "NHWC" else y


# --- pooling ------------------------------------------------------------------------------

POOL_ATTRS = {"pool_size": ("ints",), "strides": ("ints?", None),
              "padding": ("ints", [0, 0, 0, 0]), "dilation": ("ints", [1, 1]),
              "ceil_mode": ("bool", False), "data_layout": ("str:NCHW|NHWC", "NCHW")}


def _pool_attrs(attrs) -> dict:
    full = dict(attrs)
    if full["strides"] is None:
        full["strides"] = full["pool_size"]
    return full


def _pool(types, attrs):
    (data,) = types
    if data.rank != 4:
        fail(f"data {list(data.shape)} must be 4-D")
    if data.dtype == "bool":
        fail("pooling needs a numeric tensor, got bool")
    attrs = _pool_attrs(attrs)
    if len(attrs["pool_size"]) != 2 or not all(1 <= k < WINDOW_ATTR_LIMIT
                                                for k in attrs["pool_size"]):
        fail(f"pool_size {list(attrs['pool_size'])} must be two positive ints below 2**31")
    _check_window_attrs(attrs, "pool")
    n, c, h, w = _layout(data.shape, attrs["data_layout"])
    oh, ow = out_hw((h, w), attrs["pool_size"], attrs, attrs["ceil_mode"])
    _check_windows_see_input((h, w), attrs, (oh, ow))
    return TensorType(_from_nchw(n, c, oh, ow, attrs["data_layout"]), data.dtype)


def _pool_taps(b, x, attrs, value):
    """Pad (explicit padding plus what ceil_mode's last window needs) and slice the taps."""
    attrs = _pool_attrs(attrs)
    axes = SPATIAL_AXES[attrs["data_layout"]]
    hw = (x.shape[axes[0]], x.shape[axes[1]])
    attrs["_out"] = out_hw(hw, attrs["pool_size"], attrs, attrs["ceil_mode"])
    pads = list(attrs["padding"])
    for k in range(2):  # extend bottom/right so every (ceil_mode) window is in range
        need = (attrs["_out"][k] - 1) * attrs["strides"][k] + \
            attrs["dilation"][k] * (attrs["pool_size"][k] - 1) + 1
        pads[k + 2] += max(0, need - (hw[k] + pads[k] + pads[k + 2]))
    x = pad_spatial(b, x, pads, axes, value)
    return window_slices(b, x, attrs["pool_size"], attrs, axes), pads, attrs


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


def _window_counts(hw, attrs, pads, count_include_pad) -> np.ndarray:
    """How many cells each window averages: explicit padding counts only if asked."""
    explicit = attrs["padding"]
    ones = np.pad(np.ones(hw), [(explicit[0], explicit[2]), (explicit[1], explicit[3])],
                  constant_values=1.0 if count_include_pad else 0.0)
    ones = np.pad(ones, [(0, pads[2] - explicit[2]), (0, pads[3] - explicit[3])])
    (oh, ow), (kh, kw) = attrs["_out"], attrs["pool_size"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
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
    taps, pads, full = _pool_taps(b, x, attrs, 0.0)
    total = _tree(b, "add", taps)
    axes = SPATIAL_AXES[full["data_layout"]]
    counts = _window_counts((x.shape[axes[0]], x.shape[axes[1]]), full, pads, count_include_pad)
    shape = [1] * 4
    shape[axes[0]], shape[axes[1]] = counts.shape
    return b.divide(total, b.const(counts.reshape(shape).astype(x.dtype)))

