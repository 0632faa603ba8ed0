"""Sample calls of tosa_custom's integer ops, for legato.testing (their operands have a
structure the kit's generators cannot guess: NHWC/OHWI layouts, 256-entry tables,
multiplier/shift pairs, divisors that are never zero)."""
from __future__ import annotations

import numpy as np
from legato.plugin_api import Sample

WINDOW = {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1]}


def _int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def _zero_points(rng, count=2):
    return tuple(np.array([z], np.int8) for z in rng.integers(-8, 8, count))


def qconv2d(rng):
    return [Sample("tosa.qconv2d", (_int8(rng, (1, 5, 6, c)), _int8(rng, (o, 3, 3, c)),
                                    rng.integers(-500, 500, o).astype(np.int32),
                                    *_zero_points(rng)), WINDOW)
            for c, o in ((3, 4), (1, 2), (8, 5))]


def qdepthwise_conv2d(rng):
    return [Sample("tosa.qdepthwise_conv2d",
                   (_int8(rng, (1, 6, 5, c)), _int8(rng, (3, 3, c, m)),
                    rng.integers(-500, 500, c * m).astype(np.int32), *_zero_points(rng)),
                   WINDOW) for c, m in ((4, 1), (2, 2))]


def qmatmul(rng):
    return [Sample("tosa.qmatmul", (_int8(rng, (n, h, c)), _int8(rng, (n, c, w)),
                                    *_zero_points(rng)))
            for n, h, c, w in ((1, 3, 4, 5), (2, 2, 7, 3))]


def rescale(rng):
    out = []
    for shape, channels in (((2, 3), 1), ((2, 4), 4)):
        multiplier = rng.integers(1 << 30, (1 << 31) - 1, channels).astype(np.int32)
        shift = rng.integers(20, 40, channels).astype(np.int8)
        out.append(Sample("tosa.rescale", (rng.integers(-4000, 4000, shape).astype(np.int32),
                                           multiplier, shift, np.array([0], np.int32),
                                           np.array([3], np.int8)), {"dtype": "int8"}))
    return out


def table(rng):
    return [Sample("tosa.table", (_int8(rng, (2, 5)), _int8(rng, 256)))]


def intdiv(rng):
    divisor = rng.integers(1, 9, (2, 3)) * rng.choice([-1, 1], (2, 3))
    return [Sample("tosa.intdiv", (rng.integers(-100, 100, (2, 3)).astype(np.int32),
                                   divisor.astype(np.int32)))]
