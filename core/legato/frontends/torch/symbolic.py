"""Symbolic sizes in torch.export programs (`dynamic_shapes=`): the SymInts of a
program's tensor metadata as legato's symbolic dims, `aten.sym_size` and the Python
arithmetic on sizes that torch.export records, and the ranges it assumed as guards."""
from __future__ import annotations

import inspect
import operator
import re

from ...ir.errors import LegatoError, ShapeError
from ...ir.symbols import Expr, parse_dim
from .ops import ATEN

_TORCH_SYMBOL = re.compile(r"\b[su]\d+\b")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dim(size, names=None):
    """An int, or the symbolic dim of a SymInt (`s0`, `2*s0`, with torch's symbols renamed
    by `names`, e.g. {'s0': 'seq'}); refused by name when torch's expression is outside
    legato's algebra (Max, Mod in sympy form, ...)."""
    if isinstance(size, int):
        return size
    node = getattr(size, "node", None)
    if node is not None and node.is_nested_int():
        raise LegatoError(f"nested-int size {size} is not supported")
    text = str(size)
    if names:
        text = _TORCH_SYMBOL.sub(lambda found: names.get(found[0], found[0]), text)
    try:
        return int(size) if getattr(node, "expr", None) is not None and \
            node.expr.is_number else parse_dim(text)
    except ShapeError as err:
        raise LegatoError(f"torch's symbolic size {size} is not an expression legato has "
                          f"(integer polynomials with // and %): {err}") from None


def dim_names(program, module, example_inputs, dynamic_shapes) -> dict[str, str]:
    """{torch's symbol: the name of the user's `Dim`} for the inputs' dims that
    `dynamic_shapes` made symbolic (`s27` -> `seq`), so shapes, guards and errors say
    the names the user chose. Empty where the spec's layout is not a plain one (a tuple or a
    dict by argument name, of per-tensor dicts or lists of Dims)."""
    import torch.utils._pytree as pytree
    try:
        specs = _by_position(module, example_inputs, dynamic_shapes)
        leaves, tree = pytree.tree_flatten(tuple(example_inputs))
        per_leaf = tree.flatten_up_to(specs)
    except Exception:  # noqa: BLE001 - a spec torch accepts in a form not read here
        return {}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = [placeholders.get(name) for name in program.graph_signature.user_inputs]
    if len(inputs) != len(leaves):
        return {}
    names: dict[str, str] = {}
    for node, spec in zip(inputs, per_leaf):
        shape = getattr(node.meta.get("val") if node is not None else None, "shape", ())
        axes = spec.items() if isinstance(spec, dict) else \
            enumerate(spec) if isinstance(spec, (list, tuple)) else ()
        for axis, chosen in axes:
            name = getattr(chosen, "__name__", None)
            text = str(shape[axis]) if isinstance(axis, int) and axis < len(shape) else ""
            if name and _NAME.fullmatch(name) and _TORCH_SYMBOL.fullmatch(text) and \
                    not _TORCH_SYMBOL.fullmatch(name):  # (`s3` could be another dim's)
                names.setdefault(text, name)
    return names if len(set(names.values())) == len(names) else {}


def _by_position(module, example_inputs, dynamic_shapes):
    if not isinstance(dynamic_shapes, dict):
        return tuple(dynamic_shapes)
    forward = getattr(module, "forward", module)
    bound = inspect.signature(forward).bind(*example_inputs)
    return tuple(dynamic_shapes.get(name) for name in bound.arguments)


def guards(program, symbols, names=None) -> list[str]:
    """The ranges torch.export assumed of `symbols` (those of the inputs' shapes), as
    guards (`2<=s0`, `s0<=512`); infinite bounds say nothing."""
    found = []
    for symbol, bounds in program.range_constraints.items():
        name = (names or {}).get(str(symbol), str(symbol))
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
