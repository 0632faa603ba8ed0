"""Integer bit shifts as the importers write them, in legato's integer arithmetic (it has no
shift op): a left shift is a wrapping multiply by 2**s, a right shift a division rounding
down. ONNX's BitShift and PyTorch's shifts agree on every count: one outside [0, bits)
gives 0, or -1 for a negative value shifted right (its sign alone)."""
from __future__ import annotations

import numpy as np

from ...ir import Const


def shift(b, x, amount, left: bool):
    """x << amount (`left`) or x >> amount, both integer tensors of x's dtype."""
    info = np.iinfo(x.dtype)
    width, signed = info.bits, info.min < 0

    def const(v):
        return Const.of(np.array(v, dtype=x.dtype))
    outside = b.logical_or(b.less(amount, const(0)), b.greater(amount, const(width - 1)))
    # 2 ** (width - 1) wraps to the minimum: right for a left shift, not as a divisor
    step = b.clip(amount, min=0.0, max=float(width - 2 if signed and not left else width - 1))
    power = b.power(const(2), step)
    if left:
        return b.where(outside, const(0), b.multiply(x, power))
    if not signed:
        return b.where(outside, const(0), b.divide(x, power))
    # signed: floor division; shifting by width - 1 or more (or a negative amount) keeps
    # only the sign
    quotient = b.divide(x, power)
    rest = b.subtract(x, b.multiply(quotient, power))
    floor = b.subtract(quotient, b.cast(b.less(rest, const(0)), dtype=x.dtype))
    sign = b.where(b.less(x, const(0)), const(-1), const(0))
    only_sign = b.logical_or(outside, b.equal(amount, const(width - 1)))
    return b.where(only_sign, sign, floor)
