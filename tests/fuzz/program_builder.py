"""Random well-typed programs: the building context that generators draw values from.

A `ProgramContext` wraps a `legato.GraphBuilder` and keeps a pool of the values made so
far. A generator (legato.testing.generators) asks it for an input of some dtype and
rank, gets one from the pool or a fresh parameter or constant, and calls its op. Each
value records whether it is *exact*: derived from the fed data only by operations that
every backend computes bit for bit. Ops with a discontinuous result (round, a float
comparison, a cast to int, argmax, quantize) only take exact inputs, so a difference in
the last bit of an intermediate cannot flip their answer and look like a bug.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import legato
from legato.ir.builder import make_call
from legato.testing.draw import FLOATS, Draw

# ops whose float output is exactly the same everywhere when the inputs are exact
EXACT_OPS = {"abs", "negative", "maximum", "minimum", "max", "min", "where", "reshape",
             "permute_dims", "broadcast_to", "concat", "split", "strided_slice", "take",
             "pad", "squeeze", "expand_dims", "flatten", "nn.relu", "clip", "round", "floor",
             "ceil", "cast", "tosa.gather", "nn.max_pool2d", "equal", "less", "greater",
             "logical_and", "logical_or", "logical_not", "argmax"}


@dataclass
class Entry:
    value: legato.Value
    exact: bool
    fresh: bool   # a parameter or constant: values the test chose


class ProgramContext(Draw):
    """A Draw (random shapes and data) that builds a program: the op generators of
    legato.testing.generators call it."""

    def __init__(self, rng: np.random.Generator, edge: bool):
        super().__init__(rng, edge)
        self.b = legato.GraphBuilder()
        self.pool: list[Entry] = []
        self.feeds: list[np.ndarray] = []
        self.kinds: list[str | None] = []   # how to draw other values for each feed
        self.ops: list[str] = []
        self.refusals: list[tuple[str, str]] = []   # (op, message) of calls not made

    @property
    def registry(self):
        return self.b.registry

    def fresh(self, shape, dtype: str | None = None, kind: str = "normal",
              const: bool | None = None) -> legato.Value:
        """A new parameter (fed at run time) or constant with values of `kind`."""
        dtype = dtype or self.float
        array = self.data(shape, dtype, kind)
        if const is None:
            const = self.chance(0.25)
        if const:
            value = self.b.const(array)
        else:
            value = self.b.input(f"x{len(self.feeds)}", array.shape, dtype)
            self.feeds.append(array)
            self.kinds.append(kind)
        self.pool.append(Entry(value, exact=True, fresh=True))
        return value

    def feed(self, array: np.ndarray) -> legato.Value:
        """A parameter fed with exactly `array`."""
        array = np.asarray(array)  # arithmetic on 0-d arrays gives numpy scalars
        value = self.b.input(f"x{len(self.feeds)}", array.shape, array.dtype.name)
        self.feeds.append(array)
        self.kinds.append(None)  # structure (indices, exponents): fed the same each run
        self.pool.append(Entry(value, exact=True, fresh=True))
        return value

    def const(self, array) -> legato.Value:
        """A constant of exactly `array` (quantization parameters, exponents)."""
        value = self.b.const(np.asarray(array))
        self.pool.append(Entry(value, exact=True, fresh=True))
        return value

    # --- picking inputs -----------------------------------------------------------------

    def value(self, dtypes=None, min_rank: int = 0, max_rank: int = 4,
              exact: bool = False, kind: str = "normal", nonempty: bool = False,
              reuse: float = 0.7) -> legato.Value:
        """A value of one of `dtypes` and rank in [min_rank, max_rank]: from the pool
        (with probability `reuse`, only ordinary-valued ones for a special `kind`), else
        fresh."""
        dtypes = (dtypes or self.float,) if isinstance(dtypes, (str, type(None))) \
            else tuple(dtypes)
        candidates = [e.value for e in self.pool
                      if e.value.dtype in dtypes and min_rank <= e.value.rank <= max_rank
                      and (e.exact or not exact) and (e.fresh or kind == "normal")
                      and (e.value.type.size > 0 or not nonempty)]
        if kind != "normal":
            candidates = []  # special ranges (positive, nonzero) only come fresh
        if candidates and self.chance(reuse):
            return self.choice(candidates)
        return self.fresh(self.shape(min_rank, max_rank, nonzero=nonempty),
                          self.choice(dtypes), kind)

    def call(self, op: str, *inputs, **attrs):
        """Call `op` through the builder and put its results in the pool."""
        result = self.b.call(op, *inputs, **attrs)
        outputs = result if isinstance(result, tuple) else (result,)
        entries = {id(e.value): e for e in self.pool}
        exact = op in EXACT_OPS and all(
            entries[id(v)].exact for v in inputs if isinstance(v, legato.Value)
            and id(v) in entries)
        for out in outputs:
            self.pool.append(Entry(out, exact=exact or out.dtype not in FLOATS, fresh=False))
        self.ops.append(op)
        return result

    def other_feeds(self) -> list[np.ndarray]:
        """Different values of the same kinds, for a second run."""
        return [self.data(f.shape, f.dtype.name, kind) if kind is not None else f.copy()
                for f, kind in zip(self.feeds, self.kinds)]

    def odd_layout(self, array: np.ndarray) -> np.ndarray:
        """The same values in a memory layout callers hand over too: a strided or
        reversed view, Fortran order, big-endian bytes, a read-only array."""
        layout = self.choice(["as is", "as is", "strided", "reversed", "fortran",
                              "big-endian", "read-only"])
        if layout == "strided" and array.ndim:
            wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
            wide[..., ::2] = array
            return wide[..., ::2]
        if layout == "reversed" and array.ndim:
            return np.ascontiguousarray(array[::-1])[::-1]
        if layout == "fortran" and array.ndim:  # (asfortranarray makes a 0-d array 1-d)
            return np.asfortranarray(array)
        if layout == "big-endian" and array.dtype.itemsize > 1:
            return array.astype(array.dtype.newbyteorder(">"))
        if layout == "read-only":
            array = array.copy()
            array.flags.writeable = False
        return array

    def custom(self, inner_op: str, data: legato.Value):
        """A custom call tunnelling `inner_op` on `data`."""
        inner = make_call(self.registry, inner_op, [data], {})
        call = legato.encode_custom(inner, "legato", self.registry)
        self.adopt(call)
        return call.outputs[0]

    def adopt(self, call: legato.Call) -> None:
        """Append a call made outside the builder (a custom call, say)."""
        self.b.calls.append(call)
        self.ops.append(call.op)
        self.pool.extend(Entry(out, exact=False, fresh=False) for out in call.outputs)

    def computed(self) -> list[legato.Value]:
        return [e.value for e in self.pool if not e.fresh]
