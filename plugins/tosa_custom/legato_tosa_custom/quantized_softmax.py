"""qnn.softmax in profile pro_fp+pro_int: onnxruntime's QLinearSoftmax algorithm, as
legato's definition of the op computes it, with its float64 table made a float32
constant here (TOSA 1.0 has no float64: the decomposition's table, computed from the
scale in the module, cannot be emitted).

`e = table[255 + x - max(x)]` (GATHER, int32 indices), the row sum (REDUCE_SUM), `(1 /
sum) * floor(1 / out_scale)` (RECIPROCAL, MUL), `round(e * step + out_zero_point)`,
saturated (CLAMP, then one CAST, which rounds half to even: quantized.rounded): the
same float32 operations as cpu_ref's, so the results agree bit for bit but where TOSA's float32 sum of a row is added in another order than numpy's (its last
bits can differ, and a product at a rounding tie with them). Left float, dequantize ->
nn.softmax -> quantize computes `x / out_scale` instead, which is 1 step off
onnxruntime's algorithm on 0.8% of BERT-base's attention probabilities.
"""
from __future__ import annotations

import numpy as np

from .quantized import QRANGES as RANGES, consts, rounded
from .rules import splat

FLOAT32_MAX = float(np.finfo(np.float32).max)


def exp_table(scale, count: int) -> np.ndarray:
    """The 256 float32 exponentials `exp((i - 255 + shift) * scale)`, computed in float64
    as the op's definition does (shift keeps a row's sum of `count` below float32's
    range)."""
    shift = max(0.0, np.log(FLOAT32_MAX / max(count, 1)) - 5)
    scale64 = np.float64(np.asarray(scale).reshape(-1)[0])
    steps = np.arange(256, dtype=np.float64) - 255
    return np.exp((steps + np.float64(shift) / scale64) * scale64).astype(np.float32)


def qsoftmax(b, call):
    """qnn.softmax of int8/uint8 along any axis; declines scales and zero points that are
    not constants."""
    x = call.inputs[0]
    params = consts(*call.inputs[1:])
    if params is None or x.dtype not in RANGES:
        return None
    x_scale, _, y_scale, y_zero = params
    axis = call.attrs["axis"] % x.rank
    table = b.const(exp_table(x_scale, x.shape[axis]))
    wide = b.cast(x, dtype="int32")
    index = b.add(b.subtract(wide, b.max(wide, axes=[axis], keepdims=True)),
                  splat(b, x, 255, np.int32))
    e = b.take(table, index, axis=0)
    total = b.sum(e, axes=[axis], keepdims=True)
    one = np.float32(1)
    floor = np.floor(one / np.float32(np.asarray(y_scale).reshape(-1)[0]))
    step = b.multiply(b.divide(splat(b, x, one, np.float32), total),
                      splat(b, x, floor, np.float32))
    zero = np.float32(np.asarray(y_zero).reshape(-1)[0])
    return rounded(b, b.add(b.multiply(e, step), splat(b, x, zero, np.float32)), 0,
                   call.outputs[0].dtype)


RULES = {"qnn.softmax": qsoftmax}
