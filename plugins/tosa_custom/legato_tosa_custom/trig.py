"""asin, acos and atan for TOSA 1.0, which has sin and cos but no inverse: Cephes' float32
range reductions and polynomials (asinf, acosf, atanf), each within about two float32 ulps
of the result (plus the rounding of TOSA's reciprocal-based division). Every branch is
computed and the right one selected, as TOSA has no control flow per element; a branch's
inf or NaN where it is not selected does no harm.
"""
from __future__ import annotations

import math

from legato.plugin_api import is_float

# asin(x) = x + x^3 P(x^2) on |x| <= 0.5 (highest power first)
ASIN = (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1)
# atan(t) = t + t^3 Q(t^2) on |t| <= tan(pi/8)
ATAN = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
TAN_PI_8, TAN_3PI_8 = math.tan(math.pi / 8), math.tan(3 * math.pi / 8)


def _odd_series(b, x, coefficients):
    """x + x^3 * poly(x^2), the polynomial's coefficients highest power first."""
    z = b.multiply(x, x)
    poly = None
    for c in coefficients:
        poly = c if poly is None else b.add(b.multiply(poly, z), c)
    return b.add(b.multiply(b.multiply(poly, z), x), x)


def _with_sign_of(b, x, value):
    return b.where(b.less(x, 0.0), b.negative(value), value)


def _half_angle(b, a):
    """asin(sqrt((1 - a) / 2)), a = |x| above 0.5: asin(a) = pi/2 - 2 this (NaN past 1)."""
    return _odd_series(b, b.sqrt(b.multiply(b.subtract(1.0, a), 0.5)), ASIN)


def _float_only(rule):
    def checked(b, call):
        return rule(b, call.inputs[0]) if is_float(call.inputs[0].dtype) else None
    checked.__name__ = checked.__qualname__ = rule.__name__
    return checked


@_float_only
def asin(b, x):
    a = b.abs(x)
    far = b.subtract(math.pi / 2, b.multiply(_half_angle(b, a), 2.0))
    return _with_sign_of(b, x, b.where(b.greater(a, 0.5), far, _odd_series(b, a, ASIN)))


@_float_only
def acos(b, x):
    a = b.abs(x)
    twice = b.multiply(_half_angle(b, a), 2.0)
    far = b.where(b.less(x, 0.0), b.subtract(math.pi, twice), twice)
    near = b.subtract(math.pi / 2, _odd_series(b, x, ASIN))
    return b.where(b.greater(a, 0.5), far, near)


@_float_only
def atan(b, x):
    a = b.abs(x)
    high, middle = b.greater(a, TAN_3PI_8), b.greater(a, TAN_PI_8)
    # atan(a) = offset + atan(t), |t| <= tan(pi/8)
    t = b.where(high, b.negative(b.divide(1.0, a)),
                b.where(middle, b.divide(b.subtract(a, 1.0), b.add(a, 1.0)), a))
    angle = [b.scalar(v, x.dtype) for v in (math.pi / 2, math.pi / 4, 0.0)]
    offset = b.where(high, angle[0], b.where(middle, angle[1], angle[2]))
    return _with_sign_of(b, x, b.add(_odd_series(b, t, ATAN), offset))
