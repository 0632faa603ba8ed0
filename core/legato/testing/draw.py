"""Random structure and data for samples and fuzz programs: shapes with size-0, size-1
and broadcasting dims, and values of a kind (normal, positive, nonzero, unit) with edge
values (inf, NaN, huge, tiny, integer extremes) when asked for.

Everything is drawn from one numpy Generator, so a seed fixes the result.
"""
from __future__ import annotations

import numpy as np

FLOATS = ("float32", "float64", "float16")
INTS = ("int32", "int64", "int8", "uint8", "int16")
MAX_DIM = 5
LARGE_DIM = 40
MAX_SIZE = 4096   # elements of a fresh tensor

EDGE_FLOATS = np.array([0.0, -0.0, 1.0, -1.0, 1e30, -1e30, 3e38, -3e38, np.inf, -np.inf,
                        np.nan, 1e-40, -1e-40, 1e-7, 65504.0], dtype=np.float32)


class Draw:
    """Draws shapes and data. `edge` makes size-0 dims likelier; `edge_values` (default:
    `edge`) mixes edge values into float and integer data. `float` is the float dtype of
    everything drawn without a dtype: mostly float32, sometimes float64 or float16."""

    def __init__(self, rng: np.random.Generator, edge: bool = False,
                 edge_values: bool | None = None, float_dtype: str | None = None):
        self.rng, self.edge = rng, edge
        self.edge_values = edge if edge_values is None else edge_values
        self.float = float_dtype or FLOATS[int(rng.choice(3, p=[0.85, 0.08, 0.07]))]
        # ordinary magnitudes: mostly [-3, 3]; wider sometimes (function tails)
        self.spread = float(rng.choice([3.0, 30.0, 1000.0], p=[0.75, 0.17, 0.08]))
        if self.float == "float16":  # products of wide values overflow float16
            self.spread = 3.0
        self.numeric = (self.float,) + INTS
        self.all = self.numeric + ("bool",)

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
        rng, shape, dtype = self.rng, tuple(shape), str(dtype)
        if dtype == "bool":
            return np.asarray(rng.random(shape) < 0.5)
        if dtype in INTS:
            info = np.iinfo(dtype)
            if self.edge_values and self.chance(0.3):
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
        if self.edge_values and array.size and self.chance(0.5):
            mask = rng.random(shape) < 0.3
            with np.errstate(over="ignore"):  # float16: huge values become infinities
                array[mask] = rng.choice(EDGE_FLOATS, size=int(mask.sum())).astype(dtype)
        return array
