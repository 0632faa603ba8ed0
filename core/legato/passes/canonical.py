"""The canonical form that recomposition compares in (legato.passes.patterns): the
differences exporters introduce without changing the maths are removed from a list of
primitive calls. Division or subtraction by a constant becomes multiplication or addition,
`x ** 2` and `x ** 3` become products, `x ** 0.5` a square root, `1 / sqrt(v)` and
`a / sqrt(v)` become `rsqrt(v)`, and `x * 1`, `x + 0` are dropped (their users read x).
"""
from __future__ import annotations

import math
from collections import Counter
from itertools import chain
from typing import Callable

import numpy as np

from ..ir import Call, Const, Value
from ..ir.graph import DTYPES
from ..ir.calls import make_call, new_call
from ..ir.errors import ShapeError
from ..ir.shapes import broadcast_shapes


SCALAR_LIMIT = 4096  # a larger constant is a weight, not a broadcast scalar


def scalar_value(value) -> float | None:
    """The value of a constant whose elements are all equal, else None."""
    if not isinstance(value, Const) or value.dtype == "bool":
        return None
    data = value.data
    if data.size == 1:
        return float(data.ravel()[0])
    if data.size == 0 or data.size > SCALAR_LIMIT:
        return None
    flat = data.ravel()
    if flat[0] != flat[-1]:  # the common case (a weight or a bias) decided at once
        return None
    return float(flat[0]) if bool((flat == flat[0]).all()) else None


_FLOATS = frozenset(d for d in DTYPES if d.startswith(("float", "bfloat")))


def _is_float(value) -> bool:
    return value is not None and value.type.dtype in _FLOATS


def _const_like(number: float, like: Const) -> Const:
    data = np.full(like.data.shape, number, dtype=like.data.dtype)
    data.setflags(write=False)  # made here and read-only: the constant adopts it
    return Const.of(data, copy=False)


MAX_CONSTS = 4096  # the constants `canonical` made that a registry keeps
MAX_SCALARS = 1024  # small constants whose scalar value (or none) a registry keeps


def _consts_like(registry) -> Callable[[float, Const], Const]:
    """`_const_like`, keeping what it made on the registry by number (and its sign: 0.0
    and -0.0 differ), shape and dtype: every layer divides by the same count or scale,
    and constants never change, so the views of all of them can share one."""
    made = registry.derived("recompose.consts")

    def const_like(number: float, like: Const) -> Const:
        key = (number, math.copysign(1.0, number), like.data.shape, like.data.dtype)
        found = made.get(key)
        if found is None:
            if len(made) >= MAX_CONSTS:
                made.clear()
            found = made[key] = _const_like(number, like)
        return found
    return const_like


def canonical(registry, calls: list[Call], owners: list[tuple[int, ...]], results=(),
              identities: set | None = None):
    """Rewrite `calls` (with their owners) into the canonical form; returns both lists.
    The owners of calls dropped as identities (x * 1, x + 0) are added to `identities`:
    they stand for no view call, and a rewrite may leave them unused."""
    identities = set() if identities is None else identities
    dropped: set[int] = set()
    out_calls, out_owners = [], []
    found: dict = {}  # "made", "uses" of the sqrt results: worked out when a division asks

    no_attrs: dict = {}  # op -> its attributes when given none (every call emit writes)
    const_like = _consts_like(registry)
    fresh_types = registry.derived("recompose.fresh_types")

    def emit(op, inputs, attrs, outputs, owner):
        normal = no_attrs.get(op) if not attrs else None
        if normal is None:
            normal = registry.get(op).normalize_attrs(attrs)
            if not attrs:
                no_attrs[op] = normal
        out_calls.append(new_call(op, tuple(inputs), normal, tuple(outputs), None))
        out_owners.append(owner)

    def fresh(op, inputs):
        """A new result of `op` on `inputs` (its type inferred once per op and input types:
        a value the view names, not a call of its own)."""
        key = (op, tuple([v.type for v in inputs]))
        type_ = fresh_types.get(key)
        if type_ is None:
            type_ = make_call(registry, op, inputs, {}).outputs[0].type
            if registry.get(op).const_check is None:
                if len(fresh_types) >= MAX_CONSTS:
                    fresh_types.clear()
                fresh_types[key] = type_
        return Value(type_)

    def sqrts():
        """The sqrt calls by result (index into `calls`), and how often each result is read
        (by `calls` and `results`): worked out when a division first asks."""
        if not found:
            made = found["made"] = {id(call.outputs[0]): i for i, call in enumerate(calls)
                                    if call.op == "sqrt" and call.outputs}
            reads = Counter(map(id, chain.from_iterable([call.inputs for call in calls])))
            reads.update(map(id, results))
            found["uses"] = {key: reads[key] for key in made}
        return found["made"], found["uses"]

    def sqrt_input(value):
        """If `value` is a single-use sqrt, its input (and the sqrt is dropped)."""
        made, uses = sqrts()
        j = made.get(id(value))
        if j is None or uses[id(value)] != 1:
            return None
        dropped.add(j)
        return calls[j].inputs[0]

    # id of a constant -> (the constant, its scalar_value): kept on the registry with the
    # constant itself (so the id stays its own while the entry lives), as layers and the
    # next recomposition of a model read the same constants
    values = registry.derived("recompose.scalars")

    def scalar(v):
        if not isinstance(v, Const):
            return None
        found = values.get(id(v))
        if found is not None:
            return found[1]
        value = scalar_value(v)
        if v.data.size <= SCALAR_LIMIT:  # (a weight is told at once, and not held)
            if len(values) >= MAX_SCALARS:
                values.clear()
            values[id(v)] = (v, value)
        return value

    shapes_kept: dict = {}  # (shape of a, shape of b) -> broadcasting keeps a's

    def keeps_shape(a, b):
        key = (a.shape, b.shape)
        kept = shapes_kept.get(key)
        if kept is None:
            kept = shapes_kept[key] = _keeps_shape(a, b)
        return kept

    result_ids = {id(r) for r in results}
    rename: dict[int, Value] = {}  # results of dropped calls -> the value they equal
    keep_call, keep_owner = out_calls.append, out_owners.append
    for call, owner in zip(calls, owners):
        if rename and not rename.keys().isdisjoint(map(id, call.inputs)):
            call = new_call(call.op, tuple([rename.get(id(v), v) if v is not None else None
                                            for v in call.inputs]), call.attrs, call.outputs,
                            call.origin)
        op = call.op
        # most calls are kept as they are: any op but these five, a sum or product of two
        # computed values, a call whose result is not a float (nothing below applies)
        if op not in CANONICAL_OPS:
            keep_call(call)
            keep_owner(owner)
            continue
        ins = call.inputs
        n = len(ins)
        a = ins[0] if n else None
        b = ins[1] if n > 1 else None
        out = call.outputs[0] if call.outputs else None
        if op in _SUM_PRODUCT:
            same = None
            if (isinstance(a, Const) or isinstance(b, Const) or n != 2) and \
                    id(out) not in result_ids:
                same = _identity_operand(op, a, b, out, scalar)
            if same is None:
                keep_call(call)
                keep_owner(owner)
            else:  # x * 1, x + 0: the call is its other operand
                rename[id(out)] = rename.get(id(same), same)
                identities.update(owner)
            continue
        if not _is_float(out):
            keep_call(call)
            keep_owner(owner)
            continue
        c = scalar(b)
        if op == "divide":
            if scalar(a) == 1.0 and (root := sqrt_input(b)) is not None:
                emit("rsqrt", [root], {}, [out], owner + _owner_of(sqrts()[0], owners, b))
            elif c not in (None, 0.0):
                emit("multiply", [a, const_like(1.0 / c, b)], {}, [out], owner)
            elif (root := sqrt_input(b)) is not None:
                inv = fresh("rsqrt", [root])
                emit("rsqrt", [root], {}, [inv], owner + _owner_of(sqrts()[0], owners, b))
                emit("multiply", [a, inv], {}, [out], owner)
            else:
                keep_call(call)
                keep_owner(owner)
        elif op == "subtract" and c is not None:
            emit("add", [a, const_like(-c, b)], {}, [out], owner)
        elif op == "power" and c in (2.0, 3.0) and keeps_shape(a, b):
            if c == 2.0:
                emit("multiply", [a, a], {}, [out], owner)
            else:
                square = fresh("multiply", [a, a])
                emit("multiply", [a, a], {}, [square], owner)
                emit("multiply", [square, a], {}, [out], owner)
        elif op == "power" and c in (0.5, -0.5) and keeps_shape(a, b):
            emit("sqrt" if c == 0.5 else "rsqrt", [a], {}, [out], owner)
        else:
            keep_call(call)
            keep_owner(owner)
    if not dropped:
        return out_calls, out_owners
    at = []  # where the absorbed sqrt calls went in the output (list.index: by identity)
    for j in dropped:
        try:
            at.append(out_calls.index(calls[j]))
        except ValueError:  # rewritten on its way (an input renamed): it stays
            pass
    for k in sorted(at, reverse=True):
        del out_calls[k]
        del out_owners[k]
    return out_calls, out_owners


# the ops `canonical` may rewrite or drop; any other call is kept as it is
CANONICAL_OPS = frozenset({"divide", "subtract", "power", "multiply", "add"})
_SUM_PRODUCT = frozenset({"add", "multiply"})


def _identity_operand(op, a, b, out, scalar=scalar_value):
    """The operand a `multiply` by ones or an `add` of zeros returns unchanged, or None."""
    if op not in ("multiply", "add") or not _is_float(out):
        return None
    neutral = 1.0 if op == "multiply" else 0.0
    for x, y in ((a, b), (b, a)):
        if isinstance(y, Const) and x is not None and y.data.size and \
                y.data.item(0) == neutral and x.type == out.type and scalar(y) == neutral:
            return x
    return None


def _keeps_shape(a, b) -> bool:
    try:
        return broadcast_shapes(a.shape, b.shape) == tuple(a.shape)
    except ShapeError:  # symbolic dims that do not broadcast, or not known to
        return False


def _owner_of(made, owners, value) -> tuple[int, ...]:
    j = made.get(id(value))
    return () if j is None else owners[j]
