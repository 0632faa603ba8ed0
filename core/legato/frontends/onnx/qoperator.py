"""onnxruntime's quantized operators (domain `com.microsoft`), as its quantization tool writes
them in the QOperator format: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat and QLinearSoftmax, onto the
`qnn` ops whose decompositions reproduce onnxruntime's CPU arithmetic.

QLinearConcat requantizes each input whose scale or zero point differs from the output's
(a dequantize and a quantize, as onnxruntime's lookup table is built) and copies the others.
QLinearSoftmax follows onnxruntime's table of exponentials (qnn.softmax).
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ...ir import Const
from .contrib import contrib, schema
from .convert import converter
from .nn import as_2d, window_attrs

MS = "com.microsoft"


def zero_point(node, index: int, like):
    """The optional zero point of input `index`: 0 of `like`'s dtype when absent."""
    zero = node.input(index)
    return zero if zero is not None else node.b.const(np.zeros((), dtype=like.dtype))


def quantized(node, first: int):
    """(data, scale, zero point) from inputs `first`, `first` + 1, `first` + 2."""
    x = node.arg(first)
    return x, node.arg(first + 1), zero_point(node, first + 2, x)


def output_params(node, index: int, like):
    return node.arg(index), zero_point(node, index + 1, like)


@contrib("QLinearAdd", "A A_scale A_zero_point? B B_scale B_zero_point? C_scale "
         "C_zero_point?", "C")
def qlinear_add(node):
    a, b = quantized(node, 0), quantized(node, 3)
    return node.call("qnn.add", *a, *b, *output_params(node, 6, a[0]))


@contrib("QLinearMul", "A A_scale A_zero_point? B B_scale B_zero_point? C_scale "
         "C_zero_point?", "C")
def qlinear_mul(node):
    a, b = quantized(node, 0), quantized(node, 3)
    return node.call("qnn.multiply", *a, *b, *output_params(node, 6, a[0]))


@contrib("QLinearSigmoid", "X X_scale X_zero_point? Y_scale Y_zero_point?", "Y")
def qlinear_sigmoid(node):
    x = quantized(node, 0)
    return node.call("qnn.sigmoid", *x, *output_params(node, 3, x[0]))


@contrib("QLinearLeakyRelu", "X X_scale X_zero_point? Y_scale Y_zero_point?", "Y",
         alpha="f")
def qlinear_leaky_relu(node):
    x = quantized(node, 0)
    return node.call("qnn.leaky_relu", *x, *output_params(node, 3, x[0]),
                     alpha=node.attr("alpha", 0.01))


def layout(node) -> str:
    return "NHWC" if node.flag("channels_last", 0) else "NCHW"


@contrib("QLinearGlobalAveragePool", "X x_scale x_zero_point y_scale y_zero_point", "Y",
         channels_last="i")
def qlinear_global_average_pool(node):
    x = quantized(node, 0)
    node.require(x[0].rank == 4, f"only 4-D data is supported, got {x[0].type}")
    return node.call("qnn.global_avg_pool2d", *x, *output_params(node, 3, x[0]),
                     data_layout=layout(node))


@contrib("QLinearAveragePool", "X x_scale x_zero_point? y_scale y_zero_point?", "Y",
         auto_pad="s", ceil_mode="i", channels_last="i", count_include_pad="i",
         kernel_shape="ints!", pads="ints", strides="ints")
def qlinear_average_pool(node):
    x = quantized(node, 0)
    node.require(not node.flag("channels_last", 0),
                 "channels_last QLinearAveragePool is not supported")
    kernel = list(node.attr("kernel_shape"))
    strides, dilations, pads = window_attrs(node, kernel)
    node.require(len(kernel) == 2, f"only 2-D QLinearAveragePool is supported, got "
                                   f"kernel_shape {kernel}")
    data, kernel, strides, dilations, pads = as_2d(node, x[0], kernel, strides, dilations,
                                                   pads)
    return node.call("qnn.avg_pool2d", data, x[1], x[2], *output_params(node, 3, x[0]),
                     pool_size=kernel, strides=strides, padding=pads,
                     ceil_mode=node.flag("ceil_mode", 0),
                     count_include_pad=node.flag("count_include_pad", 0))


def _same_constant(a, b) -> bool:
    return isinstance(a, Const) and isinstance(b, Const) and \
        np.array_equal(np.asarray(a.data).reshape(-1), np.asarray(b.data).reshape(-1))


def _concat_schema():
    from onnx.defs import OpSchema
    base = schema("QLinearConcat", "Y_scale Y_zero_point", "Y", axis="i!")
    inputs = list(base.inputs) + [OpSchema.FormalParameter(
        "inputs", "T", param_option=OpSchema.FormalParameterOption.Variadic,
        is_homogeneous=False)]
    return OpSchema("QLinearConcat", MS, 1, inputs=inputs, outputs=list(base.outputs),
                    type_constraints=[("T", list(base.type_constraints[0].allowed_type_strs),
                                       "")],
                    attributes=list(base.attributes.values()))


@converter("QLinearConcat", domain=MS, schema=cache(_concat_schema))
def qlinear_concat(node):
    """Each (X, X_scale, X_zero_point) triple requantized to Y's scale and zero point
    unless it already has them, then concatenated."""
    y_scale, y_zero = node.arg(0), node.arg(1)
    node.require(len(node.inputs) > 2 and (len(node.inputs) - 2) % 3 == 0,
                 "inputs after Y_scale and Y_zero_point must come in (X, X_scale, "
                 "X_zero_point) triples")
    parts = []
    for i in range(2, len(node.inputs), 3):
        x, scale, zero = node.arg(i), node.arg(i + 1), node.arg(i + 2)
        if not (_same_constant(scale, y_scale) and _same_constant(zero, y_zero)):
            x = node.call("qnn.quantize", node.call("qnn.dequantize", x, scale, zero),
                          y_scale, y_zero, dtype=y_zero.dtype)
        parts.append(x)
    return node.call("concat", *parts, axis=node.axis("axis", parts[0].rank))


@contrib("QLinearSoftmax", "X X_scale x_zero_point? y_scale y_zero_point", "Y", axis="i",
         opset="i")
def qlinear_softmax(node):
    """qnn.softmax; before opset 13 the softmax is over the dims from `axis` on, flattened
    (the default axis is 1 there)."""
    x = quantized(node, 0)
    opset = node.attr("opset", 13)
    axis = node.axis("axis", x[0].rank, -1 if opset >= 13 else 1)
    data = x[0]
    if opset < 13 and axis != data.rank - 1:
        data = node.call("reshape", data, shape=list(data.shape[:axis]) + [-1])
    y = node.call("qnn.softmax", data, x[1], x[2], *output_params(node, 3, x[0]),
                  axis=data.rank - 1 if opset < 13 else axis)
    return y if y.shape == x[0].shape else node.call("reshape", y, shape=list(x[0].shape))


@contrib("QGemm", "A a_scale a_zero_point B b_scale b_zero_point C? y_scale? y_zero_point?",
         "Y", alpha="f", transA="i", transB="i")
def qgemm(node):
    """qnn.linear with B as (N, K) weights and C as the int32 bias; a float output (no
    y_scale) or an alpha other than 1 is refused."""
    a, b = quantized(node, 0), quantized(node, 3)
    node.require(node.attr("alpha", 1.0) == 1.0, "alpha other than 1 is not supported")
    node.require(node.input(7) is not None, "a float output (no y_scale) is not supported")
    data = a[0] if not node.flag("transA", 0) else node.call("permute_dims", a[0], axes=[1, 0])
    weight = b[0] if node.flag("transB", 0) else node.call("permute_dims", b[0], axes=[1, 0])
    bias = node.input(6)
    if bias is not None and bias.shape != (weight.shape[0],):
        bias = node.call("reshape", node.call("broadcast_to", bias, shape=[
            1, weight.shape[0]]), shape=[weight.shape[0]])
    return node.call("qnn.linear", data, a[1], a[2], weight, b[1], b[2],
                     *output_params(node, 7, a[0]), bias)
