"""Generators of tosa_custom's float and movement ops for legato.testing (OpDef.generator):
each draws one call on the test kit's context, so samples and fuzz programs cover them
within the values TOSA defines them for."""
from __future__ import annotations

import numpy as np


def pow_(ctx, op):
    # TOSA POW is defined for a base > 0 and a finite exponent
    base = ctx.value(ctx.float, kind="positive")
    exponent = ctx.data(ctx.broadcast_partner(base.shape), ctx.float).clip(-2, 2)
    return ctx.call(op, base, ctx.const(exponent) if ctx.chance(0.3) else ctx.feed(exponent))


def reciprocal(ctx, op):
    return ctx.call(op, ctx.value(ctx.float, kind="nonzero"))


def cast(ctx, op):
    dtype = ctx.choice(["int32", "int8", ctx.float])
    return ctx.call(op, ctx.value(ctx.choice(ctx.all), exact=True), dtype=dtype)


def gather(ctx, op):
    n, k, c, w = ctx.dim(), ctx.dim(nonzero=True), ctx.dim(), ctx.dim()
    values = ctx.fresh((n, k, c), ctx.choice([ctx.float, "int32", "int8"]))
    indices = ctx.rng.integers(0, k, size=(n, w)).astype("int32")
    return ctx.call(op, values, ctx.feed(indices))
