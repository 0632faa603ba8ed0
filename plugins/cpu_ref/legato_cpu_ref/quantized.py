"""Reference kernels of the quantized ops past qnn.conv2d (qnn.requantize, matmul, linear,
add, multiply, the pools, sigmoid, leaky_relu, softmax), written from each op's definition:
integer accumulation in int64 (exact), the float32 multipliers and float32 steps computed in
the order onnxruntime's int8 CPU kernels use (each op's docstring in legato.ops says it),
`np.rint` (round half to even), then the output zero point and saturation."""
from __future__ import annotations

import math

import numpy as np

from legato.plugin_api import channel_view


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _one(x) -> np.float32:
    """A per-tensor parameter (a scalar or [1]) as a float32 scalar."""
    return np.float32(_f32(x).reshape(-1)[0])


def _param(param, ndim: int, axis: int) -> np.ndarray:
    """A per-tensor (scalar or [1]) or 1-D per-axis parameter shaped along `axis`."""
    param = np.asarray(param)
    if param.ndim == 0 or param.shape == (1,):
        return param.reshape(())
    return param.reshape(channel_view(param.shape[0], ndim, int(axis)))


def _shifted(x, zero, axis: int = 0) -> np.ndarray:
    """`x - zero_point` in int64."""
    return np.asarray(x, np.int64) - _param(np.asarray(zero, np.int64), np.ndim(x), axis)


def _clamped(y, dtype) -> np.ndarray:
    """Integral float values clamped to `dtype`'s range and cast (NaN, from a zero scale,
    gives 0, as `cast` does)."""
    info = np.iinfo(np.dtype(dtype))
    y = np.clip(np.nan_to_num(np.asarray(y, np.float64), nan=0.0), info.min, info.max)
    return np.array(y, dtype=dtype, order="C")


def _stage(acc, multiplier, zero_point, axis: int) -> np.ndarray:
    """MLAS's output stage: `saturate(rint(float32(acc) * multiplier) + zero_point)`, the
    multiplier and zero point per tensor or along `axis` of acc."""
    scaled = _f32(acc) * _param(_f32(multiplier), np.ndim(acc), axis)
    zero = _param(np.asarray(zero_point, np.float64), np.ndim(acc), axis)
    return _clamped(np.rint(scaled) + zero, np.asarray(zero_point).dtype)


def _product_multiplier(scale_a, scale_b, out_scale):
    """`scale_a * scale_b / out_scale` in float32, in that order."""
    return _one(scale_a) * _f32(scale_b) / _one(out_scale)


def requantize(data, in_scale, in_zero_point, out_scale, out_zero_point, *, axis=1,
               dtype="int8"):
    ndim = np.ndim(data)
    ratio = _param(_f32(in_scale), ndim, axis) / _param(_f32(out_scale), ndim, axis)
    scaled = _f32(_shifted(data, in_zero_point, axis)) * ratio
    zero = _param(np.asarray(out_zero_point, np.float64), ndim, axis)
    return _clamped(np.broadcast_to(np.rint(scaled) + zero, np.shape(data)), dtype)


def matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point):
    acc = np.matmul(_shifted(a, a_zero_point), _shifted(b, b_zero_point, -1))
    multiplier = _product_multiplier(a_scale, b_scale, out_scale)
    return _stage(acc, multiplier, out_zero_point, -1)


def linear(data, data_scale, data_zero_point, weight, weight_scale, weight_zero_point,
           out_scale, out_zero_point, bias=None):
    acc = np.matmul(_shifted(data, data_zero_point), _shifted(weight, weight_zero_point, 0).T)
    if bias is not None:  # int32 at scale data_scale * weight_scale
        acc = acc + np.asarray(bias, np.int64)
    multiplier = _product_multiplier(data_scale, weight_scale, out_scale)
    return _stage(acc, multiplier, out_zero_point, -1)


def _fma(x, factor, addend) -> np.ndarray:
    """float32(x * factor + addend), the product exact in float64, one final rounding."""
    return (np.float64(factor) * np.asarray(x, np.float64)
            + np.asarray(addend, np.float64)).astype(np.float32)


def _one_per_span(shape, out) -> bool:
    """onnxruntime's broadcasting loop passes this operand to MLAS as one value per run of
    the innermost dim: one element, or broadcast along the last dim."""
    return math.prod(shape) == 1 or (len(out) > 0 and out[-1] > 1
                                     and (len(shape) == 0 or shape[-1] == 1))


def add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point):
    """MLAS's QLinearAdd: `a * ratio_a + (b * ratio_b + fixed)`, ratios `scale / out_scale`
    and `fixed = out_zp - (ratio_a * a_zp + ratio_b * b_zp)` in float32, each multiply-add
    fused; a per-span operand is folded into the fixed part first."""
    ratio_a, ratio_b = _one(a_scale) / _one(out_scale), _one(b_scale) / _one(out_scale)
    shift = ratio_a * np.float32(_one(a_zero_point)) + ratio_b * np.float32(_one(b_zero_point))
    fixed = np.float32(_one(out_zero_point)) - shift
    af, bf = _f32(a), _f32(b)
    out = np.broadcast_shapes(af.shape, bf.shape)
    if _one_per_span(af.shape, out):
        y = _fma(bf, ratio_b, fixed + af * ratio_a)
    elif _one_per_span(bf.shape, out):
        y = _fma(af, ratio_a, fixed + bf * ratio_b)
    else:
        y = _fma(af, ratio_a, _fma(bf, ratio_b, fixed))
    return _clamped(np.rint(np.broadcast_to(y, out)), np.asarray(out_zero_point).dtype)


def multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point):
    acc = _shifted(a, a_zero_point) * _shifted(b, b_zero_point)
    return _stage(acc, _product_multiplier(a_scale, b_scale, out_scale), out_zero_point, 0)


def _spatial(layout: str) -> tuple[int, int]:
    return layout.index("H"), layout.index("W")


def global_avg_pool2d(data, data_scale, data_zero_point, out_scale, out_zero_point, *,
                      data_layout="NCHW"):
    axes = _spatial(data_layout)
    count = data.shape[axes[0]] * data.shape[axes[1]]
    acc = np.sum(_shifted(data, data_zero_point), axis=axes, keepdims=True)
    multiplier = _one(data_scale) / (_one(out_scale) * np.float32(count))
    return _stage(acc, multiplier, out_zero_point, 0)


def _dequantized(data, scale, zero_point) -> np.ndarray:
    """`(float32(x) - float32(zero_point)) * scale`, in float32."""
    return (_f32(data) - np.float32(_one(zero_point))) * _one(scale)


def _quantized(y, out_scale, out_zero_point) -> np.ndarray:
    """QuantizeLinear of float32 y: `saturate(rint(y / out_scale) + out_zero_point)`."""
    y = np.rint(_f32(y) / _one(out_scale)) + np.float64(_one(out_zero_point))
    return _clamped(y, np.asarray(out_zero_point).dtype)


def avg_pool2d(data, data_scale, data_zero_point, out_scale, out_zero_point, *, pool_size,
               strides=None, padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False,
               count_include_pad=False, data_layout="NCHW"):
    """Window means of the dequantized data: the taps added one after another in row-major
    order in float32 (padding adds 0.0), divided by the tap count; then
    `rint(mean / out_scale + out_zero_point)`, saturated."""
    # kernels.py imports this module to build its table, so its window helpers come late
    from .kernels import _DATA_LAYOUTS, _canonical, _counts, _pool_window, _pool_windows
    x, back = _canonical(data, _DATA_LAYOUTS, data_layout, "data_layout")
    win = _pool_window(x, pool_size, strides, padding, dilation, ceil_mode)
    windows = _pool_windows(_dequantized(x, data_scale, data_zero_point), win, 0.0)
    total = windows[..., 0, 0]
    for i in range(windows.shape[-2]):
        for j in range(windows.shape[-1]):
            if i or j:
                total = total + windows[..., i, j]
    rows, cols = (_counts(win, axis, count_include_pad) for axis in (0, 1))
    mean = total / np.multiply.outer(rows, cols).astype(np.float32)
    y = mean / _one(out_scale) + np.float32(_one(out_zero_point))
    return _clamped(np.rint(y).transpose(back), out_zero_point.dtype)


def sigmoid(data, data_scale, data_zero_point, out_scale, out_zero_point):
    x = _dequantized(data, data_scale, data_zero_point).astype(np.float64)
    return _quantized((1.0 / (1.0 + np.exp(-x))).astype(np.float32), out_scale, out_zero_point)


def leaky_relu(data, data_scale, data_zero_point, out_scale, out_zero_point, *, alpha=0.01):
    x = _dequantized(data, data_scale, data_zero_point)
    return _quantized(np.where(x >= 0, x, x * np.float32(alpha)), out_scale, out_zero_point)


FLOAT32_MAX = float(np.finfo(np.float32).max)


def softmax(data, data_scale, data_zero_point, out_scale, out_zero_point, *, axis=-1):
    """onnxruntime's QLinearSoftmax: exponentials from the float32 table
    `exp((i - 255 + shift / scale) * scale)` (float64, shift keeping the sum finite) at
    `255 + x - max(x)`, their sum (rounded to float32 once), then
    `rint(e * ((1 / sum) * floor(1 / out_scale)) + out_zero_point)` in float32,
    saturated."""
    axis = int(axis) % max(data.ndim, 1)
    count = data.shape[axis] if data.ndim else 1
    shift = max(0.0, np.log(FLOAT32_MAX / max(count, 1)) - 5)
    scale = np.float64(_one(data_scale))
    table = np.exp((np.arange(256, dtype=np.float64) - 255 + shift / scale) * scale)
    table = table.astype(np.float32)
    wide = np.asarray(data, np.int64)
    e = table[255 + wide - np.max(wide, axis=axis, keepdims=True)]
    total = np.sum(e.astype(np.float64), axis=axis, keepdims=True).astype(np.float32)
    # 1 / sum first, as onnxruntime's AVX2 kernel: e * floor(1 / out_scale) alone
    # overflows float32 for short rows (e reaches float32's max / count / e^5)
    step = (np.float32(1.0) / total) * np.floor(np.float32(1.0) / _one(out_scale))
    y = np.rint(e * step + np.float32(_one(out_zero_point)))
    return _clamped(y, out_zero_point.dtype)


KERNELS = {
    "qnn.requantize": requantize, "qnn.matmul": matmul, "qnn.linear": linear,
    "qnn.add": add, "qnn.multiply": multiply, "qnn.global_avg_pool2d": global_avg_pool2d,
    "qnn.avg_pool2d": avg_pool2d, "qnn.sigmoid": sigmoid, "qnn.leaky_relu": leaky_relu,
    "qnn.softmax": softmax,
}
