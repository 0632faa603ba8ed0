"""Fuzz target: c_kernels on shapes past its vector widths, blocks and thread splits.

The program generators of target_programs draw dims of at most 40 and convs of a few
channels, so the C kernels' packed, blocked and multi-threaded paths (the GEMM micro
kernels, the conv packings, depthwise convs, the split of work over threads) meet few of
their edges. This target builds chains of one to four ops of larger shapes, dims drawn
around the powers of two (7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, ...): convs
(grouped, depthwise, strided, dilated, asymmetrically padded, NCHW and NHWC, every kernel
layout, with bias) followed by activations and residual adds that backends may fuse into
them, matmul and linear, pools with ceil_mode, softmax, layer norm, reductions, transposes
and broadcasting elementwise ops. Each case runs under LEGATO_NUM_THREADS of 1 to 7 (odd
counts split work unevenly) and compares c_kernels with cpu_ref (float64 inside), twice:
the second call must reuse the plan and buffers of the first without changing anything.
"""
from __future__ import annotations

import os

import numpy as np

import legato
from legato import LegatoError

from . import Mismatch

QUICK_CASES = 40
CASE_TIMEOUT = 60.0
MAX_ELEMENTS = 1 << 18
EDGES = (1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 96, 127, 129)
THREADS = (1, 2, 2, 3, 4, 7)


class Chain:
    """A chain of calls on one builder, the current value and its (layout-aware) shape."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.b = legato.GraphBuilder()
        self.feeds: list[np.ndarray] = []
        self.ops: list[str] = []
        self.reduced = 1  # the longest sum a result went through (tolerance)

    def chance(self, p) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, items):
        return items[int(self.rng.integers(len(items)))]

    def size(self, limit=129) -> int:
        return self.choice([e for e in EDGES if e <= limit])

    def input(self, shape, const=None):
        array = self.rng.uniform(-1, 1, size=shape).astype(np.float32)
        if const if const is not None else self.chance(0.5):
            return self.b.const(array)
        self.feeds.append(array)
        return self.b.input(f"x{len(self.feeds)}", array.shape, "float32")

    def call(self, op, *args, **attrs):
        self.ops.append(op)
        return self.b.call(op, *args, **attrs)


def image(c: Chain):
    n = c.choice([1, 1, 2])
    ch = c.size(64)
    h, w = c.size(33), c.size(33)
    while n * ch * h * w > MAX_ELEMENTS // 4:
        ch = max(1, ch // 2)
    layout = c.choice(["NCHW", "NCHW", "NCHW", "NHWC"])
    shape = (n, ch, h, w) if layout == "NCHW" else (n, h, w, ch)
    return c.input(shape, const=False), layout, (n, ch, h, w)


def window(c: Chain, h: int, w: int, pool: bool):
    kernel = [c.choice([1, 2, 3, 3, 5, 7]), c.choice([1, 2, 3, 3, 5, 7])]
    dilation = [1, 1] if pool and c.chance(0.7) else [c.choice([1, 1, 2, 3]) for _ in "hw"]
    strides = [c.choice([1, 1, 2, 3, 4]) for _ in "hw"]
    padding = [int(c.rng.integers(0, 4)) for _ in range(4)]
    for i, size in enumerate((h, w)):
        while (kernel[i] - 1) * dilation[i] + 1 > size + padding[i] + padding[i + 2] \
                and kernel[i] > 1:
            kernel[i] -= 1
        if pool:
            padding[i] = min(padding[i], kernel[i] - 1)
            padding[i + 2] = min(padding[i + 2], kernel[i] - 1)
    return kernel, strides, dilation, padding


def conv(c: Chain):
    data, layout, (n, ch, h, w) = image(c)
    kind = c.choice(["dense", "dense", "depthwise", "grouped", "pointwise"])
    groups = ch if kind == "depthwise" else (
        c.choice([g for g in (2, 3, 4, 8) if ch % g == 0] or [1]) if kind == "grouped" else 1)
    out = groups * (c.choice([1, 1, 2]) if kind == "depthwise" else
                    max(1, c.size(64) // groups))
    if kind == "pointwise":
        kernel, strides, dilation, padding = [1, 1], [c.choice([1, 2]), 1], [1, 1], [0] * 4
    else:
        kernel, strides, dilation, padding = window(c, h, w, pool=False)
    kernel_layout = c.choice(["OIHW", "OIHW", "OIHW", "OIHW", "HWIO", "OHWI"])
    dims = {"O": out, "I": ch // groups, "H": kernel[0], "W": kernel[1]}
    weight = c.input(tuple(dims[d] for d in kernel_layout), const=c.chance(0.8))
    bias = c.input((out,), const=True) if c.chance(0.6) else None
    c.reduced = max(c.reduced, (ch // groups) * kernel[0] * kernel[1])
    y = c.call("nn.conv2d", data, weight, bias, strides=strides, padding=padding,
               dilation=dilation, groups=groups, data_layout=layout,
               kernel_layout=kernel_layout)
    return epilogue(c, y, layout)


def epilogue(c: Chain, y, layout):
    """What a backend may fuse into a conv or matmul: an activation, a residual add."""
    if c.chance(0.3):
        channel_axis = 1 if layout == "NCHW" else y.rank - 1
        shape = [1] * y.rank
        shape[channel_axis] = y.shape[channel_axis]
        y = c.call("add", y, c.input(tuple(shape), const=True))
    if c.chance(0.6):
        op = c.choice(["nn.relu", "nn.relu", "clip", "sigmoid", "nn.silu", "nn.gelu",
                       "nn.leaky_relu", "tanh"])
        attrs = {"min": 0.0, "max": 6.0} if op == "clip" else (
            {"alpha": 0.1} if op == "nn.leaky_relu" else {})
        y = c.call(op, y, **attrs)
    if c.chance(0.3):
        y = c.call("add", y, c.input(y.shape, const=False))
    return y


def pool(c: Chain):
    data, layout, (n, ch, h, w) = image(c)
    op = c.choice(["nn.max_pool2d", "nn.avg_pool2d"])
    kernel, strides, dilation, padding = window(c, h, w, pool=True)
    attrs = {"pool_size": kernel, "strides": strides, "padding": padding,
             "dilation": dilation if op == "nn.max_pool2d" else [1, 1],
             "ceil_mode": c.chance(0.4), "data_layout": layout}
    if op == "nn.avg_pool2d":
        attrs["count_include_pad"] = c.chance(0.5)
    c.reduced = max(c.reduced, kernel[0] * kernel[1])
    return c.call(op, data, **attrs)


def matmul(c: Chain):
    m, k, n = c.size(), c.size(), c.size()
    batch = () if c.chance(0.6) else (c.choice([1, 2, 3]),)
    c.reduced = max(c.reduced, k)
    if c.chance(0.4):
        data = c.input(batch + (m, k), const=False)
        weight = c.input((n, k), const=c.chance(0.8))
        bias = c.input((n,), const=True) if c.chance(0.6) else None
        return epilogue(c, c.call("nn.linear", data, weight, bias), "NHWC")
    a = c.input(batch + (m, k), const=c.chance(0.2))
    b_batch = batch if c.chance(0.5) else ()
    b = c.input(b_batch + (k, n), const=c.chance(0.6))
    if c.chance(0.2):  # the transposed right operand of attention scores
        b = c.call("permute_dims", c.input(b_batch + (n, k), const=c.chance(0.5)),
                   axes=list(range(len(b_batch))) + [len(b_batch) + 1, len(b_batch)])
    return epilogue(c, c.call("matmul", a, b), "NHWC")


def rows(c: Chain):
    shape = (c.size(33), c.size()) if c.chance(0.5) else (c.choice([1, 2]), c.size(33),
                                                          c.size())
    data = c.input(shape, const=False)
    op = c.choice(["nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.rms_norm", "sum",
                   "max", "mean", "variance"])
    c.reduced = max(c.reduced, shape[-1])
    if op in ("nn.softmax", "nn.log_softmax"):
        return c.call(op, data, axis=c.choice([-1, -1, 0]))
    if op in ("nn.layer_norm", "nn.rms_norm"):
        gamma = c.input(shape[-1:], const=True)
        extra = (c.input(shape[-1:], const=True),) if op == "nn.layer_norm" else ()
        return c.call(op, data, gamma, *extra, axes=[-1], epsilon=1e-5)
    axes = c.choice([[-1], [0], None, [0, -1]])
    return c.call(op, data, axes=axes, keepdims=c.chance(0.5))


def movement(c: Chain):
    rank = c.choice([2, 3, 4])
    shape = tuple(c.size(33) for _ in range(rank))
    while np.prod(shape) > MAX_ELEMENTS:
        shape = tuple(max(1, d // 2) for d in shape)
    data = c.input(shape, const=False)
    op = c.choice(["permute_dims", "add", "multiply", "maximum", "where", "concat"])
    if op == "permute_dims":
        return c.call(op, data, axes=c.rng.permutation(rank).tolist())
    if op == "concat":
        other = list(shape)
        axis = int(c.rng.integers(rank))
        other[axis] = c.size(33)
        return c.call("concat", data, c.input(tuple(other)), axis=axis)
    partner = tuple(1 if c.chance(0.4) else d for d in shape[int(c.rng.integers(rank)):])
    other = c.input(partner)
    if op == "where":
        cond = c.call("greater", data, c.b.const(np.float32(0)))
        return c.call("where", cond, data, other)
    return c.call(op, *((data, other) if c.chance(0.5) else (other, data)))


MAKERS = [conv, conv, conv, pool, matmul, matmul, rows, movement]


def build(seed: int) -> Chain:
    c = Chain(seed)
    results = [MAKERS[seed % len(MAKERS)](c)]
    for _ in range(int(c.rng.integers(0, 3))):
        results.append(c.choice(MAKERS)(c))
    keep = results if c.chance(0.5) else results[-1:]
    c.module = c.b.build(*keep)
    return c


def run(seed: int) -> str:
    try:
        c = build(seed)
    except LegatoError:  # a combination the op checks refuse (a kernel past the input)
        return "skipped"
    threads = THREADS[seed % len(THREADS)]
    try:
        want = as_tuple(legato.compile(c.module, "cpu_ref")(*c.feeds))
    except LegatoError:
        return "refused"
    previous = os.environ.get("LEGATO_NUM_THREADS")
    os.environ["LEGATO_NUM_THREADS"] = str(threads)
    try:
        compiled = legato.compile(c.module, "c_kernels")
        first = as_tuple(compiled(*c.feeds))
        kept = [np.array(r, copy=True) for r in first]
        second = as_tuple(compiled(*[f.copy() for f in c.feeds]))
    except LegatoError as err:
        raise Mismatch(f"c_kernels refuses at run time what cpu_ref computes "
                       f"({', '.join(c.ops)}): {str(err)[:200]}") from None
    finally:
        if previous is None:
            os.environ.pop("LEGATO_NUM_THREADS", None)
        else:
            os.environ["LEGATO_NUM_THREADS"] = previous
    where = f"c_kernels, {threads} threads ({', '.join(c.ops)})"
    compare(first, want, where, c.reduced)
    for index, (a, b) in enumerate(zip(second, first)):
        if not np.array_equal(a, b, equal_nan=True):
            raise Mismatch(f"{where}: the second call's result {index} differs from the first")
    for index, (a, b) in enumerate(zip(first, kept)):
        if not np.array_equal(a, b, equal_nan=True):
            raise Mismatch(f"{where}: result {index} of the first call changed in the second")
    return "ok"


def as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def compare(got, want, where: str, reduced: int) -> None:
    if len(got) != len(want):
        raise Mismatch(f"{where}: {len(got)} results, cpu_ref {len(want)}")
    # float32 accumulation over `reduced` terms of magnitude <= ~1
    atol = 1e-5 * max(1.0, np.sqrt(reduced)) * 8
    for index, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise Mismatch(f"{where}: result {index} is {g.dtype}{list(g.shape)}, cpu_ref "
                           f"{w.dtype}{list(w.shape)}")
        if g.dtype.kind != "f":
            if not np.array_equal(g, w):
                raise Mismatch(f"{where}: result {index} differs from cpu_ref")
            continue
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        if not np.all(diff <= atol * scale + 1e-4 * np.abs(w)) or \
                not np.array_equal(np.isnan(g), np.isnan(w)):
            raise Mismatch(f"{where}: result {index} differs from cpu_ref by up to "
                           f"{float(np.nanmax(diff, initial=0.0)):.3g} (scale {scale:.3g})")
