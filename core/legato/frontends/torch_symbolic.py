"""Symbolic sizes in torch.export programs (`dynamic_shapes=`): the SymInts of a
program's tensor metadata as legato's symbolic dims, `aten.sym_size` and the Python
arithmetic on sizes that torch.export records, and the ranges it assumed as guards."""
from __future__ import annotations

import operator

from ..errors import LegatoError, ShapeError
from ..symbols import Expr, parse_dim
from .torch_ops import ATEN


def dim(size):
    """An int, or the symbolic dim of a SymInt (`s0`, `2*s0`); refused by name when torch's
    expression is outside legato's algebra (Max, Mod in sympy form, ...)."""
    if isinstance(size, int):
        return size
    node = getattr(size, "node", None)
    if node is not None and node.is_nested_int():
        raise LegatoError(f"nested-int size {size} is not supported")
    try:
        return int(size) if getattr(node, "expr", None) is not None and \
            node.expr.is_number else parse_dim(str(size))
    except ShapeError as err:
        raise LegatoError(f"torch's symbolic size {size} is not an expression legato has "
                          f"(integer polynomials with // and %): {err}") from None


def guards(program, symbols) -> list[str]:
    """The ranges torch.export assumed of `symbols` (those of the inputs' shapes), as
    guards (`2<=s0`, `s0<=512`); infinite bounds say nothing."""
    found = []
    for symbol, bounds in program.range_constraints.items():
        name = str(symbol)
        if name not in symbols:
            continue  # an unbacked size (`.item()`), which no input binds
        lower, upper = _finite(bounds.lower), _finite(bounds.upper)
        if lower is not None and lower > 0:
            found.append(f"{lower}<={name}")
        if upper is not None:
            found.append(f"{name}<={upper}")
    return found


def _finite(bound) -> int | None:
    try:
        return int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


@lambda f: ATEN.setdefault("aten.sym_size.int", f)
def sym_size(b, x, d):
    return x.shape[d]


def _arith(fn):
    def convert(b, x, y):
        if not all(isinstance(v, (int, Expr)) for v in (x, y)):
            raise LegatoError(f"{fn.__name__} of sizes needs sizes, got {x!r} and {y!r}")
        return fn(x, y)
    return convert


for _op in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod):
    ATEN.setdefault(str(_op), _arith(_op))
