"""Symbolic sizes read as data, computed at run time.

Shape arithmetic on symbolic dims folds at import into symbolic constants (object arrays
of expressions), which reshape targets and other shape operands take as they are. Some
exports also use sizes as values: a decoder's position ids are `Range(past, past + seq)`,
its causal mask compares such ranges. A call whose operand is a symbolic constant gets
that operand computed from the symbols instead: a symbol `s` is the element count of a
tensor of `s` ones, so `sum(broadcast_to(1, [s]))` is its value at every binding, and an
expression is the sum of its terms' products of such counts. Floors and remainders of
sizes are counted like symbols.
"""
from __future__ import annotations

import numpy as np

from ...ir import Call, Const
from ...ir.errors import LegatoError
from ...ir.symbols import Expr, never_negative
from ..common.fold import is_symbolic_const


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
        parts = [_scalar(b, v, const.dtype, cache) for v in const.data.ravel()]
        value = parts[0] if len(parts) == 1 else b.call(
            "concat", *(b.call("reshape", p, shape=[1]) for p in parts), axis=0)
        cache[key] = b.call("reshape", value, shape=list(const.data.shape))
    return cache[key]


def _scalar(b, size, dtype: str, cache: dict):
    """A 0-d `dtype` tensor holding `size` (an int or a polynomial of symbols): each
    symbol (or floor or remainder of sizes) counted once, then multiplied and added."""
    if not isinstance(size, Expr):
        return Const.of(np.array(size, dtype))
    total = None
    for monomial, coeff in size.terms:
        term = _atom(b, monomial[0], dtype, cache)
        for atom in monomial[1:]:
            term = b.call("multiply", term, _atom(b, atom, dtype, cache))
        if coeff != 1:
            term = b.call("multiply", term, Const.of(np.array(coeff, dtype)))
        total = term if total is None else b.call("add", total, term)
    return total if not size.const else \
        b.call("add", total, Const.of(np.array(size.const, dtype)))


def _atom(b, atom, dtype: str, cache: dict):
    """A symbol's value (or a floor or remainder of sizes) as a 0-d tensor: the sum of
    value + 1 ones, less one (the extra one keeps the tensor non-empty at 0)."""
    key = ("atom", atom, dtype)
    if key not in cache:
        if not (isinstance(atom, str) or never_negative(atom.num)):
            raise LegatoError(f"the symbolic size {atom} is read as data, and legato computes "
                              "sizes at run time from sizes (a floor or remainder of a "
                              "possibly negative expression is not one)")
        extent = Expr((((atom,), 1),), 1)
        ones = b.call("broadcast_to", Const.of(np.array(1, dtype)), shape=[extent])
        cache[key] = b.call("subtract", b.call("sum", ones, axes=[0]),
                            Const.of(np.array(1, dtype)))
    return cache[key]
