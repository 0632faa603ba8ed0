"""Fuzz target: random small programs compiled for tosa_custom.

Each case builds a program of a few calls (ops tosa_custom declares legal or lowers,
composites that decompose into them, and ops kept as tosa.custom) on random shapes (rank
0 to 7, dims of size 0, 1 and more) and dtypes, with edge attributes (clip bounds out of
order, empty and negative axes, empty perms). `legato.compile(..., backend="tosa_custom")`
must either refuse with a LegatoError or emit MLIR that tosa-opt validates for TOSA 1.0
pro_fp; a module without custom ops then runs on the TOSA reference model and must match
cpu_ref. Without the TOSA tools every case is "skipped".
"""
from __future__ import annotations

import pathlib

import numpy as np

import legato
from tests.fuzz import InvalidOutput, Mismatch

QUICK_CASES = 50
CASE_TIMEOUT = 30.0

REPO = pathlib.Path(__file__).resolve().parents[2]
FLOATS = ("float32", "float16")
DTYPES = FLOATS * 3 + ("int8", "int16", "int32", "int64", "bool", "uint8", "float64")
# composites of elementwise primitives; the primitives come from the backend's table
COMPOSITE_UNARY = ("nn.relu", "nn.gelu", "nn.silu", "nn.leaky_relu")
# results that move with any rounding of their operands: only fed exact values
STEP_UNARY = ("floor", "ceil", "round")
ARITH = ("add", "subtract", "multiply", "maximum", "minimum", "divide")
COMPARE = ("equal", "greater", "less")
REDUCE = ("sum", "max", "min", "mean")
KEEPABLE = ("nn.gelu", "nn.softmax", "nn.layer_norm", "argmax", "exp", "clip", "pad")
_tools = []
_unary: list = []


def tools():
    if not _tools:
        from legato_tosa_custom.tools import TosaTools
        _tools.append(TosaTools.find(REPO / ".venv-tosa"))
    return _tools[0]


class Program:
    """A GraphBuilder with the program's inputs, the values made so far and whether each
    is exact (a float that TOSA and numpy compute bit for bit: inputs, data movement)."""

    def __init__(self, rng):
        self.rng = rng
        self.b = legato.GraphBuilder()
        self.values: list = []
        self.exact: dict = {}
        self.feeds: list = []

    def input(self, shape, dtype):
        value = self.b.input(f"x{len(self.feeds)}", shape, dtype)
        self.feeds.append(feed(self.rng, shape, dtype))
        self.add(value, True)
        return value

    def add(self, value, exact):
        self.values.append(value)
        self.exact[value] = exact

    def pick(self, floats=False):
        pool = [v for v in self.values if not floats or v.dtype in FLOATS]
        return pool[self.rng.integers(len(pool))] if pool else None


SPECIAL = (np.nan, np.inf, -np.inf, -0.0)


def feed(rng, shape, dtype, special=True):
    """Quarter steps in [-4, 4] (exact in every float type), now and then NaN, +-inf and -0
    if `special`; small ints, random bools."""
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        low = 0 if dtype.startswith("uint") else -8
        return rng.integers(low, 9, shape).astype(dtype)
    values = rng.integers(-16, 17, shape) / 4
    if special and rng.random() < 0.2:
        special = rng.random(shape) < 0.2
        values = np.where(special, rng.choice(SPECIAL, shape), values)
    return values.astype(dtype)


def random_shape(rng, rank=None, edgy=True):
    """Ranks 0 to 7 and dims of size 0 when `edgy`, else ranks 0 to 4 and dims >= 1."""
    if rank is None:
        rank = int(rng.choice([0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7] if edgy else [0, 1, 2, 3, 4]))
    dims = rng.choice([1, 1, 2, 3, 4, 0], size=rank, p=[.25, .1, .3, .15, .1, .1]) if edgy \
        else rng.choice([1, 2, 3, 4], size=rank)
    return tuple(int(d) for d in dims)


def broadcast_partner(rng, shape):
    """A shape that broadcasts with `shape`: leading dims dropped, some dims set to 1."""
    drop = int(rng.integers(0, len(shape) + 1)) if rng.random() < 0.3 else 0
    return tuple(1 if rng.random() < 0.3 else d for d in shape[drop:])


def random_axes(rng, rank, allow_none=True):
    roll = rng.random()
    if allow_none and roll < 0.2:
        return None
    if roll < 0.3 or rank == 0:
        return []
    count = int(rng.integers(1, rank + 1))
    axes = rng.choice(rank, size=count, replace=False)
    return [int(a) - rank if rng.random() < 0.4 else int(a) for a in axes]


# --- one random call per generator: (value, exact) or None when the draw does not fit ----

def unary_ops() -> tuple:
    """The float unary ops to draw: the core's attribute-free one-input elementwise
    primitives that tosa_custom lowers (lowering.py: a float TOSA row or a rule, so a new
    row is fuzzed without an edit here), but the step functions, plus composites."""
    if not _unary:
        from legato_tosa_custom.cases import core_ops
        from legato_tosa_custom.lowering import RULES, TOSA
        registry = legato.context().registry
        _unary.extend(op for op in core_ops(registry)
                      if registry.get(op).level == 0 and registry.get(op).kind == "elemwise"
                      and len(registry.get(op).inputs) == 1 and not registry.get(op).attr_specs
                      and op not in STEP_UNARY
                      and (op in RULES or op in TOSA and "float32" in (TOSA[op].dtypes or ())))
        _unary.extend(op for op in COMPOSITE_UNARY if op not in _unary)
    return tuple(_unary)


def gen_unary(p, rng):
    x = p.pick(floats=True)
    if x is None:
        return None
    if rng.random() < 0.3 and p.exact[x]:
        return p.b.call(str(rng.choice(STEP_UNARY)), x), True
    op = str(rng.choice(unary_ops()))
    return p.b.call(op, x), op in ("abs", "negative", "nn.relu")


def gen_clip(p, rng):
    x = p.pick(floats=True)
    if x is None:
        return None
    bounds = [None, -1.5, 0.0, 1.25, 2.0, float("inf"), float("nan")]
    low, high = (bounds[int(i)] for i in rng.integers(len(bounds), size=2))
    return p.b.call("clip", x, min=low, max=high), p.exact[x]


def gen_binary(p, rng):
    x = p.pick()
    if x is None:
        return None
    kind = rng.random()
    if x.dtype == "bool":
        op = str(rng.choice(["logical_and", "logical_or", "logical_not", "where"]))
    else:
        op = str(rng.choice(ARITH + COMPARE + ("power",)))
    if op == "logical_not":
        return p.b.call(op, x), True
    other_shape = broadcast_partner(rng, x.shape)
    if op == "where":
        y, z = (p.input(broadcast_partner(rng, x.shape), "float32") for _ in range(2))
        return p.b.call("where", x, y, z), p.exact[y] and p.exact[z]
    if op == "power":  # any base and exponent: negative, zero, integer and not
        if x.dtype not in FLOATS:
            return None
        exponent = p.input(other_shape, x.dtype) if kind < 0.5 else \
            float(rng.choice([2.0, 3.0, 0.5, -1.0, -2.5]))
        return p.b.call("power", x, exponent), False
    y = p.input(other_shape, x.dtype) if kind < 0.8 else \
        p.b.const(feed(rng, other_shape, x.dtype))
    exact = p.exact[x] and op not in ("divide",)
    if op in COMPARE and not exact:
        return None
    return p.b.call(op, x, y), exact


def gen_cast(p, rng):
    x = p.pick()
    if x is None:
        return None
    if rng.random() < 0.15:  # of a constant: folds, maybe to a constant result
        x = p.b.const(feed(rng, random_shape(rng, int(rng.integers(0, 3))),
                           str(rng.choice(DTYPES))))
        p.exact[x] = True
    dtype = str(rng.choice(DTYPES))
    if x.dtype in FLOATS and rng.random() < 0.2:  # TOSA's own CAST (rounds): validity only
        return p.b.call("tosa.cast", x, dtype=dtype), True
    if x.dtype in FLOATS and not p.exact[x] and dtype not in FLOATS:
        return None  # truncation of a rounded value
    return p.b.call("cast", x, dtype=dtype), p.exact[x] or dtype not in FLOATS


def gen_reduce(p, rng):
    x = p.pick()
    if x is None:
        return None
    op = str(rng.choice(REDUCE + ("argmax", "topk")))
    if op in ("argmax", "topk"):
        if x.rank == 0 or not p.exact[x]:
            return None
        axis = int(rng.integers(-x.rank, x.rank))
        if op == "topk":  # ties, NaN and infinities in the feeds: its order is exact
            low = 0 if rng.random() < 0.1 else min(1, x.shape[axis])  # k = 0: empty results
            values, indices = p.b.call(op, x, k=int(rng.integers(low, x.shape[axis] + 1)),
                                       axis=axis, largest=bool(rng.random() < 0.5))
            return (values if rng.random() < 0.5 else indices), True
        return p.b.call("argmax", x, axis=axis, keepdims=bool(rng.random() < 0.5)), True
    axes = random_axes(rng, x.rank)
    keepdims = bool(rng.random() < 0.5)
    return p.b.call(op, x, axes=axes, keepdims=keepdims), p.exact[x] and op in ("max", "min")


def gen_movement(p, rng):
    x = p.pick()
    if x is None:
        return None
    op = str(rng.choice(["reshape", "permute_dims", "broadcast_to", "expand_dims", "squeeze",
                         "flatten", "concat", "split"]))
    attrs = {}
    if op == "reshape":
        attrs["shape"] = [int(s) for s in rng.permutation(x.shape)] + \
            ([1] if rng.random() < 0.3 else [])
    elif op == "permute_dims":
        attrs["axes"] = None if rng.random() < 0.2 else \
            [int(a) for a in rng.permutation(x.rank)]
    elif op == "broadcast_to":
        attrs["shape"] = [int(rng.choice([1, 2, 3])) if d == 1 else d for d in
                          random_shape(rng, int(rng.integers(0, 3))) + x.shape]
    elif op == "expand_dims":
        attrs["axes"] = [int(rng.integers(-x.rank - 1, x.rank + 1))]
    elif op == "squeeze":
        attrs["axes"] = None if rng.random() < 0.5 else \
            [i for i, d in enumerate(x.shape) if d == 1][:1]
    elif op == "flatten":
        attrs["axis"] = int(rng.integers(0, x.rank + 1))
    elif op in ("concat", "split"):
        if x.rank == 0:
            return None
        attrs["axis"] = int(rng.integers(-x.rank, x.rank))
        if op == "concat":
            return p.b.call("concat", x, x, **attrs), p.exact[x]
        attrs["sections"] = int(rng.choice([1, 2]))
        out = p.b.call("split", x, **attrs)
        return (out[0] if isinstance(out, tuple) else out), p.exact[x]
    return p.b.call(op, x, **attrs), p.exact[x]


def gen_slice_pad(p, rng):
    x = p.pick()
    if x is None:
        return None
    if rng.random() < 0.5:
        axes = random_axes(rng, x.rank, allow_none=False)
        begin = [int(rng.integers(-2, 3)) for _ in axes]
        end = [int(rng.integers(-2, 4)) for _ in axes]
        strides = None if rng.random() < 0.5 else [int(rng.choice([1, 2, -1])) for _ in axes]
        return p.b.call("strided_slice", x, begin=begin, end=end, strides=strides,
                        axes=axes), p.exact[x]
    mode = str(rng.choice(["constant", "constant", "reflect", "edge"]))
    pads = [int(rng.integers(0, 3)) for _ in range(2 * x.rank)]
    value = float(rng.choice([0.0, -1.5, 7.0])) if x.dtype != "bool" else 0.0
    return p.b.call("pad", x, pads=pads, value=value, mode=mode), p.exact[x]


def gen_take(p, rng):
    x = p.pick()
    if x is None or x.rank == 0:
        return None
    axis = int(rng.integers(-x.rank, x.rank))
    size = x.shape[axis]
    indices = rng.integers(-size, size, random_shape(rng, int(rng.integers(0, 3)))) \
        if size else np.zeros((0,), np.int64)
    dtype = str(rng.choice(["int32", "int64"]))
    if size and rng.random() < 0.4:  # run-time ids, as an embedding lookup takes them
        ids = p.b.input(f"x{len(p.feeds)}", indices.shape, dtype)
        p.feeds.append(indices.astype(dtype))
        p.add(ids, True)
        return p.b.call("take", x, ids, axis=axis), p.exact[x]
    return p.b.call("take", x, p.b.const(indices.astype(dtype)), axis=axis), p.exact[x]


def gen_matmul(p, rng):
    x = p.pick(floats=True)
    if x is None or x.rank == 0:
        return None
    k = x.shape[-1]
    other = (k,) if rng.random() < 0.3 else \
        broadcast_partner(rng, x.shape[:-2]) + (k, int(rng.choice([1, 2, 3])))
    y = p.input(other, x.dtype)
    return p.b.call("matmul", x, y), False


def gen_norm(p, rng):
    x = p.pick(floats=True)
    if x is None:
        return None
    op = str(rng.choice(["nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.rms_norm"]))
    if op in ("nn.softmax", "nn.log_softmax"):
        if x.rank == 0:
            return None
        return p.b.call(op, x, axis=int(rng.integers(-x.rank, x.rank))), False
    return p.b.call(op, x, None, *([None] if op == "nn.layer_norm" else []),
                    axes=random_axes(rng, x.rank, allow_none=False) or [-1]), False


def gen_window(p, rng):
    layout = str(rng.choice(["NCHW", "NHWC"]))
    n, c, h, w = (int(rng.choice(d)) for d in ([1, 2], [1, 2, 3], [1, 3, 5], [1, 4, 6]))
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    x = p.input(shape, str(rng.choice(FLOATS)))
    kernel = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    strides = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    padding = [int(rng.integers(0, 2)) for _ in range(4)]
    op = str(rng.choice(["nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d"]))
    if op == "nn.conv2d":
        weight = p.b.const(feed(rng, (int(rng.integers(1, 4)), c, *kernel), x.dtype, False))
        return p.b.call(op, x, weight, None, strides=strides, padding=padding,
                        data_layout=layout), False
    return p.b.call(op, x, pool_size=kernel, strides=strides, padding=padding,
                    data_layout=layout), op == "nn.max_pool2d"


# integer ops of exported models on ids, positions and masks (int64 is narrowed to int32)
INT_OPS = ("add", "subtract", "multiply", "equal", "greater", "less", "maximum", "minimum",
           "divide", "fmod", "remainder", "cumsum", "where", "cast")


def gen_ints(p, rng):
    """An integer op as models write them: on an int input (made if none) and a constant or
    another value of it; divisors are constants, nonzero now and then."""
    ints = [v for v in p.values if v.dtype in ("int32", "int64") and 0 < v.rank <= 4
            and all(v.shape)]
    x = ints[int(rng.integers(len(ints)))] if ints and rng.random() < 0.7 else \
        p.input(random_shape(rng, int(rng.integers(1, 3)), edgy=False),
                str(rng.choice(["int64", "int64", "int32"])))
    op = str(rng.choice(INT_OPS))
    other = p.b.const(rng.integers(-9, 10, broadcast_partner(rng, x.shape)).astype(x.dtype))
    if op == "cumsum":
        return p.b.call(op, x, axis=int(rng.integers(-x.rank, x.rank)),
                        exclusive=bool(rng.random() < 0.3), reverse=bool(rng.random() < 0.3)), True
    if op == "where":
        return p.b.call(op, p.b.greater(x, other), x, other), True
    if op == "cast":
        return p.b.call(op, x, dtype=str(rng.choice(["float32", "bool", "int32", "int64"]))), True
    if op in ("divide", "fmod", "remainder"):
        other = p.b.const(np.where(other.data == 0, 3, other.data).astype(x.dtype)) \
            if rng.random() < 0.8 else other
    return p.b.call(op, x, other), True


GENERATORS = (gen_unary, gen_unary, gen_clip, gen_binary, gen_binary, gen_cast, gen_reduce,
              gen_movement, gen_movement, gen_slice_pad, gen_take, gen_matmul, gen_norm,
              gen_window, gen_ints)


def build(seed):
    """(module, feeds, config) for `seed`, or None when no call could be drawn."""
    rng = np.random.default_rng(seed)
    p = Program(rng)
    edgy = rng.random() < 0.5  # else a program TOSA can mostly take: more valid output
    p.input(random_shape(rng, edgy=edgy), str(rng.choice(DTYPES if edgy else FLOATS)))
    results = []
    for _ in range(int(rng.integers(1, 4))):
        for _attempt in range(4):
            generator = GENERATORS[int(rng.integers(len(GENERATORS)))]
            try:
                made = generator(p, rng)
            except legato.LegatoError:
                made = None  # an ill-typed draw: the builder's own answer, not this target's
            if made is not None:
                value, exact = made
                p.add(value, exact)
                results.append(value)
                break
    if not results:
        return None
    keep = [str(op) for op in rng.choice(KEEPABLE, size=int(rng.integers(0, 3)))]
    config = {"backends": {"tosa_custom": {"keep": keep}}} if keep else None
    chosen = results[-1:] if rng.random() < 0.6 else results
    return p.b.build(*chosen), p.feeds, config


def run(seed: int) -> str:
    found = tools()
    if found is None:
        return "skipped"
    built = build(seed)
    if built is None:
        return "skipped"
    module, feeds, config = built
    try:
        compiled = legato.compile(module, backend="tosa_custom", config=config)
    except legato.LegatoError:
        return "refused"
    from legato_tosa_custom.tools import ToolError
    text = compiled.artifact
    # cpu_ref has no TOSA-only ops (tosa.cast) and runs no tosa.custom: validity only
    runs = '"tosa.custom"' not in text and len(feeds) == len(compiled.module.main.params) \
        and not any(call.op.startswith("tosa.") for call in module.main.calls)
    try:
        if not runs:
            found.validate(text)
            return "ok"
        feeds = ordinary(module, feeds)
        outputs = found.run_reference(text, feeds, validate=True)
    except ToolError as err:
        raise InvalidOutput(f"seed {seed}: {str(err)[:2000]}\n{text[:4000]}") from None
    compare(seed, outputs, legato.reference(module)(*feeds), tolerance(module))
    return "ok"


# windows and matmuls: TOSA skips padding where numpy multiplies it (0 * inf is NaN), and
# sums in another order, so they are compared on ordinary (finite) values only
SUMMING = ("matmul", "nn.conv2d", "nn.avg_pool2d", "nn.max_pool2d")


def ordinary(module, feeds):
    if not any(call.op in SUMMING for call in module.main.calls):
        return feeds
    return [np.nan_to_num(f, nan=0.0, posinf=4.0, neginf=-4.0) if f.dtype.kind == "f" else f
            for f in feeds]


def tolerance(module) -> float:
    """Relative to each result's scale: float16 anywhere in the program (TOSA computes in it
    where cpu_ref computes in float32 and rounds once) also loosens float32 results."""
    values = list(module.main.params) + [v for c in module.main.calls for v in c.outputs]
    return 1e-2 if any(v.dtype == "float16" for v in values) else 1e-4


def compare(seed, outputs, expected, rtol):
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(outputs) != len(expected):
        raise Mismatch(f"seed {seed}: {len(outputs)} results, cpu_ref has {len(expected)}")
    from legato_tosa_custom.cases import widened
    for index, (got, want) in enumerate(zip(outputs, expected)):
        want = np.asarray(want)
        if want.dtype == np.int64:  # the module's int32 (float casts saturate there)
            got = widened(got, want.dtype)
            want = np.clip(want, np.iinfo(np.int32).min, np.iinfo(np.int32).max)
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Mismatch(f"seed {seed}: result {index} is {got.dtype}{list(got.shape)}, "
                           f"cpu_ref gives {want.dtype}{list(want.shape)}")
        if want.dtype.kind in "biu":
            ok = np.array_equal(got, want)
        else:
            finite = np.isfinite(want)
            scale = float(np.max(np.abs(want[finite]), initial=1.0))
            ok = np.allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
        if not ok:
            raise Mismatch(f"seed {seed}: result {index} differs from cpu_ref: "
                           f"{np.array2string(got.ravel()[:8])} vs "
                           f"{np.array2string(want.ravel()[:8])}")

