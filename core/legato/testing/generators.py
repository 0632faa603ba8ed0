"""Per-op sample generators: each draws inputs and attributes of one op within the
documented ranges (docs/ops.md) and calls it on a context.

A context is a `legato.testing.draw.Draw` with a few more methods: `value(dtypes,
min_rank, max_rank, exact, kind, nonempty, reuse)` (an input, maybe one made earlier),
`fresh(shape, dtype, kind, const)`, `feed(array)`, `const(array)`, `call(op, *inputs,
**attrs)` and `custom(inner_op, data)`. `legato.testing.samples` runs them on arrays
(one call each); the fuzz programs (tests/fuzz) run them on a graph builder, chaining calls.

Ops of a family share a generator; ops that need structure (convolution, pooling, matmul,
gather, quantization, attention, ...) have their own. Every other elementwise or
broadcasting op gets `generic_elementwise` (float inputs, broadcasting partners, attributes
drawn from their specs; `DOMAINS` names the value kind an op needs), and an op with
examples gets `from_examples`; an op may also bring its own `samples(rng)` hook.
"""
from __future__ import annotations

import numpy as np

from ..ir import CUSTOM_OP
from ..ops.registry import REQUIRED
from .draw import INTS

GENERATORS: dict = {}


def generator(*ops):
    def register(fn):
        for op in ops:
            GENERATORS[op] = fn
        return fn
    return register


def _numeric(ctx) -> tuple:
    return (ctx.float,) if ctx.chance(0.8) else (ctx.choice(INTS),)


# --- elementwise and broadcasting -------------------------------------------------------

@generator("add", "subtract", "multiply", "maximum", "minimum")
def gen_binary(ctx, op):
    a = ctx.value(_numeric(ctx))
    b = ctx.fresh(ctx.broadcast_partner(a.shape), a.dtype) if ctx.chance(0.6) else \
        ctx.value(a.dtype)
    pair = (a, b) if ctx.chance(0.5) else (b, a)
    return ctx.call(op, *pair)


@generator("fmod", "remainder")
def gen_remainder(ctx, op):
    # an exact dividend: the remainder jumps by the divisor where the quotient crosses an
    # integer, so an input off by one rounding error can change it by that much
    a = ctx.value(_numeric(ctx), exact=True)
    return ctx.call(op, a, ctx.fresh(ctx.broadcast_partner(a.shape), a.dtype, "nonzero"))


@generator("divide")
def gen_divide(ctx, op):
    a = ctx.value(_numeric(ctx))
    return ctx.call(op, a, ctx.fresh(ctx.broadcast_partner(a.shape), a.dtype, "nonzero"))


@generator("power")
def gen_power(ctx, op):
    dtype = ctx.choice([ctx.float, ctx.float, "int32", "int64"])
    base = ctx.value(dtype, kind="positive")
    exponent = ctx.data(ctx.broadcast_partner(base.shape), dtype)
    exponent = np.abs(exponent) % 4 if dtype != ctx.float else exponent.clip(-2, 2)
    return ctx.call(op, base, ctx.const(exponent.astype(dtype)) if ctx.chance(0.3)
                    else ctx.feed(exponent))


@generator("equal", "less", "greater", "not_equal", "greater_equal", "less_equal")
def gen_compare(ctx, op):
    a = ctx.value(_numeric(ctx), exact=True)
    b = ctx.fresh(ctx.broadcast_partner(a.shape), a.dtype) if ctx.chance(0.5) else a
    return ctx.call(op, a, b)


@generator("logical_and", "logical_or", "logical_xor")
def gen_logical(ctx, op):
    a = ctx.value("bool")
    return ctx.call(op, a, ctx.fresh(ctx.broadcast_partner(a.shape), "bool"))


@generator("logical_not")
def gen_not(ctx, op):
    return ctx.call(op, ctx.value("bool"))


@generator("bitwise_and", "bitwise_or", "bitwise_xor")
def gen_bitwise(ctx, op):
    a = ctx.value(ctx.choice(INTS), exact=True)
    return ctx.call(op, a, ctx.fresh(ctx.broadcast_partner(a.shape), a.dtype))


@generator("bitwise_not")
def gen_bitwise_not(ctx, op):
    return ctx.call(op, ctx.value(ctx.choice(INTS), exact=True))


@generator("isinf")
def gen_isinf(ctx, op):
    data = ctx.value(_numeric(ctx))
    if data.dtype == ctx.float and ctx.chance(0.7):  # some infinities to find
        values = ctx.data(data.shape, data.dtype)
        values[ctx.rng.random(values.shape) < 0.3] = np.inf
        values[ctx.rng.random(values.shape) < 0.2] = -np.inf
        data = ctx.feed(values)
    return ctx.call(op, data, detect_positive=ctx.chance(0.7), detect_negative=ctx.chance(0.7))


@generator("where")
def gen_where(ctx, op):
    x = ctx.value(_numeric(ctx))
    cond = ctx.value("bool") if ctx.chance(0.5) else \
        ctx.fresh(ctx.broadcast_partner(x.shape), "bool")
    y = ctx.fresh(ctx.broadcast_partner(x.shape), x.dtype)
    return ctx.call(op, cond, x, y)


@generator("sign", "isnan")
def gen_sign(ctx, op):  # jumps at 0: an exact input, so no rounding error crosses it
    return ctx.call(op, ctx.value(_numeric(ctx), exact=True))


@generator("negative", "abs")
def gen_signed_unary(ctx, op):
    return ctx.call(op, ctx.value(_numeric(ctx)))


@generator("exp", "tanh", "sigmoid", "erf", "nn.relu", "nn.silu", "nn.gelu")
def gen_float_unary(ctx, op):
    attrs = {"approximate": ctx.choice(["none", "tanh"])} if op == "nn.gelu" else {}
    return ctx.call(op, ctx.value(ctx.float), **attrs)


@generator("log", "sqrt", "rsqrt", "log1p", "log2", "log10", "acosh")
def gen_positive_unary(ctx, op):
    return ctx.call(op, ctx.value(ctx.float, kind="positive"))


@generator("atanh")
def gen_inside_unit(ctx, op):
    values = np.tanh(ctx.data(ctx.shape(), ctx.float))  # inside (-1, 1), the domain
    return ctx.call(op, ctx.feed(values.astype(ctx.float)))


@generator("round", "floor", "ceil", "trunc")
def gen_rounding(ctx, op):
    return ctx.call(op, ctx.value(ctx.float, exact=True))


@generator("cast")
def gen_cast(ctx, op):
    dtype = ctx.choice(ctx.all)
    source = ctx.choice(ctx.all)
    kind = "positive" if dtype == "uint8" and source == ctx.float else "normal"
    return ctx.call(op, ctx.value(source, exact=True, kind=kind), dtype=dtype)


@generator("nn.leaky_relu")
def gen_leaky_relu(ctx, op):
    return ctx.call(op, ctx.value(ctx.float), alpha=float(ctx.rng.uniform(0, 1)))


@generator("clip")
def gen_clip(ctx, op):
    low, high = ctx.rng.uniform(-3, 3, size=2).round(3).tolist()
    if ctx.chance(0.9):  # min > max is allowed too (every element becomes max)
        low, high = sorted((low, high))
    attrs = {"min": low if ctx.chance(0.7) else None, "max": high if ctx.chance(0.7) else None}
    return ctx.call(op, ctx.value(ctx.float), **attrs)


# --- reductions ---------------------------------------------------------------------------

def _axes(ctx, rank: int):
    """None, [] or a random distinct subset of axes, some negative."""
    if ctx.chance(0.2):
        return None
    count = ctx.int(0, rank)
    axes = ctx.rng.permutation(rank)[:count].tolist()
    return [a - rank if ctx.chance(0.3) else a for a in axes]


@generator("sum", "max", "min", "mean", "variance", "prod")
def gen_reduce(ctx, op):
    dtypes = (ctx.float,) if op in ("mean", "variance") else _numeric(ctx)
    data = ctx.value(dtypes, nonempty=op in ("max", "min"))
    attrs = {"axes": _axes(ctx, data.rank), "keepdims": ctx.chance(0.5)}
    if op == "variance":
        attrs["unbiased"] = ctx.chance(0.3)
    return ctx.call(op, data, **attrs)


@generator("argmax", "argmin")
def gen_argmax(ctx, op):
    data = ctx.value(_numeric(ctx), min_rank=1, exact=True, nonempty=True)
    return ctx.call(op, data, axis=ctx.int(-data.rank, data.rank - 1),
                    keepdims=ctx.chance(0.5), select_last_index=ctx.chance(0.5))


# --- shapes and data movement ----------------------------------------------------------

@generator("reshape")
def gen_reshape(ctx, op):
    data = ctx.value(ctx.all)
    return ctx.call(op, data, shape=_reshaped(ctx, data.shape))


def _reshaped(ctx, shape) -> list:
    """A random shape of the same size, sometimes with one -1."""
    size = int(np.prod(shape))
    dims = []
    rest = size
    for _ in range(ctx.int(0, 3)):
        factors = [f for f in range(1, min(rest, 8) + 1) if rest % f == 0] if rest else [0, 1]
        factor = ctx.choice(factors)
        dims.append(factor)
        rest = rest // factor if factor else rest
    dims.append(rest if size else 0)
    if size and ctx.chance(0.3):
        dims[ctx.int(0, len(dims) - 1)] = -1
    ctx.rng.shuffle(dims)
    return [int(d) for d in dims]


@generator("permute_dims")
def gen_permute(ctx, op):
    data = ctx.value(ctx.all)
    axes = None if ctx.chance(0.3) else ctx.rng.permutation(data.rank).tolist()
    return ctx.call(op, data, axes=axes)


@generator("broadcast_to")
def gen_broadcast_to(ctx, op):
    data = ctx.value(ctx.all, max_rank=3)
    shape = [d if d != 1 or ctx.chance(0.5) else ctx.int(0 if ctx.edge else 2, 4)
             for d in data.shape]
    shape = [ctx.dim() for _ in range(ctx.int(0, 2))] + shape
    return ctx.call(op, data, shape=shape)


@generator("concat")
def gen_concat(ctx, op):
    first = ctx.value(ctx.all, min_rank=1)
    axis = ctx.int(-first.rank, first.rank - 1)
    parts = [first]
    for _ in range(ctx.int(0, 2)):
        shape = list(first.shape)
        shape[axis] = ctx.dim()
        parts.append(ctx.fresh(shape, first.dtype))
    ctx.rng.shuffle(parts)
    return ctx.call(op, *parts, axis=axis)


@generator("split")
def gen_split(ctx, op):
    data = ctx.value(ctx.all, min_rank=1)
    axis = ctx.int(-data.rank, data.rank - 1)
    dim = data.shape[axis]
    divisors = [n for n in range(1, 5) if dim % n == 0] if dim else [1, 2]
    if ctx.chance(0.5):
        sections = ctx.choice(divisors)
    else:
        cuts = sorted(ctx.rng.integers(0, dim + 1, size=ctx.int(0, 2)).tolist())
        bounds = [0] + cuts + [dim]
        sections = [int(b - a) for a, b in zip(bounds, bounds[1:])]
    return ctx.call(op, data, sections=sections, axis=axis)


@generator("strided_slice")
def gen_strided_slice(ctx, op):
    data = ctx.value(ctx.all, min_rank=1)
    count = ctx.int(1, data.rank)
    axes = ctx.rng.permutation(data.rank)[:count].tolist()
    begin, end, strides = [], [], []
    for axis in axes:
        d = data.shape[axis]
        stride = ctx.choice([1, 1, 2, 3, -1, -2])
        begin.append(ctx.int(-d - 2, d + 2))
        end.append(ctx.int(-d - 2, d + 2) if ctx.chance(0.8) else
                   (2 ** 31 - 1 if stride > 0 else -2 ** 31))
        strides.append(stride)
    attrs = {"begin": begin, "end": end,
             "strides": strides if any(s != 1 for s in strides) or ctx.chance(0.5) else None,
             "axes": [a - data.rank if ctx.chance(0.3) else a for a in axes]}
    if attrs["axes"] == list(range(count)) and ctx.chance(0.5):
        attrs["axes"] = None
    return ctx.call(op, data, **attrs)


@generator("take")
def gen_take(ctx, op):
    data = ctx.value(ctx.all, min_rank=1)
    axis = ctx.int(-data.rank, data.rank - 1)
    d = data.shape[axis]
    shape = ctx.shape(0, 2) if d else (0,)
    indices = ctx.rng.integers(-d, d, size=shape) if d else np.zeros(shape)
    dtype = ctx.choice(["int32", "int64"])
    return ctx.call(op, data, ctx.feed(indices.astype(dtype)), axis=axis)


@generator("pad")
def gen_pad(ctx, op):
    data = ctx.value(ctx.numeric)
    mode = ctx.choice(["constant", "constant", "reflect", "edge"])
    pads = []
    for _ in range(2):
        for d in data.shape:
            limit = {"reflect": max(d - 1, 0), "edge": 2 if d else 0}.get(mode, 2)
            pads.append(ctx.int(0, limit))
    value = float(ctx.int(-3, 3)) if data.dtype != ctx.float else round(ctx.rng.uniform(-3, 3), 2)
    if data.dtype == "uint8":
        value = abs(value)
    return ctx.call(op, data, pads=pads, value=value, mode=mode)


@generator("squeeze")
def gen_squeeze(ctx, op):
    data = ctx.value(ctx.all)
    ones = [i for i, d in enumerate(data.shape) if d == 1]
    if ctx.chance(0.3) or not ones:
        return ctx.call(op, data, axes=None if ctx.chance(0.7) else [])
    axes = ctx.rng.permutation(ones)[:ctx.int(1, len(ones))].tolist()
    return ctx.call(op, data, axes=[a - data.rank if ctx.chance(0.3) else a for a in axes])


@generator("expand_dims")
def gen_expand_dims(ctx, op):
    data = ctx.value(ctx.all, max_rank=4)
    rank = data.rank + ctx.int(1, 3)  # up to rank 7, past TOSA's 6
    axes = ctx.rng.permutation(rank)[:rank - data.rank].tolist()
    return ctx.call(op, data, axes=[a - rank if ctx.chance(0.3) else a for a in axes])


@generator("flatten")
def gen_flatten(ctx, op):
    data = ctx.value(ctx.all)
    return ctx.call(op, data, axis=ctx.int(-data.rank, data.rank))


# --- normalization and friends --------------------------------------------------------

@generator("nn.softmax", "nn.log_softmax")
def gen_softmax(ctx, op):
    data = ctx.value(ctx.float, min_rank=1)
    return ctx.call(op, data, axis=ctx.int(-data.rank, data.rank - 1))


def _trailing_axes(ctx, rank: int) -> list:
    count = ctx.int(1, min(rank, 3))
    axes = list(range(rank - count, rank))
    return [a - rank for a in axes] if ctx.chance(0.6) else axes


def _maybe(ctx, shape, kind="normal"):
    return ctx.fresh(shape, ctx.float, kind) if ctx.chance(0.7) else None


@generator("nn.layer_norm", "nn.rms_norm")
def gen_layer_norm(ctx, op):
    data = ctx.value(ctx.float, min_rank=1)
    axes = _trailing_axes(ctx, data.rank)
    params = data.shape[len(data.shape) - len(axes):]
    epsilon = ctx.choice([1e-5, 1e-6, 1e-3])
    if op == "nn.rms_norm":
        return ctx.call(op, data, _maybe(ctx, params), axes=axes, epsilon=epsilon)
    return ctx.call(op, data, _maybe(ctx, params), _maybe(ctx, params), axes=axes,
                    epsilon=epsilon)


@generator("nn.batch_norm")
def gen_batch_norm(ctx, op):
    data = ctx.value(ctx.float, min_rank=2)
    axis = 1 if ctx.chance(0.6) else ctx.int(-data.rank, data.rank - 1)
    c = data.shape[axis]
    gamma, beta, mean = (ctx.fresh((c,)) for _ in range(3))
    return ctx.call(op, data, gamma, beta, mean, ctx.fresh((c,), ctx.float, "positive"),
                    axis=axis, epsilon=ctx.choice([1e-5, 1e-3]))


@generator("nn.group_norm")
def gen_group_norm(ctx, op):
    data = ctx.value(ctx.float, min_rank=2, max_rank=4)
    c = data.shape[1]
    groups = ctx.choice([g for g in range(1, 5) if c % g == 0] if c else [1])
    return ctx.call(op, data, ctx.fresh((c,)), ctx.fresh((c,)), num_groups=groups,
                    epsilon=ctx.choice([1e-5, 1e-3]))


@generator("nn.instance_norm")
def gen_instance_norm(ctx, op):
    data = ctx.value(ctx.float, min_rank=3, max_rank=4)
    c = data.shape[1]
    return ctx.call(op, data, ctx.fresh((c,)), ctx.fresh((c,)), epsilon=1e-5)


# --- matrix products --------------------------------------------------------------------

# float16 sums of this many products of 0.5-3 are 10% off when accumulated in float16,
# past the op's float16 bound (32 ulps); a float32 accumulator stays within 1 ulp
LONG_K = 4096
LOW_PRECISION = ("float16", "bfloat16")


def _long_contraction(ctx) -> bool:
    """Whether to draw a contraction over LONG_K: in low-precision floats only, where the
    accumulator's precision shows."""
    return ctx.float in LOW_PRECISION and ctx.chance(0.3)


@generator("matmul")
def gen_matmul(ctx, op):
    if _long_contraction(ctx):
        return ctx.call(op, ctx.fresh((2, LONG_K), ctx.float, "positive"),
                        ctx.fresh((LONG_K, 2), ctx.float, "positive"))
    a = ctx.value(ctx.float if ctx.chance(0.85) else "int32", min_rank=1)
    k = a.shape[-1]
    if a.rank == 1 or ctx.chance(0.2):
        b_shape = (k,)
    else:
        batch = ctx.broadcast_partner(a.shape[:-2]) if ctx.chance(0.5) else ()
        b_shape = tuple(batch) + (k, ctx.dim())
    b = ctx.fresh(b_shape, a.dtype, const=ctx.chance(0.4))
    return ctx.call(op, *((a, b) if ctx.chance(0.8) or b.rank < 2 else _swap_matmul(ctx, a, b)))


def _swap_matmul(ctx, a, b):
    """b @ a' with a' of b's trailing dim: exercise a constant left operand too."""
    return b, ctx.fresh(b.shape[:-2] + (b.shape[-1], ctx.dim()), a.dtype)


@generator("nn.linear")
def gen_linear(ctx, op):
    if _long_contraction(ctx):
        return ctx.call(op, ctx.fresh((2, LONG_K), ctx.float, "positive"),
                        ctx.fresh((2, LONG_K), ctx.float, "positive"))
    data = ctx.value(ctx.float, min_rank=1)
    out = ctx.dim()
    weight = ctx.fresh((out, data.shape[-1]), ctx.float, const=ctx.chance(0.6))
    bias = ctx.fresh((out,), ctx.float, const=ctx.chance(0.6)) if ctx.chance(0.7) else None
    return ctx.call(op, data, weight, bias)


# --- convolution and pooling -----------------------------------------------------------

def _image(ctx):
    """(data value, layout, its (n, c, h, w))."""
    layout = ctx.choice(["NCHW", "NCHW", "NHWC"])
    data = ctx.value(ctx.float, min_rank=4, max_rank=4, reuse=0.5)
    n, a, b, c = data.shape
    nchw = (n, a, b, c) if layout == "NCHW" else (n, c, a, b)
    return data, layout, nchw


def _window(ctx, h: int, w: int):
    """Kernel size, strides, dilation and padding that fit an h x w image (mostly)."""
    kernel = [ctx.int(1, 3), ctx.int(1, 3)]
    dilation = [ctx.choice([1, 1, 2]), ctx.choice([1, 1, 2])]
    padding = [ctx.int(0, 1) for _ in range(4)]
    strides = [ctx.int(1, 2), ctx.int(1, 2)]
    for i, size in enumerate((h, w)):
        while (kernel[i] - 1) * dilation[i] + 1 > size + padding[i] + padding[i + 2] \
                and kernel[i] > 1 and not ctx.edge:
            kernel[i] -= 1
    return kernel, strides, dilation, padding


@generator("nn.conv2d")
def gen_conv2d(ctx, op):
    data, layout, (n, c, h, w) = _image(ctx)
    groups = ctx.choice([g for g in (1, 2, 3) if c % g == 0] if c else [1])
    kernel, strides, dilation, padding = _window(ctx, h, w)
    out = groups * ctx.int(1, 2)
    kernel_layout = ctx.choice(["OIHW", "HWIO", "OHWI"])
    dims = {"O": out, "I": c // groups, "H": kernel[0], "W": kernel[1]}
    weight = ctx.fresh(tuple(dims[d] for d in kernel_layout), ctx.float, const=ctx.chance(0.5))
    bias = ctx.fresh((out,)) if ctx.chance(0.6) else None
    return ctx.call(op, data, weight, bias, strides=strides, padding=padding,
                    dilation=dilation, groups=groups, data_layout=layout,
                    kernel_layout=kernel_layout)


@generator("nn.max_pool2d", "nn.avg_pool2d")
def gen_pool(ctx, op):
    data, layout, (n, c, h, w) = _image(ctx)
    kernel, strides, dilation, padding = _window(ctx, h, w)
    padding = [min(p, kernel[i % 2] - 1) for i, p in enumerate(padding)]
    attrs = {"pool_size": kernel, "strides": strides if ctx.chance(0.7) else None,
             "padding": padding, "dilation": dilation if op == "nn.max_pool2d" else [1, 1],
             "ceil_mode": ctx.chance(0.3), "data_layout": layout}
    if op == "nn.avg_pool2d":
        attrs["count_include_pad"] = ctx.chance(0.5)
    return ctx.call(op, data, **attrs)


# --- quantization -----------------------------------------------------------------------

def _qparams(ctx, data_shape, axis: int, dtype: str):
    """(scale, zero_point): scalars, or per-axis along `axis`."""
    if ctx.chance(0.5) or not data_shape:
        shape = ()
    else:
        shape = (data_shape[axis],)
    scale = ctx.rng.uniform(0.05, 0.5, size=shape).astype(ctx.float)
    zero = ctx.rng.integers(-3 if dtype == "int8" else 0, 10, size=shape).astype(dtype)
    return ctx.const(scale), ctx.const(zero)


@generator("qnn.quantize")
def gen_quantize(ctx, op):
    data = ctx.value(ctx.float, exact=True)
    dtype = ctx.choice(["int8", "uint8"])
    axis = ctx.int(-data.rank, data.rank - 1) if data.rank else 1
    scale, zero = _qparams(ctx, data.shape, axis, dtype)
    return ctx.call(op, data, scale, zero, axis=axis, dtype=dtype)


@generator("qnn.dequantize")
def gen_dequantize(ctx, op):
    dtype = ctx.choice(["int8", "uint8", "int32"])
    data = ctx.value(dtype)
    axis = ctx.int(-data.rank, data.rank - 1) if data.rank else 1
    scale, zero = _qparams(ctx, data.shape, axis, dtype)
    return ctx.call(op, data, scale, zero, axis=axis)


@generator("qnn.conv2d")
def gen_qconv2d(ctx, op):
    dtype, out_dtype = ctx.choice(["uint8", "int8"]), ctx.choice(["uint8", "int8"])
    n, c, h, w = ctx.dim(), ctx.int(1, 4), ctx.int(1, 6), ctx.int(1, 6)
    groups = ctx.choice([g for g in (1, 2) if c % g == 0])
    kernel, strides, dilation, padding = _window(ctx, h, w)
    out = groups * ctx.int(1, 2)
    data = ctx.fresh((n, c, h, w), dtype, "positive")
    weight = ctx.fresh((out, c // groups, *kernel), "int8", const=True)
    bias = ctx.fresh((out,), "int32") if ctx.chance(0.6) else None
    # float32 scales: onnxruntime's QLinearConv arithmetic, which qnn.conv2d follows
    consts = [ctx.const(np.array(value, dt)) for value, dt in
              ((0.5, "float32"), (3, dtype), (0.75, "float32"), (5, out_dtype))]
    data_scale, data_zero, out_scale, out_zero = consts
    weight_scale = ctx.const(ctx.rng.uniform(0.1, 0.3, size=(out,)).astype("float32"))
    weight_zero = ctx.const(np.zeros(out, "int8"))
    return ctx.call(op, data, data_scale, data_zero, weight, weight_scale, weight_zero,
                    out_scale, out_zero, bias, strides=strides, padding=padding,
                    dilation=dilation, groups=groups)


# --- attention and custom ------------------------------------------------------------

@generator("nn.attention")
def gen_attention(ctx, op):
    b, h, s, sk = ctx.int(1, 2), ctx.int(1, 2), ctx.dim(), ctx.dim(nonzero=True)
    d, dv = ctx.int(1, 4), ctx.int(1, 4)
    q, k, v = ctx.fresh((b, h, s, d)), ctx.fresh((b, h, sk, d)), ctx.fresh((b, h, sk, dv))
    mask = None
    if ctx.chance(0.4):
        mask_shape = ctx.choice([(s, sk), (b, 1, s, sk), (1, sk)])
        mask = ctx.fresh(mask_shape, ctx.choice(["bool", ctx.float]))
    return ctx.call(op, q, k, v, mask, scale=None if ctx.chance(0.5) else
                    float(ctx.rng.uniform(0.1, 1)), causal=ctx.chance(0.4))


@generator(CUSTOM_OP)
def gen_custom(ctx, op):
    """A tunnelled sigmoid/gelu/softmax: what a backend that keeps an op receives."""
    data = ctx.value(ctx.float, min_rank=1)
    return ctx.custom(ctx.choice(["sigmoid", "nn.gelu", "nn.softmax"]), data)


# --- every other op: from its definition ----------------------------------------------

# the value kind (legato.testing.draw.Draw.data) the inputs of an elementwise op need when
# ordinary values are outside its domain; ops may instead bring a `samples(rng)` hook
DOMAINS: dict[str, str] = {}


def generic_elementwise(ctx, op):
    """Float inputs of one shape (elemwise) or broadcasting shapes (broadcast); each
    attribute drawn from its spec (a choice, a bool, or its default)."""
    opdef = ctx.registry.get(op)
    kind = DOMAINS.get(op, "normal")
    first = ctx.value(ctx.float, kind=kind)
    inputs = [first]
    for spec in opdef.inputs[1:]:
        if spec.optional and ctx.chance(0.3):
            inputs.append(None)
            continue
        shape = ctx.broadcast_partner(first.shape) if opdef.kind == "broadcast" \
            else first.shape
        inputs.append(ctx.fresh(shape, ctx.float, kind))
    if opdef.kind == "broadcast" and ctx.chance(0.5):
        inputs.reverse()
    return ctx.call(op, *inputs, **attr_draw(ctx, opdef))


def attr_draw(ctx, opdef) -> dict:
    """Attributes of an example of the op, or values drawn from their specs: a choice of a
    'str:a|b' spec, a bool, or the default (left out)."""
    if opdef.examples and ctx.chance(0.5):
        return dict(ctx.choice(opdef.examples)[1])
    attrs = {}
    for name, spec in opdef.attr_specs.items():
        base = spec.type.rstrip("?")
        if base.startswith("str:"):
            attrs[name] = ctx.choice(base[4:].split("|"))
        elif base == "bool":
            attrs[name] = ctx.chance(0.5)
    return attrs


def from_examples(ctx, op):
    """Data of the shapes and dtypes of one of the op's examples, with its attributes."""
    opdef = ctx.registry.get(op)
    input_types, attrs = ctx.choice(opdef.examples)
    inputs = [None if t is None else ctx.fresh(t.shape, t.dtype, DOMAINS.get(op, "normal"))
              for t in input_types]
    return ctx.call(op, *inputs, **dict(attrs))


def generator_for(opdef):
    """The generator of an op: its definition's, the kit's own, the generic elementwise
    one, or one from its examples; None when the op has none of these (it needs a
    `samples` hook)."""
    if getattr(opdef, "generator", None) is not None:
        return opdef.generator
    if opdef.name in GENERATORS:
        return GENERATORS[opdef.name]
    tensors_only = all(not s.variadic for s in opdef.inputs)
    required = [s for s in opdef.attr_specs.values() if s.default is REQUIRED]
    if opdef.kind in ("elemwise", "broadcast") and tensors_only and opdef.inputs \
            and (not required or opdef.examples):
        return generic_elementwise
    if opdef.examples:
        return from_examples
    return None



# --- activations with a parameter tensor, indexing, scans and selection ------------------

@generator("nn.prelu")
def gen_prelu(ctx, op):
    data = ctx.value(ctx.float, min_rank=1)
    count = ctx.int(0, data.rank)  # slope broadcasts one way: trailing dims, some of 1
    shape = [d if ctx.chance(0.6) else 1 for d in data.shape[data.rank - count:]]
    return ctx.call(op, data, ctx.fresh(shape, data.dtype, const=ctx.chance(0.5)))


@generator("gather_elements")
def gen_gather_elements(ctx, op):
    data = ctx.value(ctx.all, min_rank=1)
    axis = ctx.int(-data.rank, data.rank - 1)
    dim = data.shape[axis]
    shape = [ctx.int(0 if ctx.edge else 1, 3) if a == axis % data.rank else
             ctx.int(0 if ctx.edge else min(d, 1), d) for a, d in enumerate(data.shape)]
    if not dim:
        shape[axis % data.rank] = 0
    indices = ctx.rng.integers(-dim, dim, size=shape) if dim else np.zeros(shape)
    return ctx.call(op, data, ctx.feed(indices.astype(ctx.choice(["int32", "int64"]))),
                    axis=axis)


@generator("cumsum", "cumprod")
def gen_cumsum(ctx, op):
    data = ctx.value(_numeric(ctx), min_rank=1, max_rank=3 if op == "cumprod" else 4)
    return ctx.call(op, data, axis=ctx.int(-data.rank, data.rank - 1),
                    exclusive=ctx.chance(0.4), reverse=ctx.chance(0.4))


@generator("signal.dft")
def gen_dft(ctx, op):
    """Real (..., 1) or complex (..., 2) data, any signal axis, a length that pads or
    truncates (always one where the default would be 0), every direction and norm."""
    shape = ctx.shape(min_rank=1, max_rank=3) + (ctx.choice([1, 2]),)
    axis = ctx.int(0, len(shape) - 2) - (len(shape) if ctx.chance(0.5) else 0)
    inverse, onesided, size = ctx.chance(0.5), ctx.chance(0.4), shape[axis]
    needed = size == 0 or (inverse and onesided and size == 1)
    length = ctx.int(1, 2 * size + 2) if needed or ctx.chance(0.4) else None
    return ctx.call(op, ctx.fresh(shape, ctx.float), axis=axis, inverse=inverse,
                    onesided=onesided, length=length,
                    norm=ctx.choice(["backward", "ortho", "forward"]))


@generator("trilu")
def gen_trilu(ctx, op):
    data = ctx.value(ctx.all, min_rank=2)
    return ctx.call(op, data, k=ctx.int(-3, 3), upper=ctx.chance(0.5))


@generator("tile")
def gen_tile(ctx, op):
    data = ctx.value(ctx.all, max_rank=3)
    return ctx.call(op, data, repeats=[ctx.int(0 if ctx.edge else 1, 3) for _ in data.shape])


@generator("topk")
def gen_topk(ctx, op):
    data = ctx.value(_numeric(ctx), min_rank=1, exact=True)
    axis = ctx.int(-data.rank, data.rank - 1)
    return ctx.call(op, data, k=ctx.int(0, data.shape[axis]), axis=axis,
                    largest=ctx.chance(0.6))


@generator("scatter_elements")
def gen_scatter_elements(ctx, op):
    reduction = ctx.choice(["none", "none", "add", "mul", "max", "min"])
    data = ctx.value(ctx.numeric if reduction != "none" else ctx.all, min_rank=1)
    axis = ctx.int(-data.rank, data.rank - 1)
    dim = data.shape[axis]
    shape = [ctx.int(0, d) for d in data.shape]
    # distinct indices along the axis (for "none", where a repeated index keeps any one)
    order = np.argsort(ctx.rng.random(data.shape), axis=axis)
    indices = order[tuple(slice(0, n) for n in shape)]
    if dim and ctx.chance(0.3):
        indices = indices - dim  # negative ones count from the end
    updates = ctx.fresh(shape, data.dtype)
    return ctx.call(op, data, ctx.feed(indices.astype(ctx.choice(["int32", "int64"]))),
                    updates, axis=axis, reduction=reduction)

