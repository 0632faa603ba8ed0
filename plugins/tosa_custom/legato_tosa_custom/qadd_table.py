"""qnn.add bit-exact with cpu_ref (and onnxruntime's QLinearAdd), for
`backend(output_stage="float")`: one GATHER from a 65,536-entry table of cpu_ref's sums,
indexed by the pair of 8-bit inputs `(a - lo) * 256 + (b - lo)`.

The RESCALE / ADD / RESCALE form (quantized.qadd) rounds the exact sum; onnxruntime's
float32 arithmetic (ratios, a fused multiply-add, each rounded to float32) is off it by up
to about 2e-5 of a step, so the two differ on a few input pairs per add (10 of 3.4 million
over ResNet-50's and MobileNetV2's 52 adds). Few pairs, but frequent in the data: on
MobileNetV2 u8s8 the first such add differs on 26 of 12,544 elements, and the 1x1
convolutions after it amplify each step (88 steps at the output). The table is integer
only (pro_int's GATHER of int8 values, int32 indices) and costs a 64 KiB constant per add.
"""
from __future__ import annotations

import math

import numpy as np

from .quantized import QRANGES as RANGES, consts
from .rules import broadcast, reshape, splat


def _pairs_shapes(call) -> tuple[tuple, tuple]:
    """Shapes of (a, b) that give every pair of values in the form onnxruntime's
    broadcasting loop computes this call in: an operand that is one value per run of the
    innermost dim is folded into the fixed part first (cpu_ref's _one_per_span)."""
    a, x, out = call.inputs[0], call.inputs[3], call.outputs[0].shape

    def per_span(t):
        return t.type.size == 1 or (len(out) > 0 and out[-1] > 1 and
                                    (t.rank == 0 or t.shape[-1] == 1))
    if per_span(a):
        return (256, 1), (256, 256)
    if per_span(x):
        return (256, 256), (256, 1)
    return (256, 256), (256, 256)


def sum_table(call) -> np.ndarray:
    """cpu_ref's result for every (a, b) pair, at `(a - lo) * 256 + (b - lo)`."""
    import legato
    from legato.plugin_api import GraphBuilder
    dtype = call.inputs[0].dtype
    lo = RANGES[dtype][0]
    values = np.arange(lo, lo + 256)
    a_shape, b_shape = _pairs_shapes(call)
    col, row = values.reshape(256, 1), np.broadcast_to(values.reshape(1, 256), (256, 256))
    if b_shape == (256, 1):  # b runs down the rows: entry [i, j] is (a = j, b = i)
        a, x = row, col
    else:
        a, x = (col if a_shape == (256, 1) else row.T), row
    a, x = a.astype(dtype), x.astype(dtype)
    g = GraphBuilder()
    ins = [g.input("a", a_shape, dtype), g.input("b", b_shape, dtype)]
    y = g.call("qnn.add", ins[0], *call.inputs[1:3], ins[1], *call.inputs[4:], **call.attrs)
    table = np.asarray(legato.reference(g.build(y))(a, x))
    if b_shape[1] == 1:  # b ran down the rows: entry [i, j] is (a = j, b = i)
        table = table.T
    return np.ascontiguousarray(table).reshape(-1)


def qadd(b, call):
    """qnn.add of int8/uint8 with constant parameters as one GATHER of cpu_ref's sums."""
    a, x = call.inputs[0], call.inputs[3]
    if a.dtype not in RANGES or consts(*call.inputs[1:3], *call.inputs[4:]) is None:
        return None
    lo = RANGES[a.dtype][0]
    wa, wx = b.cast(a, dtype="int32"), b.cast(x, dtype="int32")
    index = b.add(b.add(b.multiply(wa, splat(b, wa, 256, np.int32)), wx),
                  splat(b, wa, -lo * 257, np.int32))
    out = call.outputs[0]
    count = math.prod(out.shape)
    index = reshape(b, broadcast(b, index, tuple(out.shape)), (1, count))
    table = b.const(sum_table(call).astype(out.dtype).reshape(1, 65536, 1))
    return reshape(b, b.call("tosa.gather", table, index), out.shape)
