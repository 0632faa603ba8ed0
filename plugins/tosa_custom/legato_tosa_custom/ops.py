"""Ops with TOSA semantics that legato's level-0 set does not express.

The lowering rules (rules.py) produce them; they are level 0 with their own type
inference, and only this backend declares them legal.
"""
from __future__ import annotations

from legato.plugin_api import (OpDef, TensorType, broadcast_shapes, fail, float_unary_infer,
                              is_float, window)

from . import op_generators, op_samples

INDEX_DTYPE = "int32"


def _gather(types, attrs):
    """TOSA GATHER: values [N, K, C], indices [N, W] (int32) -> [N, W, C]."""
    values, indices = types
    if values.rank != 3 or indices.rank != 2 or indices.dtype != INDEX_DTYPE:
        fail(f"values must be 3-D and indices 2-D {INDEX_DTYPE}, got {values} and {indices}")
    if values.shape[0] != indices.shape[0]:
        fail(f"values {list(values.shape)} and indices {list(indices.shape)} differ in N")
    return TensorType((values.shape[0], indices.shape[1], values.shape[2]), values.dtype)


def _pow(types, attrs):
    a, b = types
    if a.dtype != b.dtype or not is_float(a.dtype):
        fail(f"operands must be floats of one type, got {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)


def _cast(types, attrs):
    return TensorType(types[0].shape, attrs["dtype"])


def _rescale(types, attrs):
    """TOSA RESCALE: data, int32 multiplier and int8 shift ([1] or one per last-axis
    channel), the input and output zero points; uint8 data or results are TOSA's
    input_unsigned / output_unsigned."""
    data, multiplier, shift, in_zp, out_zp = types
    channels = {multiplier.shape, shift.shape}
    if multiplier.dtype != "int32" or shift.dtype != "int8" or len(channels) != 1 or \
            multiplier.shape not in ((1,), data.shape[-1:]):
        fail(f"multiplier {multiplier} and shift {shift} must be int32 and int8, [1] or one "
             f"per channel of {data}'s last axis")
    if in_zp.dtype != data.dtype or out_zp.dtype != attrs["dtype"]:
        fail(f"zero points {in_zp.dtype} and {out_zp.dtype} must be {data.dtype} and "
             f"{attrs['dtype']}")
    return TensorType(data.shape, attrs["dtype"])


def _window_out(x, kernel, attrs):
    """The NHWC result shape of a TOSA window over NHWC x (the windows divide exactly)."""
    win = window(x.shape[1:3], kernel, attrs["strides"], attrs["dilation"],
                 attrs["padding"], what="TOSA window")
    return win.out


def _qconv2d(types, attrs):
    """TOSA CONV2D on int8: NHWC data, OHWI weight, int32 [O] bias -> int32 NHWC."""
    x, w, bias, xz, wz = types
    if x.dtype != "int8" or w.dtype != "int8" or x.rank != 4 or w.rank != 4:
        fail(f"data {x} and weight {w} must be 4-D int8 (NHWC, OHWI)")
    oh, ow = _window_out(x, w.shape[1:3], attrs)
    return TensorType((x.shape[0], oh, ow, w.shape[0]), "int32")


def _qdepthwise(types, attrs):
    """TOSA DEPTHWISE_CONV2D on int8: NHWC data, [KH, KW, C, M] weight -> int32 NHWC."""
    x, w, bias, xz, wz = types
    if x.dtype != "int8" or w.dtype != "int8" or x.rank != 4 or w.rank != 4 or \
            w.shape[2] != x.shape[3]:
        fail(f"data {x} and weight {w} must be 4-D int8 (NHWC, [KH, KW, C, M])")
    oh, ow = _window_out(x, w.shape[:2], attrs)
    return TensorType((x.shape[0], oh, ow, w.shape[2] * w.shape[3]), "int32")


def _qmatmul(types, attrs):
    """TOSA MATMUL on int8: [N, H, C] x [N, C, W] -> int32 [N, H, W]."""
    a, b, az, bz = types
    if a.dtype != "int8" or b.dtype != "int8" or a.rank != 3 or b.rank != 3 or \
            a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        fail(f"a {a} and b {b} must be int8 [N, H, C] and [N, C, W]")
    return TensorType((a.shape[0], a.shape[1], b.shape[2]), "int32")


def _table(types, attrs):
    """TOSA TABLE: int8 data looked up in a 256-entry int8 table."""
    x, table = types
    if x.dtype != "int8" or table.dtype != "int8" or table.shape != (256,):
        fail(f"data {x} and table {table} must be int8, the table [256]")
    return x


def _intdiv(types, attrs):
    a, b = types
    if a.dtype != b.dtype or a.dtype not in ("int32", "int64"):
        fail(f"operands must be int32 (or int64, printed as int32), got {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)


WINDOW = {"strides": ("ints",), "padding": ("ints",), "dilation": ("ints", [1, 1])}


def register_all(register):
    # 1/x: TOSA has no float divide; legato's divide becomes multiply by this
    register(OpDef("tosa.reciprocal", "a", {}, float_unary_infer, "elemwise",
                   generator=op_generators.reciprocal))
    register(OpDef("tosa.gather", "values, indices", {}, _gather, "injective",
                   generator=op_generators.gather))
    # TOSA POW: defined for a finite base > 0 (or 0 to a positive power) and a finite exponent
    register(OpDef("tosa.pow", "a, b", {}, _pow, "broadcast", generator=op_generators.pow_))
    # TOSA CAST: float to int rounds to nearest (legato's cast truncates toward zero)
    register(OpDef("tosa.cast", "data", {"dtype": ("dtype", "int32")}, _cast, "elemwise",
                   generator=op_generators.cast))
    # profile pro_int (quantized.py): the integer operators, zero points as operands
    register(OpDef("tosa.rescale", "data, multiplier, shift, input_zp, output_zp",
                   {"dtype": ("dtype", "int8")}, _rescale, "elemwise",
                   samples=op_samples.rescale))
    register(OpDef("tosa.qconv2d", "data, weight, bias, input_zp, weight_zp", WINDOW,
                   _qconv2d, "opaque", samples=op_samples.qconv2d))
    register(OpDef("tosa.qdepthwise_conv2d", "data, weight, bias, input_zp, weight_zp",
                   WINDOW, _qdepthwise, "opaque", samples=op_samples.qdepthwise_conv2d))
    register(OpDef("tosa.qmatmul", "a, b, a_zp, b_zp", {}, _qmatmul, "opaque",
                   samples=op_samples.qmatmul))
    register(OpDef("tosa.table", "data, table", {}, _table, "elemwise",
                   samples=op_samples.table))
    # TOSA INTDIV: int32, toward zero; a zero divisor is an error (rules keep it out)
    register(OpDef("tosa.intdiv", "a, b", {}, _intdiv, "broadcast", samples=op_samples.intdiv))
