"""Integer ops on a pro_fp backend. TOSA 1.0's pro_fp has integer ADD, SUB, MUL and CASTs
only; compares, SELECT, MAXIMUM/MINIMUM, reductions, data movement, GATHER of integers and
INTDIV are pro_int. So the rules here compute them on float32 copies of the values, which
hold integers exactly up to 2**24 in magnitude (narrowing.FLOAT_EXACT), and cast integer
results back: exact for the ids, positions, masks and shapes models compute with. int64
counts as the int32 it is printed as (narrowing.py).
"""
from __future__ import annotations

from legato.plugin_api import Const, clip, make_call

from .limits import shaped_rule
from .narrowing import float_exact

INT_DTYPES = ("int32", "int16", "int8", "int64")


def as_float(b, v, what: str):
    if isinstance(v, Const):
        return b.const(float_exact(v.data, f"{what} {clip(v.name or str(v.type), 60)}"))
    return b.cast(v, dtype="float32")


def back(b, v, dtype: str, truncate: bool = False):
    """A float32 result of integer (exact) or 0/1 values as `dtype`; with `truncate`,
    values that may have a fraction, truncated as legato's cast does."""
    if v.dtype == dtype:
        return v
    if dtype in INT_DTYPES and not truncate:
        return b.call("tosa.cast", v, dtype=dtype)  # TOSA CAST rounds: exact on integers
    return b.cast(v, dtype=dtype)


def float_positions(call, bools: bool) -> list[int]:
    """The integer inputs (and bool ones if `bools`, but where's condition)."""
    return [i for i, v in enumerate(call.inputs) if v is not None and (
        v.dtype in INT_DTYPES or bools and v.dtype == "bool" and
        not (call.op == "where" and i == 0))]


def via_float_call(b, call, positions, then=None, truncate: bool = False):
    """`call` on float32 copies of its inputs at `positions`, rewritten by the rule `then`
    if it takes the float call; results cast back (exact: they hold integers or 0/1).
    pro_fp has integer add, sub, mul and casts only; float32 holds integers exactly up to
    2**24 (narrowing.FLOAT_EXACT)."""
    inputs = list(call.inputs)
    for i in positions:
        inputs[i] = as_float(b, inputs[i], f"{call.op}'s integer constant")
    made = None
    if then is not None:  # the op's own rule, in this rewrite (its op again would loop)
        made = then(b, make_call(b.registry, call.op, inputs, call.attrs))
    if made is None:
        made = b.call(call.op, *inputs, **call.attrs)
    made = made if isinstance(made, tuple) else (made,)
    results = tuple(back(b, m, o.dtype, truncate) for m, o in zip(made, call.outputs))
    return results if len(results) > 1 else results[0]


def via_float(then=None, bools: bool = True, truncate: bool = False):
    """A rule for an op pro_fp has for floats only (TOSA 1.0 has integer compares,
    selects, min/max, reductions and data movement in pro_int): integer inputs (and bool
    ones, if `bools`) as float32, then the op's own rule `then`; other calls go to `then`
    directly. `truncate`: results may have fractions (clip's bounds), cast as legato
    casts."""
    @shaped_rule
    def rule(b, call):
        positions = float_positions(call, bools)
        if positions:
            return via_float_call(b, call, positions, then, truncate)
        return then(b, call) if then is not None else None
    rule.then = then  # what pro_int, which has the integer forms, runs instead
    rule.__name__ = rule.__qualname__ = "via_float" + (f"_then_{then.__name__}" if then
                                                       else "")
    return rule


def trunc(b, x):
    return b.where(b.less(x, 0.0), b.ceil(x), b.floor(x))


def int_division(b, call):
    """(quotient, remainder) of integers, C style (toward zero; the remainder has the sign
    of the dividend; a divisor of 0 gives 0, 0), in float32: pro_fp has no INTDIV. The
    quotient from the reciprocal can be one off; one correction step makes both exact
    while the quotient stays below 2**22 in magnitude."""
    x, y = call.inputs
    a = as_float(b, x, f"{call.op}'s integer constant")
    d = as_float(b, y, f"{call.op}'s integer constant")
    zero = b.equal(d, 0.0)
    d = b.where(zero, 1.0, d)
    q = trunc(b, b.multiply(a, b.call("tosa.reciprocal", d)))
    r = b.subtract(a, b.multiply(q, d))
    step = b.where(b.equal(b.less(a, 0.0), b.less(d, 0.0)), b.scalar(1.0, "float32"),
                   b.scalar(-1.0, "float32"))  # the quotient's sign
    short = b.logical_not(b.less(b.abs(r), b.abs(d)))  # |r| >= |d|: one step short
    q, r = b.where(short, b.add(q, step), q), \
        b.where(short, b.subtract(r, b.multiply(step, d)), r)
    over = b.less(b.multiply(r, a), 0.0)  # the remainder's sign is not a's: one step over
    q, r = b.where(over, b.subtract(q, step), q), \
        b.where(over, b.add(r, b.multiply(step, d)), r)
    return b.where(zero, 0.0, q), b.where(zero, 0.0, r)


def integer_fmod(b, call):
    """fmod of integers (exactly, see int_division); float fmod has no exact TOSA form."""
    if call.inputs[0].dtype not in INT_DTYPES:
        return None
    _, rest = int_division(b, call)
    return back(b, rest, call.outputs[0].dtype)
