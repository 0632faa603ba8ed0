"""Quantized products (qnn.matmul, qnn.linear) and qnn.requantize, decomposed into the
integer arithmetic onnxruntime's CPU kernels perform: operands shifted by their zero points
into int32, products accumulated in int32 (plus an int32 bias at scale
`data_scale * weight_scale`), then MLAS's output stage: the accumulator converted to
float32, times the float32 multiplier `data_scale * weight_scale / out_scale` (computed in
that order), rounded half to even, shifted by the output zero point and saturated."""
from __future__ import annotations

from ..ir import TensorType
from ..ir.shapes import broadcast_shapes
from .base import T, composite, f32, fail
from .conv import CONV_ATTRS, _conv2d
from .qnn import QUANT_RANGES, _check_qparams, along_axis, one_value, scale_check

INT8S = ("int8", "uint8")


# --- shared arithmetic ------------------------------------------------------------------------

def shifted(b, x, zero, axis: int):
    """`x - zero_point` in int32; a per-axis zero point along `axis` of x."""
    return b.subtract(b.cast(x, dtype="int32"),
                      along_axis(b, b.cast(zero, dtype="int32"), x, axis))


def saturate(b, y, dtype: str):
    """A float32 of integral values clamped to `dtype`'s range and cast to it."""
    lo, hi = QUANT_RANGES[dtype]
    return b.cast(b.minimum(b.maximum(y, float(lo)), float(hi)), dtype=dtype)


def output_stage(b, acc, multiplier, zero, axis: int):
    """MLAS's requantization of an int32 accumulator: `saturate(round_half_even(
    float32(acc) * multiplier) + zero_point)`, multiplier and zero point per tensor or
    along `axis` of acc."""
    y = b.round(b.multiply(b.cast(acc, dtype="float32"), along_axis(b, multiplier, acc, axis)))
    y = b.add(y, along_axis(b, b.cast(zero, dtype="float32"), acc, axis))
    return saturate(b, y, zero.dtype)


def product_multiplier(b, data_scale, weight_scale, out_scale):
    """`data_scale * weight_scale / out_scale` in float32, in the order onnxruntime
    computes its output scales."""
    return b.divide(b.multiply(data_scale, weight_scale), out_scale)


def check_quantized(name: str, t: TensorType, scale: TensorType, zero: TensorType,
                    dtypes=INT8S):
    """A quantized operand: `dtypes` data, a float32 scale and a zero point of data's
    dtype."""
    if t.dtype not in dtypes:
        fail(f"{name} must be {' or '.join(dtypes)}, got {t.dtype}")
    if zero.dtype != (t.dtype if t.dtype in INT8S else zero.dtype):
        fail(f"{name}_zero_point dtype {zero.dtype} differs from {name}'s {t.dtype}")
    if scale.dtype != "float32":
        fail(f"{name}_scale must be float32, got {scale.dtype}")


def check_per_tensor(name: str, scale: TensorType, zero: TensorType):
    if not (one_value(scale) and one_value(zero)):
        fail(f"{name}_scale {list(scale.shape)} and {name}_zero_point {list(zero.shape)} "
             "must hold one value each")


def check_output(scale: TensorType, zero: TensorType, per_axis: int | None = None):
    """The output's scale and zero point: int8/uint8, per tensor (or `per_axis` long)."""
    if zero.dtype not in INT8S:
        fail(f"out_zero_point must be int8 or uint8, got {zero.dtype}")
    if scale.dtype != "float32":
        fail(f"out_scale must be float32, got {scale.dtype}")
    if per_axis is None or one_value(scale) and one_value(zero):
        return check_per_tensor("out", scale, zero)
    if scale.shape != (per_axis,) or zero.shape != scale.shape:
        fail(f"out_scale {list(scale.shape)} and out_zero_point {list(zero.shape)} must "
             f"hold one value or {per_axis}")


QPARAMS_CHECK = scale_check((1, "data_scale", False), (4, "weight_scale", False),
                            (6, "out_scale", True))


# --- qnn.requantize --------------------------------------------------------------------------

def _requantize(types, attrs):
    x, xs, xz, ys, yz = types
    check_quantized("data", x, xs, xz, INT8S + ("int32",))
    _check_qparams(x, xs, xz, attrs["axis"])
    _check_qparams(x, ys, yz, attrs["axis"])
    axis = attrs["axis"]  # (read only for per-axis scales, which _check_qparams bounds)
    check_output(ys, yz, x.shape[axis] if -x.rank <= axis < x.rank else None)
    if yz.dtype != attrs["dtype"]:
        fail(f"out_zero_point dtype {yz.dtype} differs from output dtype {attrs['dtype']}")
    return TensorType(x.shape, attrs["dtype"])


@composite("qnn.requantize", "data, in_scale, in_zero_point, out_scale, out_zero_point",
           _requantize, "elemwise", 1,
           [((T("int32", 2, 3), f32(), T("int32"), f32(), T("int8")), {}),
            ((T("uint8", 2, 3), f32(3), T("uint8", 3), f32(), T("int8")), {}),
            ((T("int8", 3, 2), f32(3), T("int8", 3), f32(3), T("uint8", 3)),
             {"axis": 0, "dtype": "uint8"})],
           {"axis": ("int", 1), "dtype": ("str:int8|uint8", "int8")}, tolerance=0.0,
           const_check=scale_check((1, "in_scale", False), (3, "out_scale", True)))
def requantize(b, x, in_scale, in_zero, out_scale, out_zero, axis, dtype):
    """`saturate(round_half_even(float32(data - in_zero_point) * (in_scale / out_scale))
    + out_zero_point)`: int8/uint8/int32 data to `dtype`, scales per tensor or along
    `axis`"""
    ratio = b.divide(along_axis(b, in_scale, x, axis), along_axis(b, out_scale, x, axis))
    acc = shifted(b, x, in_zero, axis)
    y = b.round(b.multiply(b.cast(acc, dtype="float32"), ratio))
    return saturate(b, b.add(y, along_axis(b, b.cast(out_zero, dtype="float32"), x, axis)),
                    dtype)


# --- qnn.matmul ------------------------------------------------------------------------------

def _qmatmul(types, attrs):
    a, as_, az, w, ws, wz, ys, yz = types
    check_quantized("a", a, as_, az)
    check_quantized("b", w, ws, wz)
    check_per_tensor("a", as_, az)
    if a.rank < 1 or w.rank < 1:
        fail(f"a {list(a.shape)} and b {list(w.shape)} must have at least one dim")
    if not one_value(ws) or not one_value(wz):
        n = w.shape[-1] if w.rank >= 2 else None
        if n is None or ws.shape != (n,) or wz.shape != ws.shape:
            fail(f"b_scale {list(ws.shape)} and b_zero_point {list(wz.shape)} must hold one "
                 f"value or one per column of b {list(w.shape)}")
    check_output(ys, yz)
    k_a = a.shape[-1]
    k_b = w.shape[-2] if w.rank >= 2 else w.shape[0]
    if k_a != k_b:
        fail(f"a {list(a.shape)} and b {list(w.shape)} do not multiply")
    batch = broadcast_shapes(a.shape[:-2], w.shape[:-2])
    rows = a.shape[-2:-1] if a.rank >= 2 else ()
    cols = w.shape[-1:] if w.rank >= 2 else ()
    return TensorType(tuple(batch) + tuple(rows) + tuple(cols), yz.dtype)


I8, U8 = T("int8"), T("uint8")


@composite("qnn.matmul", "a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, "
           "out_zero_point", _qmatmul, "out_elemwise_fusable", 1,
           [((T("uint8", 2, 3), f32(), U8, T("int8", 3, 4), f32(), I8, f32(), U8), {}),
            ((T("int8", 2, 2, 3), f32(), I8, T("int8", 3, 4), f32(4), T("int8", 4), f32(), I8),
             {}),
            ((T("int8", 1, 2, 3, 4), f32(), I8, T("int8", 1, 2, 4, 3), f32(), I8, f32(), U8), {})],
           tolerance=0.0,
           const_check=scale_check((1, "a_scale", False), (4, "b_scale", False),
                                   (6, "out_scale", True)))
def qmatmul(b, a, a_scale, a_zero, w, w_scale, w_zero, y_scale, y_zero):
    """ONNX QLinearMatMul: numpy matmul of int8/uint8 operands in int32 after their zero
    points, requantized to `out_zero_point`'s dtype; a per tensor, b per tensor or per
    column"""
    acc = b.matmul(shifted(b, a, a_zero, -1), shifted(b, w, w_zero, -1))
    return output_stage(b, acc, product_multiplier(b, a_scale, w_scale, y_scale), y_zero, -1)


# --- qnn.linear ------------------------------------------------------------------------------

def _qlinear(types, attrs):
    x, xs, xz, w, ws, wz, ys, yz, bias = types
    check_quantized("data", x, xs, xz)
    check_quantized("weight", w, ws, wz)
    check_per_tensor("data", xs, xz)
    check_output(ys, yz)
    if x.rank < 1 or w.rank != 2 or x.shape[-1] != w.shape[1]:
        fail(f"data {list(x.shape)} and weight {list(w.shape)} (out_features, in_features) "
             "do not match")
    _check_qparams(w, ws, wz, 0)
    if bias is not None and (bias.dtype != "int32" or bias.shape != (w.shape[0],)):
        fail(f"bias must be int32 [{w.shape[0]}], got {bias.dtype}{list(bias.shape)}")
    return TensorType(x.shape[:-1] + (w.shape[0],), yz.dtype)


@composite("qnn.linear", "data, data_scale, data_zero_point, weight, weight_scale, "
           "weight_zero_point, out_scale, out_zero_point, bias?", _qlinear,
           "out_elemwise_fusable", 1,
           [((T("uint8", 2, 3), f32(), U8, T("int8", 4, 3), f32(4), T("int8", 4), f32(), U8,
              T("int32", 4)), {}),
            ((T("int8", 2, 2, 3), f32(), I8, T("int8", 4, 3), f32(), I8, f32(), I8, None), {})],
           tolerance=0.0, const_check=QPARAMS_CHECK)
def qlinear(b, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias):
    """nn.linear on int8/uint8: `data @ weight^T (+ int32 bias)` accumulated in int32
    after the zero points, requantized to `out_zero_point`'s dtype; weight
    (out_features, in_features) per tensor or per output channel"""
    wt = b.permute_dims(shifted(b, w, w_zero, 0), axes=[1, 0])
    acc = b.matmul(shifted(b, x, x_zero, -1), wt)
    if bias is not None:
        acc = b.add(acc, bias)
    return output_stage(b, acc, product_multiplier(b, x_scale, w_scale, y_scale), y_zero, -1)


# --- qnn.conv2d ------------------------------------------------------------------------------

def _qconv(types, attrs):
    x, xs, xz, w, ws, wz, ys, yz, bias = types
    check_quantized("data", x, xs, xz)
    check_quantized("weight", w, ws, wz)
    check_per_tensor("data", xs, xz)
    check_output(ys, yz)
    if bias is not None and bias.dtype != "int32":
        fail(f"bias must be int32, got {bias.dtype}")
    if w.rank == 4:
        _check_qparams(w, ws, wz, attrs["kernel_layout"].index("O"))
    out = _conv2d([TensorType(x.shape, "int32"), TensorType(w.shape, "int32"),
                   None if bias is None else TensorType(bias.shape, "int32")], attrs)
    return TensorType(out.shape, yz.dtype)


@composite("qnn.conv2d", "data, data_scale, data_zero_point, weight, weight_scale, "
           "weight_zero_point, out_scale, out_zero_point, bias?", _qconv,
           "out_elemwise_fusable", 2,
           [((T("uint8", 1, 2, 4, 4), f32(), U8, T("int8", 3, 2, 3, 3), f32(3), T("int8", 3),
              f32(), U8, T("int32", 3)), {"padding": [1, 1, 1, 1]}),
            ((T("int8", 1, 4, 5, 5), f32(), I8, T("int8", 4, 1, 3, 3), f32(), I8, f32(), I8,
              None), {"groups": 4, "strides": [2, 2]})], CONV_ATTRS,
           tolerance=0.0, const_check=QPARAMS_CHECK)
def qconv2d(b, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias, **conv):
    """ONNX QLinearConv: nn.conv2d of int8/uint8 data and weight accumulated in int32 after
    their zero points (padding holds the data's zero point), plus an int32 bias at scale
    `data_scale * weight_scale`, requantized to `out_zero_point`'s dtype; the weight per
    tensor or per output channel; the attributes of nn.conv2d"""
    acc = b.nn_conv2d(shifted(b, x, x_zero, 0), shifted(b, w, w_zero,
                                                        conv["kernel_layout"].index("O")),
                      bias, **conv)
    multiplier = product_multiplier(b, x_scale, w_scale, y_scale)
    return output_stage(b, acc, multiplier, y_zero, conv["data_layout"].index("C"))
