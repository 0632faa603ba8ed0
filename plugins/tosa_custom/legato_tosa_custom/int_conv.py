"""An int32 convolution in profile pro_int: int8 CONV2D / DEPTHWISE_CONV2D of the data's
bytes.

ONNX ConvInteger (onnxruntime's quantize_dynamic on a CNN) imports as `nn.conv2d(
cast(x_uint8) - zero_point, weight_int8 - weight_zero_point)` in int32, the data's zero
point computed at run time (DynamicQuantizeLinear), the weight a constant. TOSA 1.0's
CONV2D takes int8 operands and constant zero points, and a rule sees only the int32
values, so the data is split into the balanced base-256 digits int_matmul uses, each
digit one int8 convolution with the weight, and the partial sums are added in int32
scaled by their place. Padding stays exact: a padded zero has zero digits, and each
digit's input zero point is 0. The weight must be a constant whose values span at most
256 (int8 after an offset, the convolution's weight zero point); the overflow and
top-digit limits of int_matmul hold here too. Other int32 convolutions are declined.
"""
from __future__ import annotations

import numpy as np
from legato.plugin_api import Const

from .int_matmul import _digits, int8_weight
from .limits import shaped_rule
from .quantized import conv_products, zero_point
from .rules import NCHW_TO_NHWC, NHWC_TO_NCHW, TO_OHWI, _fit_windows, _level_problem, \
    call_window, permute, reshape, splat
from .rules import conv2d as float_conv2d

INTEGERS = ("int32", "int64")


def _kind(call, w: Const) -> int | None:
    """conv_products' groups: 1, -1 for depthwise, the group count, None if grouped
    channels do not divide."""
    a = call.attrs
    groups, channels = a["groups"], call.inputs[0].shape[a["data_layout"].index("C")]
    if groups > 1 and groups == channels and w.shape[a["kernel_layout"].index("I")] == 1:
        return -1
    return groups


@shaped_rule
def conv2d(b, call):
    """int32 (int64: narrowed) nn.conv2d of a constant weight as int8 convolutions of the
    data's bytes; floats as pro_fp's rule."""
    x, w, bias = call.inputs
    if x.dtype not in INTEGERS:
        return float_conv2d(b, call)
    weight = int8_weight(np.asarray(w.data)) if isinstance(w, Const) else None
    a, win = call.attrs, call_window(call)
    if weight is None or _level_problem(win) or bias is not None and bias.dtype not in INTEGERS:
        return None
    w8, wz = weight
    groups = _kind(call, w)
    x = x if x.dtype == "int32" else b.cast(x, dtype="int32")
    x = permute(b, x, NCHW_TO_NHWC if a["data_layout"] == "NCHW" else None)
    w = permute(b, b.const(w8), TO_OHWI[a["kernel_layout"]])
    x, padding = _fit_windows(b, x, win)
    props = dict(strides=list(win.strides), padding=padding, dilation=list(win.dilation))
    zps = (b.const(zero_point(0, "int8")), b.const(zero_point(wz, "int8")))
    no_bias = b.const(np.zeros(w.shape[0], np.int32))
    total = None
    for place, digit in enumerate(_digits(b, x)):
        part = conv_products(b, digit, w, no_bias, groups, zps, props)
        if place:
            part = b.multiply(part, splat(b, part, 256 ** place, np.int32))
        total = part if total is None else b.add(total, part)
    if bias is not None:
        bias = bias if bias.dtype == "int32" else b.cast(bias, dtype="int32")
        total = b.add(total, reshape(b, bias, (1, 1, 1, bias.shape[0])))
    total = permute(b, total, NHWC_TO_NCHW if a["data_layout"] == "NCHW" else None)
    return total if call.outputs[0].dtype == "int32" else b.cast(total, dtype="int64")
