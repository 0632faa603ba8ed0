"""Shape buckets: one emitted artifact with a function per size of a model's symbolic dims.

An emitting backend writes code for concrete shapes (TOSA 1.0 at level 8K takes no dynamic
dimension), so a model with symbolic dims is emitted once per binding the user asks for:
`shape_buckets={"seq": [64, 128, 256]}` gives the functions `main_seq64`, `main_seq128`
and `main_seq256`; several symbols with several sizes give every combination (the cross
product), named by each symbol in the order of their names (`main_batch1_seq64`). The module
legalized once over the symbols is made concrete per bucket (`specialize`), and what waited
for the sizes (calls whose rewrite or whose backend check needs them) is legalized then.

An emitter that writes such an artifact has a `buckets` attribute: a callable taking the
list of `Bucket`s (name, bindings, concrete legalized module) and returning the artifact,
with each function's bindings recorded in it.
"""
from __future__ import annotations

import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

from ..ir import Module
from ..ir.errors import LegatoError, ShapeError, quote
from ..ir.symbols import GUARDS, check_guard, collecting_guards
from .specialize import specialize

MAX_BUCKETS = 64  # functions in one artifact; a larger cross product is refused


@dataclass(frozen=True)
class Bucket:
    """One function of the artifact: its name, the sizes of the symbols, its module."""
    name: str
    bindings: Mapping[str, int]
    module: Module


def input_symbols(module: Module) -> list[str]:
    """The names of the symbols in main's parameter shapes, sorted."""
    return sorted({name for p in module.main.params for d in p.shape
                   if not isinstance(d, int) for name in d.symbols()})


def plan_buckets(module: Module, shape_buckets) -> list[dict[str, int]]:
    """Every binding `shape_buckets` asks for ({symbol: size or sizes}), checked: each
    symbol of the inputs gets at least one size, none is unknown, sizes are ints >= 1, the
    import's guards (`seq<=512`) hold, and there are at most MAX_BUCKETS."""
    if not isinstance(shape_buckets, Mapping) or not shape_buckets:
        raise LegatoError(f"shape_buckets maps symbol names to sizes ({{'seq': [64, 128]}}), "
                          f"got {quote(shape_buckets)}")
    symbols = input_symbols(module)
    unknown = sorted(set(map(str, shape_buckets)) - set(symbols))
    if unknown:
        raise LegatoError(f"shape_buckets names {', '.join(map(repr, unknown))}, which the "
                          f"model's inputs do not have; their symbolic dims are "
                          f"{', '.join(symbols) or 'none (the model is static)'}")
    missing = [s for s in symbols if s not in shape_buckets]
    if missing:
        raise LegatoError(f"shape_buckets leaves {', '.join(map(repr, missing))} symbolic; "
                          "every function of the artifact has concrete shapes: give "
                          + ", ".join(f"{s!r} one size or several" for s in missing))
    sizes = [_sizes(s, shape_buckets[s]) for s in symbols]
    count = 1
    for values in sizes:
        count *= len(values)
    if count > MAX_BUCKETS:
        raise LegatoError(f"shape_buckets asks for {count} functions (every combination of "
                          + " x ".join(f"{len(v)} {s}" for s, v in zip(symbols, sizes))
                          + f"); at most {MAX_BUCKETS} go in one artifact")
    plans = [dict(zip(symbols, combo)) for combo in itertools.product(*sizes)]
    _check_guards(module.main.attrs.get(GUARDS, ()), plans)
    return plans


def _check_guards(guards, plans) -> None:
    for bindings in plans:
        for guard in guards:
            if not check_guard(guard, bindings):
                raise LegatoError(f"shape bucket {bucket_name(bindings)} breaks {guard}, which "
                                  "the model assumes (e.g. a position table of that many rows)")


@contextmanager
def guarded(plans) -> Iterator[None]:
    """Passes that rebuild calls over the symbols (layout conversion, legalization) may
    infer shapes that assume a bound (a slice ending at seq of a 40-row table: seq<=40);
    inside, such assumptions are collected, and every bucket must meet them."""
    with collecting_guards() as assumed:
        yield
    _check_guards(assumed, plans)


def _sizes(symbol: str, value) -> list[int]:
    values = [value] if isinstance(value, int) else value
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values or \
            any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise LegatoError(f"shape_buckets[{symbol!r}] is {quote(value)}: give a size or a list "
                          "of sizes, each an int >= 1")
    if len(set(values)) != len(values):
        raise LegatoError(f"shape_buckets[{symbol!r}] repeats a size: {quote(value)}")
    return list(values)


def bucket_name(bindings: Mapping[str, int]) -> str:
    """`main_seq64`, `main_batch1_seq64`: the symbols in name order (characters other
    than letters, digits and _ become _)."""
    return "main_" + "_".join(re.sub(r"\W", "_", name) + str(size)
                              for name, size in sorted(bindings.items()))


def specialize_buckets(module: Module, plans, registry,
                       finish: Callable[[Module], Module]) -> list[Bucket]:
    """A Bucket per binding: `module` (legalized over the symbols) made concrete, then
    `finish`ed (what waited for the sizes folded and legalized)."""
    buckets = []
    for bindings in plans:
        name = bucket_name(bindings)
        try:
            concrete, _ = specialize(module, bindings, registry)
        except ShapeError as err:
            raise LegatoError(f"shape bucket {name}: {err}") from None
        try:
            buckets.append(Bucket(name, dict(bindings), finish(concrete)))
        except LegatoError as err:
            raise type(err)(f"shape bucket {name}: {err}") from None
    return buckets


def emit_buckets(backend, buckets: list[Bucket]):
    """The backend's artifact holding every bucket's function."""
    emit = getattr(backend.emitter, "buckets", None)
    if emit is None:
        raise LegatoError(f"backend {backend.name}'s emitter writes one function, not shape "
                          "buckets (its emitter has no `buckets`); compile one size at a time "
                          "with input_shapes=")
    return emit(buckets)
