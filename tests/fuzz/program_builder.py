"""Random well-typed programs: the building context that generators draw values from.

A `ProgramContext` wraps a `legato.GraphBuilder` and keeps a pool of the values made so
far. A generator (tests/fuzz/op_generators.py) asks it for an input of some dtype and
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

FLOAT = "float32"
FLOATS = ("float32", "float64", "float16")
INTS = ("int32", "int64", "int8", "uint8", "int16")
MAX_DIM = 5
LARGE_DIM = 40
MAX_SIZE = 4096   # elements of a fresh tensor

# ops whose float output is exactly the same everywhere when the inputs are exact
EXACT_OPS = {"abs", "negative", "maximum", "minimum", "max", "min", "where", "reshape",
             "permute_dims", "broadcast_to", "concat", "split", "strided_slice", "take",
             "pad", "squeeze", "expand_dims", "flatten", "nn.relu", "clip", "round", "floor",
             "ceil", "cast", "tosa.gather", "nn.max_pool2d", "equal", "less", "greater",
             "logical_and", "logical_or", "logical_not", "argmax"}

EDGE_FLOATS = np.array([0.0, -0.0, 1.0, -1.0, 1e30, -1e30, 3e38, -3e38, np.inf, -np.inf,
                        np.nan, 1e-40, -1e-40, 1e-7, 65504.0], dtype=np.float32)


@dataclass
class Entry:
    value: legato.Value
    exact: bool
    fresh: bool   # a parameter or constant: values the test chose


class ProgramContext:
    def __init__(self, rng: np.random.Generator, edge: bool):
        self.rng, self.edge = rng, edge
        # the float dtype of this program: mostly float32, sometimes float64 or float16
        self.float = FLOATS[int(rng.choice(3, p=[0.85, 0.08, 0.07]))]
        # ordinary magnitudes: mostly [-3, 3]; wider in some programs (function tails)
        self.spread = float(rng.choice([3.0, 30.0, 1000.0], p=[0.75, 0.17, 0.08]))
        if self.float == "float16":  # products of wide values overflow float16
            self.spread = 3.0
        self.numeric = (self.float,) + INTS
        self.all = self.numeric + ("bool",)
        self.b = legato.GraphBuilder()
        self.pool: list[Entry] = []
        self.feeds: list[np.ndarray] = []
        self.kinds: list[str | None] = []   # how to draw other values for each feed
        self.ops: list[str] = []
        self.refusals: list[tuple[str, str]] = []   # (op, message) of calls not made

    # --- random structure -------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, items):
        items = list(items)
        return items[int(self.rng.integers(len(items)))]

    def int(self, low: int, high: int) -> int:
        """Uniform in [low, high]."""
        return int(self.rng.integers(low, high + 1))

    def dim(self, nonzero: bool = False) -> int:
        if not nonzero and self.chance(0.12 if self.edge else 0.04):
            return 0
        if self.chance(0.08):  # past the vector width and blocking of the C kernels
            return self.int(MAX_DIM + 1, LARGE_DIM)
        return 1 if self.chance(0.25) else self.int(2, MAX_DIM)

    def shape(self, min_rank: int = 0, max_rank: int = 4, nonzero: bool = False) -> tuple:
        rank = self.int(min_rank, max_rank)
        dims = [self.dim(nonzero) for _ in range(rank)]
        while np.prod(dims) > MAX_SIZE:  # several large dims: shrink the largest
            dims[int(np.argmax(dims))] = self.int(1, MAX_DIM)
        return tuple(dims)

    def broadcast_partner(self, shape: tuple) -> tuple:
        """A shape that broadcasts with `shape`: a suffix of it, dims set to 1, or dims of
        1 in `shape` widened, and sometimes extra leading dims."""
        keep = self.int(0, len(shape)) if self.chance(0.4) else len(shape)
        out = []
        for d in shape[len(shape) - keep:]:
            if d == 1 and self.chance(0.3):
                out.append(self.int(2, 4))
            elif self.chance(0.25):
                out.append(1)
            else:
                out.append(d)
        if len(out) + len(shape) < 8 and self.chance(0.15):
            out = [self.dim(nonzero=True)] + out
        return tuple(out)

    # --- data -------------------------------------------------------------------------

    def data(self, shape, dtype: str, kind: str = "normal") -> np.ndarray:
        """Ordinary values by `kind` (normal, positive, nonzero, unit); edge values
        (inf, nan, huge, tiny, integer extremes) in a share of edge cases."""
        rng, shape = self.rng, tuple(shape)
        if dtype == "bool":
            return np.asarray(rng.random(shape) < 0.5)
        if dtype in INTS:
            info = np.iinfo(dtype)
            if self.edge and self.chance(0.3):
                extremes = [v for v in (info.min, info.max, 0, 1, -1) if info.min <= v]
                return np.asarray(rng.choice(np.array(extremes, dtype), size=shape))
            low = 0 if info.min == 0 or kind in ("positive", "unit") else -5
            array = np.asarray(rng.integers(low, 6, size=shape)).astype(dtype)
            if kind in ("nonzero", "positive"):
                array[array == 0] = 1
            return array
        array = rng.uniform(-self.spread, self.spread, size=shape)
        if kind == "positive":
            array = rng.uniform(0.5, 3, size=shape)
        elif kind == "nonzero":
            array = rng.uniform(0.5, 3, size=shape) * rng.choice([-1, 1], size=shape)
        elif kind == "unit":
            array = rng.uniform(0, 1, size=shape)
        array = np.asarray(array).astype(dtype)
        if self.edge and array.size and self.chance(0.5):
            mask = rng.random(shape) < 0.3
            with np.errstate(over="ignore"):  # float16: huge values become infinities
                array[mask] = rng.choice(EDGE_FLOATS, size=int(mask.sum())).astype(dtype)
        return array

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

    def adopt(self, call: legato.Call) -> None:
        """Append a call made outside the builder (a custom call, say)."""
        self.b.calls.append(call)
        self.ops.append(call.op)
        self.pool.extend(Entry(out, exact=False, fresh=False) for out in call.outputs)

    def computed(self) -> list[legato.Value]:
        return [e.value for e in self.pool if not e.fresh]
