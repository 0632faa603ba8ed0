"""Sample generators for the quantized products and qnn.requantize: int8/uint8 operands of
drawn shapes (batched, long reductions), zero points away from 0, scales per tensor or per
output channel, with or without an int32 bias, so a backend's int8 kernels see what
quantized models give them rather than the ops' few examples."""
from __future__ import annotations

import numpy as np

from .generators import generator

QDTYPES = ["uint8", "int8"]


def _zero(ctx, dtype: str, shape=()):
    low, high = (-20, 20) if dtype == "int8" else (100, 156)
    return ctx.const(ctx.rng.integers(low, high, size=shape).astype(dtype))


def _scale(ctx, shape=(), low=0.002, high=0.05):
    return ctx.const(ctx.rng.uniform(low, high, size=shape).astype("float32"))


def _weight_params(ctx, channels: int):
    shape = (channels,) if ctx.chance(0.5) else ()
    return _scale(ctx, shape), ctx.const(np.zeros(shape, "int8"))


@generator("qnn.matmul")
def gen_qmatmul(ctx, op):
    dtype, out = ctx.choice(QDTYPES), ctx.choice(QDTYPES)
    m, k, n = ctx.int(1, 6), ctx.choice([1, 3, 16, 64, 200]), ctx.int(1, 9)
    batch = ctx.choice([(), (2,), (2, 3)])
    a = ctx.fresh(batch + (m, k), dtype)
    b = ctx.fresh((batch if ctx.chance(0.5) else ()) + (k, n), "int8", const=True)
    b_scale, b_zero = _weight_params(ctx, n)
    return ctx.call(op, a, _scale(ctx), _zero(ctx, dtype), b, b_scale, b_zero,
                    _scale(ctx, (), 0.05, 2.0), _zero(ctx, out))


@generator("qnn.linear")
def gen_qlinear(ctx, op):
    dtype, out = ctx.choice(QDTYPES), ctx.choice(QDTYPES)
    k, n = ctx.choice([1, 5, 32, 130]), ctx.int(1, 9)
    data = ctx.fresh(ctx.choice([(), (2,), (2, 3)]) + (ctx.int(1, 4), k), dtype)
    weight = ctx.fresh((n, k), "int8", const=True)
    w_scale, w_zero = _weight_params(ctx, n)
    bias = ctx.const(ctx.rng.integers(-5000, 5000, n).astype("int32")) \
        if ctx.chance(0.6) else None
    return ctx.call(op, data, _scale(ctx), _zero(ctx, dtype), weight, w_scale, w_zero,
                    _scale(ctx, (), 0.05, 2.0), _zero(ctx, out), bias)


@generator("qnn.requantize")
def gen_requantize(ctx, op):
    dtype, out = ctx.choice(QDTYPES + ["int32"]), ctx.choice(QDTYPES)
    data = ctx.fresh((ctx.int(1, 3), ctx.int(1, 5), ctx.int(1, 4)), dtype)
    axis = ctx.int(0, 2)
    shape = (data.shape[axis],) if ctx.chance(0.5) else ()
    zero = ctx.const(np.zeros(shape, "int32")) if dtype == "int32" else _zero(ctx, dtype,
                                                                               shape)
    return ctx.call(op, data, _scale(ctx, shape, 0.001, 0.1), zero,
                    _scale(ctx, (), 0.05, 1.0), _zero(ctx, out), axis=axis, dtype=out)


def _shapes_that_broadcast(ctx) -> tuple[tuple, tuple]:
    shape = tuple(ctx.int(1, 5) for _ in range(ctx.int(1, 3)))
    other = shape[ctx.int(0, len(shape) - 1):] if ctx.chance(0.4) else shape
    return (shape, other) if ctx.chance(0.5) else (other, shape)


@generator("qnn.add", "qnn.multiply")
def gen_qbinary(ctx, op):
    """Per-tensor operands of one dtype broadcasting against each other (the generic
    elementwise generator draws float data, which these ops refuse)."""
    dtype = ctx.choice(QDTYPES)
    a_shape, b_shape = _shapes_that_broadcast(ctx)
    a, b = ctx.fresh(a_shape, dtype), ctx.fresh(b_shape, dtype)
    return ctx.call(op, a, _scale(ctx), _zero(ctx, dtype), b, _scale(ctx), _zero(ctx, dtype),
                    _scale(ctx, (), 0.01, 0.2), _zero(ctx, dtype))


@generator("qnn.sigmoid", "qnn.leaky_relu")
def gen_qunary(ctx, op):
    dtype = ctx.choice(QDTYPES)
    data = ctx.fresh(tuple(ctx.int(1, 6) for _ in range(ctx.int(1, 3))), dtype)
    attrs = {"alpha": ctx.choice([0.01, 0.2, 1.5])} if op == "qnn.leaky_relu" else {}
    out_scale = _scale(ctx, (), 1 / 256, 1 / 64) if op == "qnn.sigmoid" else _scale(ctx)
    return ctx.call(op, data, _scale(ctx, (), 0.01, 0.1), _zero(ctx, dtype), out_scale,
                    _zero(ctx, dtype), **attrs)
