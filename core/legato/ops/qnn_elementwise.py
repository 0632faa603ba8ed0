"""Quantized elementwise ops, pooling and activations (per-tensor int8/uint8), decomposed as
onnxruntime's CPU kernels compute them (com.microsoft QLinearAdd, QLinearMul,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid, QLinearLeakyRelu):

- qnn.add: MLAS's AVX2 form, `a * (a_scale / out_scale) + (b * (b_scale / out_scale) +
  fixed)` with `fixed = out_zp - (ratio_a * a_zp + ratio_b * b_zp)`, each multiply-add one
  fused (one rounding: computed in float64, rounded to float32);
- qnn.multiply: `float32((a - a_zp) * (b - b_zp)) * (a_scale * b_scale / out_scale)`;
- qnn.global_avg_pool2d: the int32 sum less `zp * count`, times `scale / (out_scale * count)`;
- qnn.avg_pool2d and the activations: dequantize, the float op, quantize (what onnxruntime
  computes, as a 256-entry table for the activations).
Every result is rounded half to even, shifted by the output zero point and saturated."""
from __future__ import annotations

import numpy as np

from ..ir import TensorType
from .base import T, broadcast_shapes, composite, f32, fail
from .qnn_linear import (I8, U8, check_output, check_per_tensor, check_quantized,
                         output_stage, saturate, shifted)
from .conv import POOL_ATTRS, _avg_pool, _pool_taps, _window_counts
from .qnn import scale_check

BINARY_CHECK = scale_check((1, "a_scale", False), (4, "b_scale", False),
                           (6, "out_scale", True))


def _qbinary(types, attrs):
    a, as_, az, b, bs, bz, ys, yz = types
    check_quantized("a", a, as_, az)
    check_quantized("b", b, bs, bz)
    for name, s, z in (("a", as_, az), ("b", bs, bz)):
        check_per_tensor(name, s, z)
    check_output(ys, yz)
    if a.dtype != b.dtype or yz.dtype != a.dtype:
        fail(f"a ({a.dtype}), b ({b.dtype}) and out_zero_point ({yz.dtype}) must share "
             "one dtype")
    return TensorType(broadcast_shapes(a.shape, b.shape), yz.dtype)


BINARY_EXAMPLES = [((T("uint8", 2, 3), f32(), U8, T("uint8", 2, 3), f32(), U8, f32(), U8), {}),
                   ((T("int8", 2, 3), f32(), I8, T("int8", 3), f32(), I8, f32(), I8), {})]
BINARY_INPUTS = ("a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, "
                 "out_zero_point")


def _fused_multiply_add(b, x, factor, addend):
    """float32(x * factor + addend) rounded once, as an FMA instruction gives it."""
    wide = b.add(b.multiply(b.cast(x, dtype="float64"), b.cast(factor, dtype="float64")),
                 b.cast(addend, dtype="float64"))
    return b.cast(wide, dtype="float32")


@composite("qnn.add", BINARY_INPUTS, _qbinary, "broadcast", 1, BINARY_EXAMPLES,
           tolerance=0.0, const_check=BINARY_CHECK)
def qadd(b, a, a_scale, a_zero, x, x_scale, x_zero, y_scale, y_zero):
    """com.microsoft QLinearAdd: the sum of two per-tensor int8/uint8 tensors (numpy
    broadcasting) requantized to out_scale and out_zero_point"""
    ratio_a, ratio_b = b.divide(a_scale, y_scale), b.divide(x_scale, y_scale)
    zero = b.cast(y_zero, dtype="float32")
    shift = b.add(b.multiply(ratio_a, b.cast(a_zero, dtype="float32")),
                  b.multiply(ratio_b, b.cast(x_zero, dtype="float32")))
    fixed = b.subtract(zero, shift)
    af, xf = b.cast(a, dtype="float32"), b.cast(x, dtype="float32")
    out = broadcast_shapes(a.shape, x.shape)
    if _one_per_span(a, out):      # MLAS folds a scalar operand into the fixed part first
        y = _fused_multiply_add(b, xf, ratio_b, b.add(fixed, b.multiply(af, ratio_a)))
    elif _one_per_span(x, out):
        y = _fused_multiply_add(b, af, ratio_a, b.add(fixed, b.multiply(xf, ratio_b)))
    else:
        y = _fused_multiply_add(b, af, ratio_a, _fused_multiply_add(b, xf, ratio_b, fixed))
    return saturate(b, b.round(y), y_zero.dtype)


def _one_per_span(t, out) -> bool:
    """Whether onnxruntime's broadcasting loop hands this operand to MLAS as one value per
    run of the innermost dim (one element, or broadcast along the last dim)."""
    return t.type.size == 1 or (len(out) > 0 and out[-1] > 1 and
                           (t.rank == 0 or t.shape[-1] == 1))


@composite("qnn.multiply", BINARY_INPUTS, _qbinary, "broadcast", 1, BINARY_EXAMPLES,
           tolerance=0.0, const_check=BINARY_CHECK)
def qmultiply(b, a, a_scale, a_zero, x, x_scale, x_zero, y_scale, y_zero):
    """com.microsoft QLinearMul: the product of two per-tensor int8/uint8 tensors (numpy
    broadcasting), its int32 product after the zero points requantized by
    `a_scale * b_scale / out_scale`"""
    acc = b.multiply(shifted(b, a, a_zero, 0), shifted(b, x, x_zero, 0))
    multiplier = b.divide(b.multiply(a_scale, x_scale), y_scale)
    return output_stage(b, acc, multiplier, y_zero, 0)


# --- pooling -----------------------------------------------------------------------------------

def _spatial(layout: str) -> list[int]:
    return [layout.index("H"), layout.index("W")]


def _qglobal_pool(types, attrs):
    x, xs, xz, ys, yz = types
    check_quantized("data", x, xs, xz)
    check_per_tensor("data", xs, xz)
    check_output(ys, yz)
    if x.rank != 4:
        fail(f"data must be 4-D, got {list(x.shape)}")
    shape = list(x.shape)
    for axis in _spatial(attrs["data_layout"]):
        shape[axis] = 1
    return TensorType(tuple(shape), yz.dtype)


LAYOUT = {"data_layout": ("str:NCHW|NHWC", "NCHW")}
POOL_CHECK = scale_check((1, "data_scale", False), (3, "out_scale", True))


@composite("qnn.global_avg_pool2d", "data, data_scale, data_zero_point, out_scale, "
           "out_zero_point", _qglobal_pool, "reduce", 1,
           [((T("uint8", 2, 3, 4, 5), f32(), U8, f32(), U8), {}),
            ((T("int8", 1, 3, 3, 2), f32(), I8, f32(), I8), {"data_layout": "NHWC"})],
           LAYOUT, tolerance=0.0, const_check=POOL_CHECK)
def qglobal_avg_pool2d(b, x, x_scale, x_zero, y_scale, y_zero, data_layout):
    """com.microsoft QLinearGlobalAveragePool: the mean over H and W of an int8/uint8 map,
    summed in int32, requantized by `data_scale / (out_scale * count)`"""
    axes = _spatial(data_layout)
    count = x.shape[axes[0]] * x.shape[axes[1]]
    acc = b.sum(shifted(b, x, x_zero, 0), axes=axes, keepdims=True)
    multiplier = b.divide(x_scale, b.multiply(y_scale, float(count)))
    return output_stage(b, acc, multiplier, y_zero, 0)


def _through_float(infer):
    """The type rule of a per-tensor quantized op that computes `infer` on the
    dequantized data."""
    def check(types, attrs):
        x, xs, xz, ys, yz = types
        check_quantized("data", x, xs, xz)
        check_per_tensor("data", xs, xz)
        check_output(ys, yz)
        return TensorType(infer([TensorType(x.shape, "float32")], attrs).shape, yz.dtype)
    return check


def _requantized(b, y, y_scale, y_zero):
    return b.qnn_quantize(y, y_scale, y_zero, dtype=y_zero.dtype)


QUNARY_INPUTS = "data, data_scale, data_zero_point, out_scale, out_zero_point"


@composite("qnn.avg_pool2d", QUNARY_INPUTS, _through_float(_avg_pool), "opaque", 2,
           [((T("uint8", 1, 2, 5, 5), f32(), U8, f32(), U8), {"pool_size": [2, 2]}),
            ((T("int8", 1, 5, 5, 2), f32(), I8, f32(), I8),
             {"pool_size": [3, 3], "strides": [1, 1], "padding": [1, 1, 1, 1],
              "data_layout": "NHWC", "count_include_pad": True})],
           {**POOL_ATTRS, "count_include_pad": ("bool", False)}, tolerance=0.0,
           const_check=POOL_CHECK)
def qavg_pool2d(b, x, x_scale, x_zero, y_scale, y_zero, count_include_pad, **pool):
    """com.microsoft QLinearAveragePool: the window means of the dequantized int8/uint8
    data in float32, then `saturate(round_half_even(mean / out_scale + out_zero_point))` (the
    zero point added before rounding, as onnxruntime does)"""
    # the taps summed one after another in row-major order, as onnxruntime's loop adds
    # them (a padded tap adds 0.0, which changes no float sum)
    taps, win = _pool_taps(b, b.qnn_dequantize(x, x_scale, x_zero), pool, 0.0)
    total = taps[0]
    for tap in taps[1:]:
        total = b.add(total, tap)
    counts = _window_counts(win, count_include_pad)
    shape = [1] * 4
    axes = _spatial(pool["data_layout"])
    shape[axes[0]], shape[axes[1]] = counts.shape
    y = b.divide(total, b.const(counts.reshape(shape).astype("float32")))
    y = b.add(b.divide(y, y_scale), b.cast(y_zero, dtype="float32"))
    return saturate(b, b.round(y), y_zero.dtype)


# --- activations -------------------------------------------------------------------------------

UNARY_EXAMPLES = [((T("uint8", 2, 3), f32(), U8, f32(), U8), {}),
                  ((T("int8", 4), f32(), I8, f32(), I8), {})]


def _same_shape(types, attrs):
    return types[0]


@composite("qnn.sigmoid", QUNARY_INPUTS, _through_float(_same_shape), "elemwise", 2,
           UNARY_EXAMPLES, tolerance=0.0, const_check=POOL_CHECK)
def qsigmoid(b, x, x_scale, x_zero, y_scale, y_zero):
    """com.microsoft QLinearSigmoid: sigmoid of the dequantized int8/uint8 data, quantized to
    out_scale and out_zero_point"""
    return _requantized(b, b.sigmoid(b.qnn_dequantize(x, x_scale, x_zero)), y_scale, y_zero)


@composite("qnn.leaky_relu", QUNARY_INPUTS, _through_float(_same_shape), "elemwise", 2,
           UNARY_EXAMPLES, {"alpha": ("float", 0.01)}, tolerance=0.0, const_check=POOL_CHECK)
def qleaky_relu(b, x, x_scale, x_zero, y_scale, y_zero, alpha):
    """com.microsoft QLinearLeakyRelu: nn.leaky_relu of the dequantized int8/uint8 data,
    quantized to out_scale and out_zero_point"""
    y = b.nn_leaky_relu(b.qnn_dequantize(x, x_scale, x_zero), alpha=alpha)
    return _requantized(b, y, y_scale, y_zero)


# --- softmax ------------------------------------------------------------------------------------

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _qsoftmax_infer(types, attrs):
    out = _through_float(_same_shape)(types, attrs)
    if not -out.rank <= attrs["axis"] < max(out.rank, 1):
        fail(f"axis {attrs['axis']} is out of range for {list(out.shape)}")
    return out


@composite("qnn.softmax", QUNARY_INPUTS, _qsoftmax_infer, "opaque", 1,
           [((T("uint8", 2, 7), f32(), U8, f32(), U8), {}),
            ((T("int8", 3, 4, 2), f32(), I8, f32(), I8), {"axis": 1})],
           {"axis": ("int", -1)}, tolerance=0.0, const_check=POOL_CHECK)
def qsoftmax(b, x, x_scale, x_zero, y_scale, y_zero, axis):
    """com.microsoft QLinearSoftmax as onnxruntime computes it: exponentials from a
    256-entry float32 table of `exp((i - 255 + shift) * data_scale)` indexed by
    `255 + x - max(x)` (shift keeps the sum below float32's range), their float32 sum,
    then `round(e * ((1 / sum) * floor(1 / out_scale)) + out_zero_point)` in float32 (its
    AVX2 kernel's order), saturated (onnxruntime wraps an int8 128, a probability rounded
    to 1, to -128, in the elements past the last whole 16)"""
    axis = axis % x.rank
    count = x.shape[axis]
    shift = max(0.0, np.log(FLOAT32_MAX / max(count, 1)) - 5)
    scale64 = b.cast(x_scale, dtype="float64")
    steps = b.const(np.arange(256, dtype=np.float64) - 255)
    table = b.exp(b.multiply(b.add(steps, b.divide(shift, scale64)), scale64))
    table = b.reshape(b.cast(table, dtype="float32"), shape=[256])
    wide = b.cast(x, dtype="int32")
    index = b.add(b.subtract(wide, b.max(wide, axes=[axis], keepdims=True)), 255)
    e = b.take(table, index, axis=0)
    total = b.sum(e, axes=[axis], keepdims=True)
    # 1 / sum first: e * floor(1 / out_scale) alone passes float32's range for short rows
    step = b.multiply(b.divide(1.0, total), b.floor(b.divide(1.0, y_scale)))
    y = b.round(b.add(b.multiply(e, step), b.cast(y_zero, dtype="float32")))
    return saturate(b, y, y_zero.dtype)
