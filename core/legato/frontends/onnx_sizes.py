"""Symbolic sizes read as data, computed at run time.

Shape arithmetic on symbolic dims folds at import into symbolic constants (object arrays
of expressions), which reshape targets and other shape operands take as they are. Some
exports also use sizes as values: a decoder's position ids are `Range(past, past + seq)`,
its causal mask compares such ranges. A call whose operand is a symbolic constant gets
that operand computed from the symbols instead: an expression `e` that no binding makes
negative is the element count of a tensor of `e` ones, so `sum(broadcast_to(1, [e]))` is
its value at every binding (a polynomial with negative terms is its positive part minus
its negative part). Floors and remainders of sizes are atoms like symbols here.
"""
from __future__ import annotations

import numpy as np

from ..errors import LegatoError
from ..ir import Call, Const
from ..symbols import Expr, never_negative
from .onnx_fold import is_symbolic_const


def with_sizes_computed(b, calls: list[Call], cache: dict) -> list[Call]:
    """`calls` with each symbolic-constant operand replaced by a value computed at run time
    (the computing calls are emitted into `b` first); `cache` shares values between
    calls by their sizes' text."""
    out = []
    for call in calls:
        if any(is_symbolic_const(v) for v in call.inputs):
            inputs = tuple(_computed(b, v, cache) if is_symbolic_const(v) else v
                           for v in call.inputs)
            call = Call(call.op, inputs, call.attrs, call.outputs, call.origin)
        out.append(call)
    return out


def _computed(b, const: Const, cache: dict):
    key = (const.dtype, tuple(map(str, const.data.ravel())), const.data.shape)
    if key not in cache:
        parts = [_scalar(b, v, const.dtype) for v in const.data.ravel()]
        value = parts[0] if len(parts) == 1 else b.call(
            "concat", *(b.call("reshape", p, shape=[1]) for p in parts), axis=0)
        cache[key] = b.call("reshape", value, shape=list(const.data.shape))
    return cache[key]


def _scalar(b, size, dtype: str):
    """A 0-d `dtype` tensor holding `size` (an int or an expression of symbols)."""
    if not isinstance(size, Expr):
        return Const.of(np.array(size, dtype))
    if not all(isinstance(a, str) or never_negative(a.num) for m, _ in size.terms for a in m):
        raise LegatoError(f"the symbolic size {size} is read as data, and legato computes "
                          "sizes at run time from sums and products of symbols (a floor or "
                          "remainder of a possibly negative expression is not one)")
    positive = Expr(tuple((m, c) for m, c in size.terms if c > 0), max(size.const, 0))
    negative = Expr(tuple((m, -c) for m, c in size.terms if c < 0), max(-size.const, 0))
    value = _count(b, positive, dtype)
    return value if not negative.terms and not negative.const else \
        b.call("subtract", value, _count(b, negative, dtype))


def _count(b, size: Expr, dtype: str):
    """`size` as a 0-d tensor: the sum of `size` + 1 ones, less one (the extra one keeps
    the tensor non-empty when `size` is 0)."""
    if not size.terms:
        return Const.of(np.array(size.const, dtype))
    ones = b.call("broadcast_to", Const.of(np.array(1, dtype)), shape=[size + 1])
    return b.call("subtract", b.call("sum", ones, axes=[0]), Const.of(np.array(1, dtype)))
