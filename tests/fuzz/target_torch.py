"""Fuzz target: random compositions of PyTorch ops through torch.export, against eager.

A case draws one to three inputs (float32 on a grid of quarters, so sums and products stay
exact; int64, int32 or bool; rank 0-3 with size-1 and broadcasting dims) and applies
two to seven steps from a table of common ops: arithmetic with type promotion between
int, float, bool and Python scalars, floor division and remainder of negative numbers,
comparisons and logic, where/masked_fill with scalars, clamp, reductions with dim,
keepdim and dtype, cumulative ops, views (reshape, permute, flip, narrow, strided slices,
expand then contiguous), in-place ops on clones (add_, mul_, masked_fill_, slice
assignment, index_put), gathers, cat/stack/split, softmax, pads, pools and convs, and
(torch_layout_steps) as_strided over views and channels-last storage, activations with
non-default optional scalars, attention with every mask form and out= into views of a
buffer. The
module is imported with `legato.frontends.torch.load`, compiled for cpu_ref and for
c_kernels, and its results must have eager PyTorch's shapes, dtypes and values.

Each value records whether it is exact (bit-identical in any correct implementation);
discontinuous steps (rounding, comparisons, argmax, casts to integers) only take exact
values, so last-bit differences of a sum cannot flip them.
"""
from __future__ import annotations

import random

import numpy as np

import legato
from tests.fuzz.program_checks import check_tosa, compare_outputs
from tests.fuzz.torch_layout_steps import s_activation, s_attention, s_out_view, s_strided

QUICK_CASES = 10  # torch.export takes most of a second a case
CASE_TIMEOUT = 60.0
BACKENDS = ("cpu_ref", "c_kernels")
TOSA_SHARE = 0.3   # of cases also compiled for tosa_custom and checked

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # every case is skipped without torch
    torch = None


class Value:
    def __init__(self, index: int, example, exact: bool, is_input: bool = False):
        self.index, self.example, self.exact = index, example, exact
        self.is_input = is_input

    @property
    def dtype(self):
        return self.example.dtype

    @property
    def shape(self):
        return tuple(self.example.shape)

    @property
    def is_float(self):
        return self.example.dtype.is_floating_point


class Program(torch.nn.Module if torch else object):
    """forward(*inputs): run the recorded steps on a list of values, return some of them."""

    def __init__(self, events, outputs):
        super().__init__()
        self.events, self.outputs = events, outputs   # an event: None (next input) or a step

    def forward(self, *inputs):
        values, fed = [], iter(inputs)
        for event in self.events:
            if event is None:
                values.append(next(fed))
            else:
                fn, indices = event
                values.append(fn(*[values[i] for i in indices]))
        return tuple(values[i] for i in self.outputs)


class Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.gen = np.random.default_rng(seed)
        self.values: list[Value] = []
        self.inputs: list = []
        self.steps: list = []
        self.events: list = []
        self.names: list[str] = []

    def chance(self, p):
        return self.rng.random() < p

    def shape(self, lo=0, hi=3):
        return tuple(1 if self.chance(0.3) else self.rng.randint(2, 4)
                     for _ in range(self.rng.randint(lo, hi)))

    def tensor(self, shape, dtype):
        if dtype == torch.bool:
            return torch.from_numpy(np.asarray(self.gen.random(shape) < 0.5))
        if dtype.is_floating_point:
            return torch.from_numpy(np.asarray(self.gen.integers(-16, 17, shape) / 4.0)).to(dtype)
        return torch.from_numpy(np.asarray(self.gen.integers(-6, 7, shape))).to(dtype)

    def add_input(self, shape, dtype):
        return self.add_example(self.tensor(shape, dtype))

    def add_example(self, example):
        """An input with this example (its memory layout too: clones keep it)."""
        self.inputs.append(example)
        value = Value(len(self.values), example, True, is_input=True)
        self.values.append(value)
        self.events.append(None)
        return value

    def pick(self, kinds="fib", lo=0, hi=4, exact=False, nonempty=False):
        """A value of a dtype kind ('f' float, 'i' integer, 'b' bool) from those made."""
        def kind(v):
            return "b" if v.dtype == torch.bool else ("f" if v.is_float else "i")
        options = [v for v in self.values if kind(v) in kinds and lo <= len(v.shape) <= hi
                   and (v.exact or not exact) and (not nonempty or v.example.numel())]
        if options and self.chance(0.75):
            return self.rng.choice(options)
        dtype = {"f": torch.float32 if self.chance(0.85) else self.rng.choice(ODD_FLOATS),
                 "i": self.rng.choice([torch.int64, torch.int32, *ODD_INTS]),
                 "b": torch.bool}[self.rng.choice(kinds)]
        return self.add_input(self.shape(max(lo, 0), min(hi, 3)) if lo <= 3 else
                              self.shape(lo, lo), dtype)

    def partner(self, value, dtype=None):
        """A fresh input whose shape broadcasts against `value`."""
        shape = value.shape[len(value.shape) - self.rng.randint(0, len(value.shape)):]
        shape = tuple(1 if self.chance(0.3) else d for d in shape)
        return self.add_input(shape, dtype or value.dtype)

    def step(self, name, fn, *inputs, exact=False):
        """Apply fn to the examples now (a combination PyTorch refuses is dropped)."""
        try:
            with torch.no_grad():
                example = fn(*[v.example for v in inputs])
        except (RuntimeError, ValueError, IndexError, TypeError):
            return None
        if not isinstance(example, torch.Tensor) or example.dtype.is_complex:
            return None
        value = Value(len(self.values), example, exact and all(v.exact for v in inputs))
        self.steps.append((fn, [v.index for v in inputs]))
        self.events.append(self.steps[-1])
        self.values.append(value)
        self.names.append(name)
        return value


# --- the steps ------------------------------------------------------------------------------

ODD_FLOATS = (torch.float64, torch.float16) if torch else ()
ODD_INTS = (torch.int8, torch.uint8, torch.int16) if torch else ()
ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool) if torch else ()


def s_promote(b):
    """Type promotion between two dtypes, 0-d tensors and Python scalars (0-d tensors and
    scalars only decide the category, dimensioned tensors the width)."""
    dtypes = [b.rng.choice(ALL_DTYPES) for _ in range(2)]
    shapes = [b.shape(0, 2), ()] if b.chance(0.5) else [b.shape(1, 2), b.shape(0, 2)]
    x, y = (b.add_input(tuple(shape), dtype) for shape, dtype in zip(shapes, dtypes))
    op = b.rng.choice(["add", "mul", "sub", "maximum", "where", "div", "eq", "lt",
                       "scalar", "true_divide_int", "pow"])
    if op == "sub" and torch.bool in dtypes:
        op = "add"
    if op == "where":
        cond = b.partner(x, torch.bool)
        return b.step("where promote", torch.where, cond, x, y, exact=True)
    if op == "scalar":
        scalar = b.rng.choice([2, -1, 0.5, True, 300])
        return b.step("scalar promote", lambda t: t * scalar, x, exact=True)
    if op == "true_divide_int":
        y.example[y.example == 0] = 1
        if y.dtype == torch.bool:
            y.example[...] = True
        return b.step("div promote", torch.true_divide, x, y)
    if op == "div":
        return b.step("div promote", lambda t: t / 4, x, exact=True)
    if op == "pow":
        return b.step("pow promote", lambda t: torch.pow(t, 2), x, exact=True)
    fns = {"add": torch.add, "mul": torch.mul, "sub": torch.sub, "maximum": torch.maximum,
           "eq": torch.eq, "lt": torch.lt}
    return b.step(f"{op} promote", fns[op], *((x, y) if b.chance(0.5) else (y, x)),
                  exact=True)


def scalar_for(b: Builder, value):
    if value.dtype == torch.bool:
        return b.rng.choice([True, False, 2, 1.5])
    return b.rng.choice([0, 1, 2, -3, 0.5, -1.25, True])


def s_arith(b):
    x = b.pick()
    op = b.rng.choice(["add", "sub", "mul", "max", "min"])
    fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum,
           "min": torch.minimum}
    if b.chance(0.3) and op in ("add", "sub", "mul"):
        scalar = scalar_for(b, x)
        if b.chance(0.5):
            return b.step(f"{op} scalar", lambda t: fns[op](t, scalar), x, exact=True)
        return b.step(f"scalar {op}", lambda t: fns[op](scalar, t) if op != "sub"
                      else scalar - t, x, exact=True)
    dtype = x.dtype if b.chance(0.5) else b.rng.choice([torch.float32, torch.int64,
                                                          torch.int32, torch.bool])
    y = b.partner(x, dtype)
    pair = (x, y) if b.chance(0.5) else (y, x)
    if op == "sub" and torch.bool in (x.dtype, y.dtype):
        op = "add"
    return b.step(op, fns[op], *pair, exact=True)


def s_division(b):
    x = b.pick("fi", exact=True)
    if x.is_float:
        divisor = b.rng.choice([2.0, -4.0, 0.5])
    else:
        divisor = b.rng.choice([2, -3, 4, 7])
    op = b.rng.choice(["true", "floor", "remainder", "fmod", "trunc"])
    if b.chance(0.5):  # a tensor divisor, nonzero
        d = b.add_input(b.shape(0, len(x.shape))[:len(x.shape)], x.dtype)
        d.example[d.example == 0] = 3
        args = (x, d)
    else:
        args = (x,)
    fns = {"true": lambda t, d=divisor: torch.div(t, d),
           "floor": lambda t, d=divisor: torch.div(t, d, rounding_mode="floor"),
           "trunc": lambda t, d=divisor: torch.div(t, d, rounding_mode="trunc"),
           "remainder": lambda t, d=divisor: torch.remainder(t, d),
           "fmod": lambda t, d=divisor: torch.fmod(t, d)}
    fn = fns[op]
    if len(args) == 2:
        inner = {"true": torch.div, "floor": lambda t, d: torch.div(t, d, rounding_mode="floor"),
                 "trunc": lambda t, d: torch.div(t, d, rounding_mode="trunc"),
                 "remainder": torch.remainder, "fmod": torch.fmod}[op]
        fn = inner
    if b.chance(0.3) and op == "floor":
        fn = (lambda t, d=divisor: t // d) if len(args) == 1 else (lambda t, d: t // d)
    return b.step(f"div {op}", fn, *args, exact=not x.is_float or op != "true")


def s_unary(b):
    x = b.pick("f")
    op = b.rng.choice(["abs", "neg", "relu", "sigmoid", "tanh", "exp", "sin", "sign",
                       "sqrt_abs", "rsqrt", "square", "reciprocal", "gelu", "silu", "elu",
                       "leaky", "hardswish", "softplus", "log1p_abs", "erf", "hardtanh"])
    fns = {"abs": torch.abs, "neg": torch.neg, "relu": torch.relu, "sigmoid": torch.sigmoid,
           "tanh": torch.tanh, "exp": torch.exp, "sin": torch.sin, "sign": torch.sign,
           "sqrt_abs": lambda t: torch.sqrt(t.abs()), "rsqrt": lambda t: torch.rsqrt(
               t.abs() + 1), "square": torch.square,
           "reciprocal": lambda t: torch.reciprocal(t.abs() + 0.5),
           "gelu": lambda t, a=b.rng.choice(["none", "tanh"]): F.gelu(t, approximate=a),
           "silu": F.silu, "elu": lambda t: F.elu(t, alpha=0.7), "leaky": lambda t:
           F.leaky_relu(t, 0.2), "hardswish": F.hardswish, "softplus": lambda t:
           F.softplus(t, beta=2.0, threshold=3.0), "log1p_abs": lambda t: torch.log1p(t.abs()),
           "erf": torch.erf, "hardtanh": lambda t: F.hardtanh(t, -1.5, 2.0)}
    exact = op in ("abs", "neg", "relu", "sign", "square", "hardtanh")
    return b.step(op, fns[op], x, exact=exact)


def s_int_unary(b):
    x = b.pick("ib")
    op = b.rng.choice(["abs", "neg", "bitwise_not", "logical_not", "sign", "square"])
    if x.dtype == torch.bool and op in ("abs", "neg", "sign", "square"):
        op = "bitwise_not"
    fns = {"abs": torch.abs, "neg": torch.neg, "bitwise_not": torch.bitwise_not,
           "logical_not": torch.logical_not, "sign": torch.sign, "square": torch.square}
    return b.step(op, fns[op], x, exact=True)


def s_rounding(b):
    x = b.pick("f", exact=True)
    op = b.rng.choice(["floor", "ceil", "round", "trunc", "frac", "round2"])
    fns = {"floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
           "trunc": torch.trunc, "frac": torch.frac,
           "round2": lambda t: torch.round(t * 0.5)}
    return b.step(op, fns[op], x, exact=True)


def s_compare(b):
    x = b.pick("fib", exact=True)
    op = b.rng.choice(["eq", "ne", "lt", "le", "gt", "ge"])
    fn = getattr(torch, op)
    if b.chance(0.4):
        scalar = scalar_for(b, x)
        return b.step(f"{op} scalar", lambda t: fn(t, scalar), x, exact=True)
    return b.step(op, fn, x, b.partner(x), exact=True)


def s_logic(b):
    x = b.pick("b")
    y = b.partner(x, b.rng.choice([torch.bool, torch.bool, torch.int64]))
    op = b.rng.choice(["logical_and", "logical_or", "logical_xor", "bitwise_and",
                       "bitwise_or", "bitwise_xor"])
    if op.startswith("bitwise") and y.dtype != torch.bool:
        y = b.partner(x, torch.bool)
    return b.step(op, getattr(torch, op), x, y, exact=True)


def s_where(b):
    cond = b.pick("b")
    x = b.pick("fib")
    form = b.rng.choice(["tensors", "scalar_other", "scalar_self", "masked_fill",
                         "masked_fill_"])
    scalar = scalar_for(b, x)
    if form == "tensors":
        return b.step("where", torch.where, cond, x, b.partner(x), exact=True)
    if form == "scalar_other":
        return b.step("where scalar", lambda c, t: torch.where(c, t, scalar), cond, x,
                      exact=True)
    if form == "scalar_self":
        return b.step("where scalar self", lambda c, t: torch.where(c, scalar, t), cond, x,
                      exact=True)
    if form == "masked_fill":
        return b.step("masked_fill", lambda t, c: t.masked_fill(c, scalar), x, cond,
                      exact=True)

    def in_place(t, c):
        y = t.clone()
        y.masked_fill_(c, scalar)
        return y
    return b.step("masked_fill_", in_place, x, cond, exact=True)


def s_clamp(b):
    x = b.pick("fi")
    lo, hi = sorted(b.rng.sample(range(-3, 4), 2))
    if x.is_float and b.chance(0.5):
        lo, hi = lo + 0.5, hi + 0.25
    form = b.rng.choice(["both", "min", "max", "tensor", "inplace"])
    if form == "both":
        return b.step("clamp", lambda t: torch.clamp(t, lo, hi), x, exact=True)
    if form == "min":
        return b.step("clamp_min", lambda t: torch.clamp(t, min=lo), x, exact=True)
    if form == "max":
        return b.step("clamp_max", lambda t: t.clamp(max=hi), x, exact=True)
    if form == "tensor":
        return b.step("clamp tensor", lambda t, m: torch.clamp(t, min=m), x, b.partner(x),
                      exact=True)

    def in_place(t):
        y = t.clone()
        y.clamp_(lo, hi)
        return y
    return b.step("clamp_", in_place, x, exact=True)


def s_cast(b):
    x = b.pick("fib", exact=True)
    dtype = b.rng.choice([torch.float32, torch.int64, torch.int32, torch.bool,
                          torch.float64, torch.uint8, torch.int8])
    if x.is_float and dtype in (torch.uint8,):
        x = b.step("abs", torch.abs, x, exact=True)
    form = b.rng.choice(["to", "type_as", "method"])
    if form == "method" and dtype in (torch.float32, torch.int64, torch.bool):
        method = {torch.float32: "float", torch.int64: "long", torch.bool: "bool"}[dtype]
        return b.step(f"cast .{method}", lambda t: getattr(t, method)(), x, exact=True)
    return b.step(f"cast {dtype}", lambda t: t.to(dtype), x, exact=True)


def s_reduce(b):
    x = b.pick("fib", lo=1, nonempty=True)
    rank = len(x.shape)
    dims = b.rng.sample(range(rank), b.rng.randint(1, rank))
    dims = [d - rank if b.chance(0.4) else d for d in dims]
    keep = b.chance(0.5)
    op = b.rng.choice(["sum", "mean", "amax", "amin", "prod", "any", "all", "argmax",
                       "argmin", "max_dim", "min_dim", "std", "var", "logsumexp", "norm",
                       "count_nonzero", "sum_all", "sum_dtype"])
    dim = dims[0]
    if op == "sum":
        return b.step("sum", lambda t: torch.sum(t, dims, keepdim=keep), x, exact=True)
    if op == "sum_all":
        return b.step("sum all", lambda t: t.sum(), x, exact=True)
    if op == "sum_dtype":
        dtype = b.rng.choice([torch.float32, torch.int64, torch.float64])
        return b.step("sum dtype", lambda t: torch.sum(t, dim, dtype=dtype), x, exact=True)
    if op in ("amax", "amin"):
        return b.step(op, lambda t: getattr(torch, op)(t, dims, keepdim=keep), x, exact=True)
    if op in ("any", "all"):
        return b.step(op, lambda t: getattr(torch, op)(t, dim, keepdim=keep), x, exact=True)
    if op == "count_nonzero":
        return b.step(op, lambda t: torch.count_nonzero(t, dims), x, exact=True)
    if op in ("argmax", "argmin"):
        x = b.pick("fi", lo=1, exact=True, nonempty=True)
        dim = b.rng.randrange(-len(x.shape), len(x.shape))
        return b.step(op, lambda t: getattr(torch, op)(t, dim, keepdim=keep), x, exact=True)
    if op in ("max_dim", "min_dim"):
        x = b.pick("fi", lo=1, exact=True, nonempty=True)
        dim = b.rng.randrange(-len(x.shape), len(x.shape))
        which = b.rng.choice([0, 1])
        fn = torch.max if op == "max_dim" else torch.min
        return b.step(op, lambda t: fn(t, dim, keepdim=keep)[which], x, exact=True)
    if op == "prod":
        return b.step(op, lambda t: torch.prod(t, dim, keepdim=keep), x, exact=True)
    x = b.pick("f", lo=1, nonempty=True)
    dims = [d for d in dims if -len(x.shape) <= d < len(x.shape)] or [0]
    if op == "mean":
        return b.step(op, lambda t: torch.mean(t, dims, keepdim=keep), x)
    if op in ("std", "var"):
        correction = b.rng.choice([0, 1, 2])
        return b.step(op, lambda t: getattr(torch, op)(t, dims, correction=correction,
                                                       keepdim=keep), x)
    if op == "logsumexp":
        return b.step(op, lambda t: torch.logsumexp(t, dims, keepdim=keep), x)
    p = b.rng.choice([1, 2, float("inf")])
    return b.step("norm", lambda t: torch.linalg.vector_norm(t, p, dims, keepdim=keep), x)


def s_cumulative(b):
    x = b.pick("fib", lo=1)
    dim = b.rng.randrange(-len(x.shape), len(x.shape))
    op = b.rng.choice(["cumsum", "cumprod", "cummax", "cumsum_dtype"])
    if op == "cummax":
        x = b.pick("fi", lo=1, exact=True)
        dim = b.rng.randrange(-len(x.shape), len(x.shape))
        return b.step(op, lambda t: torch.cummax(t, dim)[0], x, exact=True)
    if op == "cumsum_dtype":
        return b.step(op, lambda t: torch.cumsum(t, dim, dtype=torch.float32), x, exact=True)
    return b.step(op, lambda t: getattr(torch, op)(t, dim), x, exact=True)


def s_view(b):
    x = b.pick("fib")
    rank = len(x.shape)
    op = b.rng.choice(["reshape", "permute", "transpose", "flip", "narrow", "strided",
                       "expand", "unsqueeze", "squeeze", "flatten", "select", "roll",
                       "repeat", "movedim", "t_contig", "view_inplace", "diagonal", "tril"])
    size = x.example.numel()
    if op == "reshape":
        shape = [size] if b.chance(0.3) else [-1] + ([1] if b.chance(0.5) else [])
        return b.step("reshape", lambda t: t.reshape(shape), x, exact=True)
    if op == "permute" and rank:
        perm = list(range(rank))
        b.rng.shuffle(perm)
        contiguous = b.chance(0.5)
        return b.step("permute", lambda t: t.permute(perm).contiguous() if contiguous
                      else t.permute(perm), x, exact=True)
    if op == "transpose" and rank >= 2:
        return b.step("transpose", lambda t: t.transpose(-1, -2), x, exact=True)
    if op == "flip" and rank:
        dims = b.rng.sample(range(-rank, 0), b.rng.randint(1, rank))
        return b.step("flip", lambda t: torch.flip(t, dims), x, exact=True)
    if op == "narrow" and rank:
        dim = b.rng.randrange(rank)
        length = b.rng.randint(0, x.shape[dim])
        start = b.rng.randint(0, x.shape[dim] - length)
        return b.step("narrow", lambda t: t.narrow(dim, start, length), x, exact=True)
    if op == "strided" and rank:
        step = b.rng.choice([2, 3])
        start = b.rng.choice([0, 1, -1])
        return b.step("strided slice", lambda t: t[..., start::step], x, exact=True)
    if op == "expand":
        target = [d if d != 1 else b.rng.choice([1, 3]) for d in x.shape]
        target = [2] * b.rng.randint(0, 1) + target
        contiguous = b.chance(0.5)
        return b.step("expand", lambda t: t.expand(*target).contiguous() if contiguous
                      else t.expand(*target) * 1, x, exact=True)
    if op == "unsqueeze":
        dim = b.rng.randint(-rank - 1, rank)
        return b.step("unsqueeze", lambda t: t.unsqueeze(dim), x, exact=True)
    if op == "squeeze" and rank:
        dim = b.rng.randrange(-rank, rank)
        return b.step("squeeze", lambda t: t.squeeze(dim), x, exact=True)
    if op == "flatten" and rank:
        start = b.rng.randrange(rank)
        return b.step("flatten", lambda t: torch.flatten(t, start), x, exact=True)
    if op == "select" and rank and x.shape[0]:
        index = b.rng.randrange(-x.shape[0], x.shape[0])
        return b.step("select", lambda t: t[index], x, exact=True)
    if op == "roll" and rank:
        shift = b.rng.randint(-5, 5)
        dim = b.rng.randrange(-rank, rank)
        return b.step("roll", lambda t: torch.roll(t, shift, dim), x, exact=True)
    if op == "repeat":
        reps = [b.rng.choice([1, 2]) for _ in range(rank + b.rng.randint(0, 1))]
        return b.step("repeat", lambda t: t.repeat(*reps) if reps else t * 1, x, exact=True)
    if op == "movedim" and rank >= 2:
        return b.step("movedim", lambda t: torch.movedim(t, 0, -1), x, exact=True)
    if op == "t_contig" and rank >= 2:
        return b.step("mT contiguous", lambda t: t.mT.contiguous(), x, exact=True)
    if op == "view_inplace" and rank:
        # writing through a view of a clone changes the clone
        value = scalar_for(b, x)

        def write_view(t):
            y = t.clone()
            y.view(-1)[::2] = value
            return y
        return b.step("write through a view", write_view, x, exact=True)
    if op == "diagonal" and rank >= 2:
        offset = b.rng.randint(-2, 2)
        return b.step("diagonal", lambda t: torch.diagonal(t, offset, -2, -1) * 1, x,
                      exact=True)
    if op == "tril" and rank >= 2:
        diagonal = b.rng.randint(-2, 2)
        fn = torch.tril if b.chance(0.5) else torch.triu
        return b.step("tril/triu", lambda t: fn(t, diagonal), x, exact=True)
    return b.step("clone", torch.clone, x, exact=True)


def s_inplace(b):
    x = b.pick("fi")
    op = b.rng.choice(["add_", "mul_", "sub_", "slice_assign", "index_put", "setitem_mask",
                       "copy_", "fill_diag", "relu_", "addcmul_"])
    scalar = b.rng.choice([2, -1]) if not x.is_float else b.rng.choice([0.5, -2.0, 3])

    def run(t, *others):
        y = t.clone()
        if op == "add_":
            y.add_(scalar, alpha=2)
        elif op == "mul_":
            y.mul_(scalar)
        elif op == "sub_":
            y.sub_(others[0])
        elif op == "slice_assign":
            if y.dim():
                y[..., :1] = scalar
            else:
                y.fill_(scalar)
        elif op == "index_put":
            if y.dim() and y.shape[0]:
                y[torch.tensor([0, -1])] = others[0] if others else scalar
        elif op == "setitem_mask":
            y[y > 0] = scalar
        elif op == "copy_":
            y.copy_(others[0])
        elif op == "fill_diag":
            y.fill_(scalar)
        elif op == "relu_":
            y.relu_()
        else:
            y.addcmul_(others[0], others[0], value=0.5)
        return y
    others = ()
    if op == "addcmul_" and not x.is_float:  # (eager allows it, export does not)
        op = "mul_"
    if op in ("sub_", "copy_", "addcmul_"):
        others = (b.partner(x),)
    if op == "index_put" and x.shape and b.chance(0.5):
        others = (b.add_input(x.shape[1:], x.dtype),)
    return b.step(op, run, x, *others, exact=True)


def s_join(b):
    x = b.pick("fib", lo=1)
    rank = len(x.shape)
    dim = b.rng.randrange(-rank, rank)
    op = b.rng.choice(["cat", "stack", "split", "chunk", "unbind"])
    if op == "cat":
        shape = list(x.shape)
        shape[dim] = b.rng.choice([0, 1, 2])
        y = b.add_input(tuple(shape), x.dtype if b.chance(0.8) else torch.float32)
        return b.step("cat", lambda s, t: torch.cat([s, t], dim), x, y, exact=True)
    if op == "stack":
        y = b.add_input(x.shape, x.dtype)
        sdim = b.rng.randint(-rank - 1, rank)
        return b.step("stack", lambda s, t: torch.stack([s, t], sdim), x, y, exact=True)
    index = b.rng.randint(0, 1)
    if op == "split":
        size = b.rng.randint(1, 3)
        return b.step("split", lambda t: torch.split(t, size, dim)[index]
                      if len(torch.split(t, size, dim)) > index else t, x, exact=True)
    if op == "chunk":
        return b.step("chunk", lambda t: t.chunk(2, dim)[-1], x, exact=True)
    return b.step("unbind", lambda t: t.unbind(dim)[-1] if t.shape[dim] else t, x, exact=True)


def s_index(b):
    x = b.pick("fib", lo=1, nonempty=True)
    rank = len(x.shape)
    dim = b.rng.randrange(rank)
    size = x.shape[dim]
    index = torch.from_numpy(b.gen.integers(-size if b.chance(0.5) else 0, size,
                                            (b.rng.randint(0, 4),)))
    op = b.rng.choice(["index_select", "gather", "advanced", "take_along", "scatter"])
    if op == "index_select":
        positive = index % size
        return b.step("index_select", lambda t: torch.index_select(t, dim, positive), x,
                      exact=True)
    if op == "advanced":
        return b.step("advanced index", lambda t: t[index] if dim == 0 else t[:, index]
                      if rank > 1 else t[index], x, exact=True)
    shape = list(x.shape)
    shape[dim] = b.rng.randint(1, 3)
    gather_index = torch.from_numpy(b.gen.integers(0, size, shape))
    if op == "gather":
        return b.step("gather", lambda t: torch.gather(t, dim, gather_index), x, exact=True)
    if op == "take_along":
        return b.step("take_along_dim", lambda t: torch.take_along_dim(t, gather_index, dim),
                      x, exact=True)
    line = list(x.shape)
    line[dim] = 1
    scatter_index = torch.from_numpy(b.gen.integers(0, size, line))
    src = b.add_input(tuple(line), x.dtype)
    return b.step("scatter", lambda t, s: torch.scatter(t, dim, scatter_index, s), x, src,
                  exact=True)


def s_nn(b):
    op = b.rng.choice(["softmax", "log_softmax", "layer_norm", "pad", "linear", "matmul",
                       "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive", "interp",
                       "normalize", "addmm", "einsum"])
    if op in ("softmax", "log_softmax"):
        x = b.pick("f", lo=1, nonempty=True)
        dim = b.rng.randrange(-len(x.shape), len(x.shape))
        return b.step(op, lambda t: getattr(F, op)(t, dim), x)
    if op == "layer_norm":
        x = b.pick("f", lo=1, nonempty=True)
        shape = x.shape[-b.rng.randint(1, len(x.shape)):]
        w = torch.from_numpy(b.gen.standard_normal(shape).astype(np.float32))
        return b.step(op, lambda t: F.layer_norm(t, shape, w, None, 1e-5), x)
    if op == "pad":
        x = b.pick("fi", lo=1, hi=3, nonempty=True)
        mode = b.rng.choice(["constant", "reflect", "replicate", "circular"])
        count = 1 if len(x.shape) < 3 or mode == "constant" else b.rng.randint(1, 2)
        pads = []
        for i in range(count):
            d = x.shape[-1 - i]
            limit = d - 1 if mode == "reflect" else (d if mode == "circular" else 2)
            pads += [b.rng.randint(-1 if mode == "constant" and d > 1 else 0, max(0, limit))
                     for _ in range(2)]
        if mode != "constant" and x.dtype != torch.float32:
            x = b.pick("f", lo=len(x.shape), hi=len(x.shape), nonempty=True)
        value = 1.5 if x.is_float else 2
        return b.step(f"pad {mode}", lambda t: F.pad(t, pads, mode, value if mode ==
                                                          "constant" else None), x,
                      exact=True)
    if op in ("linear", "matmul", "addmm", "einsum"):
        x = b.pick("f", lo=1, hi=3)
        k = x.shape[-1]
        n = b.rng.randint(1, 4)
        w = torch.from_numpy(b.gen.integers(-4, 5, (n, k)) / 4.0).float()
        if op == "linear":
            bias = torch.ones(n) * 0.5 if b.chance(0.5) else None
            return b.step(op, lambda t: F.linear(t, w, bias), x, exact=True)
        if op == "matmul":
            y = b.add_input(x.shape[:-2][-1:] + (k, n) if b.chance(0.7) else (k,),
                            torch.float32)
            return b.step(op, torch.matmul, x, y, exact=True)
        if op == "einsum":
            return b.step(op, lambda t: torch.einsum("...k,nk->...n", t, w), x, exact=True)
        if len(x.shape) != 2:
            return None
        c = b.add_input((1, n), torch.float32)
        beta, alpha = b.rng.choice([0.0, 1.0, 0.5]), b.rng.choice([1.0, -2.0])
        return b.step(op, lambda t, cc: torch.addmm(cc, t, w.t(), beta=beta, alpha=alpha),
                      x, c, exact=True)
    if op in ("conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive", "interp"):
        dims = 1 if op == "conv1d" else 2
        x = b.pick("f", lo=dims + 2, hi=dims + 2, nonempty=True)
        channels = x.shape[1]
        kernel = [b.rng.randint(1, 3) for _ in range(dims)]
        stride = b.rng.choice([1, 2, 3])
        if op.startswith("conv"):
            groups = channels if b.chance(0.3) else 1
            out = groups * b.rng.randint(1, 2)
            w = torch.from_numpy(b.gen.integers(-3, 4, (out, channels // groups, *kernel))
                                 / 4.0).float()
            padding = b.rng.choice([0, 1, 2, "same", "valid"])
            dilation = b.rng.choice([1, 2])
            if padding == "same":
                stride = 1
            fn = F.conv1d if dims == 1 else F.conv2d
            return b.step(op, lambda t: fn(t, w, None, stride, padding, dilation, groups), x,
                          exact=True)
        if op == "max_pool2d":
            padding = b.rng.randint(0, kernel[0] // 2)
            ceil = b.chance(0.5)
            return b.step(op, lambda t: F.max_pool2d(t, kernel, stride, padding,
                                                      ceil_mode=ceil), x, exact=True)
        if op == "avg_pool2d":
            padding = b.rng.randint(0, kernel[0] // 2)
            ceil, include = b.chance(0.5), b.chance(0.5)
            divisor = b.rng.choice([None, None, 3])
            return b.step(op, lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil,
                                                      include, divisor), x)
        if op == "adaptive":
            size = (b.rng.randint(1, 3), b.rng.randint(1, 3))
            which = b.rng.choice([F.adaptive_avg_pool2d, F.adaptive_max_pool2d])
            return b.step(op, lambda t: which(t, size), x)
        mode = b.rng.choice(["nearest", "bilinear", "nearest-exact", "bicubic"])
        align = None if mode.startswith("nearest") else b.chance(0.5)
        scale = b.rng.choice([0.5, 2.0, 1.5])
        return b.step(f"interpolate {mode}", lambda t: F.interpolate(
            t, scale_factor=scale, mode=mode, align_corners=align), x)
    x = b.pick("f", lo=1, nonempty=True)
    dim = b.rng.randrange(-len(x.shape), len(x.shape))
    return b.step(op, lambda t: F.normalize(t, p=2.0, dim=dim), x)


def s_module(b):
    """An nn layer with random sizes and weights (eval mode) on a float value of its rank."""
    nn = torch.nn
    kind = b.rng.choice(["lstm", "gru", "mha", "encoder", "conv_t", "conv_pad", "norm",
                         "upsample", "pixel", "embedding", "prelu"])
    torch.manual_seed(b.rng.randrange(1 << 30))
    if kind in ("lstm", "gru", "mha", "encoder"):
        x = b.pick("f", lo=3, hi=3, nonempty=True)
        feat = x.shape[-1]
        if kind == "lstm":
            layer = nn.LSTM(feat, b.rng.randint(1, 4), num_layers=b.rng.randint(1, 2),
                            bidirectional=b.chance(0.5), batch_first=b.chance(0.5))
        elif kind == "gru":
            layer = nn.GRU(feat, b.rng.randint(1, 4), batch_first=b.chance(0.5))
        elif kind == "mha":
            heads = b.rng.choice([h for h in (1, 2, 4) if feat % h == 0])
            layer = nn.MultiheadAttention(feat, heads, batch_first=True)
            causal = b.chance(0.5) and x.shape[1] > 1
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1]) if causal \
                else None
            layer.eval()
            return b.step("MultiheadAttention", lambda t: layer(t, t, t, attn_mask=mask,
                                                                need_weights=False)[0], x)
        else:
            heads = b.rng.choice([h for h in (1, 2) if feat % h == 0])
            layer = nn.TransformerEncoderLayer(feat, heads, 2 * feat, dropout=0.0,
                                               batch_first=True,
                                               norm_first=b.chance(0.5),
                                               activation=b.rng.choice(["relu", "gelu"]))
        layer.eval()
        return b.step(kind, lambda t: layer(t)[0] if kind in ("lstm", "gru") else layer(t), x)
    if kind == "embedding":
        rows = b.rng.randint(2, 6)
        layer = nn.Embedding(rows, b.rng.randint(1, 4),
                             padding_idx=b.rng.choice([None, 0])).eval()
        index = b.add_input(b.shape(1, 2), torch.int64)
        index.example.remainder_(rows)
        return b.step("Embedding", layer, index)
    x = b.pick("f", lo=4, hi=4, nonempty=True)
    channels = x.shape[1]
    if kind == "conv_t":
        layer = nn.ConvTranspose2d(channels, b.rng.randint(1, 3), b.rng.randint(1, 3),
                                   stride=b.rng.randint(1, 2), padding=b.rng.randint(0, 1))
    elif kind == "conv_pad":
        layer = nn.Conv2d(channels, b.rng.randint(1, 3), 3, padding=1,
                          padding_mode=b.rng.choice(["reflect", "replicate", "circular",
                                                     "zeros"]))
    elif kind == "norm":
        groups = b.rng.choice([g for g in (1, 2, channels) if channels % g == 0])
        layer = b.rng.choice([nn.GroupNorm(groups, channels), nn.BatchNorm2d(channels),
                              nn.LayerNorm(list(x.shape[-2:]))])
    elif kind == "upsample":
        layer = nn.Upsample(scale_factor=2, mode=b.rng.choice(["nearest", "bilinear"]))
    elif kind == "pixel":
        layer = nn.PixelUnshuffle(1) if x.shape[2] % 2 or x.shape[3] % 2 else \
            nn.PixelUnshuffle(2)
    else:
        layer = nn.PReLU(channels)
    layer.eval()
    return b.step(type(layer).__name__, layer, x)


STEPS = [s_promote, s_promote, s_arith, s_arith, s_division, s_unary, s_int_unary, s_rounding, s_compare, s_logic,
         s_where, s_clamp, s_cast, s_reduce, s_cumulative, s_view, s_view, s_inplace, s_join,
         s_index, s_nn, s_nn, s_module, s_strided, s_strided, s_activation, s_attention,
         s_out_view]


def build(seed: int):
    b = Builder(seed)
    wanted = b.rng.randint(2, 7)
    for index in range(3 * wanted):
        if len(b.steps) >= wanted:
            break
        step = STEPS[seed % len(STEPS)] if index == 0 else b.rng.choice(STEPS)
        step(b)
    if not b.steps:
        return None
    computed = [v.index for v in b.values if not v.is_input]
    outputs = [computed[-1]]
    if len(computed) > 1 and b.chance(0.4):
        outputs.insert(0, b.rng.choice(computed[:-1]))
    return Program(b.events, outputs), b.inputs, b.names, b


def run(seed: int) -> str:
    if torch is None:
        return "skipped"
    from legato.frontends import torch as ltorch
    built = build(seed)
    if built is None:
        return "skipped"
    program, inputs, names, _ = built
    try:
        with torch.no_grad():
            want = program(*[t.clone() for t in inputs])
    except Exception:  # noqa: BLE001 - eager refusing the composition
        return "skipped"
    try:
        module = ltorch.load(program, tuple(t.clone() for t in inputs))
    except legato.LegatoError:
        return "refused"
    feeds = [t.numpy().copy() for t in inputs]
    for backend in BACKENDS:
        try:
            compiled = legato.compile(module, backend)
        except legato.LegatoError:
            continue
        got = compiled(*feeds)
        got = got if isinstance(got, (tuple, list)) else (got,)
        compare(got, [w.numpy() for w in want], f"{backend} ({', '.join(names)})")
    if random.Random(seed).random() < TOSA_SHARE:
        check_tosa(module, feeds, [w.numpy() for w in want], random.Random(~seed),
                   lambda got: compare(got, [w.numpy() for w in want],
                                       f"tosa_custom ({', '.join(names)})"))
    return "ok"


def compare(got, want, where: str) -> None:
    compare_outputs(got, want, where, "eager", rtol=1e-4, atol=1e-5)

