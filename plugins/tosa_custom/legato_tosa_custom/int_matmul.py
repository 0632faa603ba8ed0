"""An int32 matmul in profile pro_int: int8 MATMULs of the left operand's bytes.

ONNX MatMulInteger (onnxruntime's quantize_dynamic) imports as `matmul(cast(x_uint8) -
zero_point, cast(w_int8) - w_zero_point)` in int32: the left operand's zero point is
computed at run time (DynamicQuantizeLinear), the right one is a constant. TOSA 1.0's
MATMUL takes int8 operands, and a rule sees only the int32 values, not that they came
from bytes. So the left operand `a` is split into balanced base-256 digits in [-128,
127], `a = d0 + 256 d1 + 65536 d2 + 2**24 d3`, each one int8 MATMUL with the right
operand, and the partial products are added up in int32 scaled by their place. The
digits of a small value (`|a| < 128`: d1 = d2 = d3 = 0; an int8/uint8 value minus its
zero point: d2 = d3 = 0) keep every partial sum as small as the product itself; a partial
sum that overflows int32 is UNPREDICTABLE in TOSA, as every int32 ADD and MUL here, and
so is a top digit of 128 (a within 2**23 of int32's maximum). The right operand must be a
constant whose values span at most 256 (int8 after an offset, which becomes MATMUL's
weight zero point); other int32 matmuls are declined, naming that.
"""
from __future__ import annotations

import math

import numpy as np
from legato.plugin_api import Const

from .limits import shaped_rule
from .quantized import zero_point
from .rules import matmul as float_matmul
from .rules import reshape, splat

DIGITS = 4


def int8_weight(data: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(int8 `data - offset`, the MATMUL zero point `-offset`) of an integer constant whose
    values span at most 256; None otherwise."""
    low, high = int(data.min(initial=0)), int(data.max(initial=0))
    offset = 0 if -128 <= low and high <= 127 else low + 128
    if high - offset > 127 or not -128 <= -offset <= 127:
        return None
    return (data.astype(np.int64) - offset).astype(np.int8), -offset


def _digits(b, a):
    """The int8 balanced base-256 digits of int32 `a`, lowest first."""
    zero = splat(b, a, 0)
    out = []
    for _ in range(DIGITS - 1):
        low = b.bitwise_and(a, splat(b, a, 255))          # the low byte's bits, 0..255
        high = b.greater(low, splat(b, a, 127))           # as a signed digit: low - 256
        out.append(b.cast(b.subtract(low, b.where(high, splat(b, a, 256), zero)),
                          dtype="int8"))
        # (a - digit) / 256 = floor(a / 256) + high, without overflow: INTDIV truncates,
        # so a negative a with a remainder is one lower
        down = b.logical_and(b.greater(zero, a), b.greater(low, zero))
        a = b.add(b.subtract(b.call("tosa.intdiv", a, splat(b, a, 256)),
                             b.where(down, splat(b, a, 1), zero)),
                  b.where(high, splat(b, a, 1), zero))
    out.append(b.cast(a, dtype="int8"))
    return out


@shaped_rule
def matmul(b, call):
    """int32 (int64: narrowed) matmul of a constant right operand as int8 MATMULs of the
    left operand's bytes; floats as pro_fp's rule."""
    x, y = call.inputs
    if x.dtype not in ("int32", "int64"):
        return float_matmul(b, call)
    weight = int8_weight(np.asarray(y.data)) if isinstance(y, Const) else None
    if weight is None or x.rank < 2 or y.rank < 2 or math.prod(y.shape[:-2]) != 1:
        return None
    w8, wz = weight
    (m, k), n = x.shape[-2:], y.shape[-1]
    rows = math.prod(x.shape[:-1])
    a = reshape(b, x if x.dtype == "int32" else b.cast(x, dtype="int32"), (1, rows, k))
    w = b.const(w8.reshape(1, k, n))
    total = None
    zps = (b.const(zero_point(0, "int8")), b.const(zero_point(wz, "int8")))
    for place, digit in enumerate(_digits(b, a)):
        part = b.call("tosa.qmatmul", digit, w, *zps)
        if place:
            part = b.multiply(part, splat(b, part, 256 ** place, np.int32))
        total = part if total is None else b.add(total, part)
    total = reshape(b, total, call.outputs[0].shape)
    return total if call.outputs[0].dtype == "int32" else b.cast(total, dtype="int64")
