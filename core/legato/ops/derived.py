"""Elementwise ops that are short compositions of the primitives (level 1): the other
comparisons, predicates on floats, sign, trunc and remainder.

Being composites, every backend has them: one that lacks a kernel decomposes them into
primitives it has (TOSA and the C kernels included); one with a kernel keeps them whole.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..ir import TensorType
from .base import T, composite, f32, fail, float_unary_infer, is_float
from .elementwise import _arithmetic, _compare, _logical

X23 = f32(2, 3)
PAIRS = [((X23, f32(3)), {}), ((T("int32", 2, 3), T("int32", 2, 1)), {})]
BOOLS = [((T("bool", 2, 3), T("bool", 3)), {})]


def _pair(name, infer, examples, doc, **facts):
    return composite(name, "a, b", infer, "broadcast", 1, examples, doc=doc,
                     tolerance=0.0, **facts)


def _single(name, infer, examples, attrs=None, **facts):
    register = composite(name, "a", infer, "elemwise", 1, examples, attrs, **facts)
    if infer is not float_unary_infer or facts.get("tolerance") == 0.0:
        return register
    return lambda decompose: register(_rounded_once(decompose))


HALF_FLOATS = ("float16", "bfloat16")


def _rounded_once(decompose):
    """The float function's decomposition run in float32 for 16-bit floats and rounded
    once, as PyTorch computes them: each step rounding to bfloat16 lost up to 90 ulps
    (exp2's a * log(2), expm1 and log1p near 0, digamma and lgamma near their roots)."""
    @functools.wraps(decompose)
    def definition(b, x, **attrs):
        if x.dtype not in HALF_FLOATS:
            return decompose(b, x, **attrs)
        return b.cast(decompose(b, b.cast(x, dtype="float32"), **attrs), dtype=x.dtype)
    return definition


# --- comparisons and logic (NaN compares unequal, as in IEEE 754) ---------------------------

@_pair("not_equal", _compare, PAIRS, "`a != b` (true where either is NaN)", aten="ne")
def not_equal(b, x, y):
    return b.logical_not(b.equal(x, y))


@_pair("greater_equal", _compare, PAIRS, "`a >= b`", onnx="GreaterOrEqual", aten="ge")
def greater_equal(b, x, y):
    return b.logical_or(b.greater(x, y), b.equal(x, y))


@_pair("less_equal", _compare, PAIRS, "`a <= b`", onnx="LessOrEqual", aten="le")
def less_equal(b, x, y):
    return b.logical_or(b.less(x, y), b.equal(x, y))


@_pair("logical_xor", _logical, BOOLS, "`a != b` on bool tensors", onnx="Xor",
       aten="logical_xor")
def logical_xor(b, x, y):
    return b.logical_and(b.logical_or(x, y), b.logical_not(b.logical_and(x, y)))


# --- predicates ---------------------------------------------------------------------------

def _predicate(types, attrs):
    return TensorType(types[0].shape, "bool")


def _nothing(b, x):
    """All false: an integer is never NaN nor infinite."""
    return b.const(np.zeros(x.shape, dtype=bool))


NUMERIC = [((X23,), {}), ((T("int64", 2, 3),), {})]


@_single("isnan", _predicate, NUMERIC, onnx="IsNaN", aten="isnan", tolerance=0.0)
def isnan(b, x):
    """`a` is NaN (bool result; false for integers and bools)"""
    return b.logical_not(b.equal(x, x)) if is_float(x.dtype) else _nothing(b, x)


@_single("isinf", _predicate, NUMERIC + [((X23,), {"detect_negative": False})],
         {"detect_positive": ("bool", True), "detect_negative": ("bool", True)},
         aten="isinf", tolerance=0.0)
def isinf(b, x, detect_positive, detect_negative):
    """`a` is +inf (`detect_positive`) or -inf (`detect_negative`), as ONNX IsInf"""
    if not is_float(x.dtype) or not (detect_positive or detect_negative):
        return _nothing(b, x)
    if detect_positive and detect_negative:
        return b.equal(b.abs(x), math.inf)
    return b.equal(x, math.inf if detect_positive else -math.inf)


# --- exp and log near 0 ------------------------------------------------------------------

@_single("expm1", float_unary_infer, [((X23,), {})], aten="expm1", tolerance=1e-6)
def expm1(b, x):
    """`exp(a) - 1` (the error stays below a float32 ulp of 1 near 0)"""
    return b.subtract(b.exp(x), 1.0)


@_single("log1p", float_unary_infer, [((X23,), {})], aten="log1p", tolerance=1e-6)
def log1p(b, x):
    """`log(1 + a)` (the error stays below a float32 ulp of 1 near 0)"""
    return b.log(b.add(x, 1.0))


@_single("log2", float_unary_infer, [((X23,), {})], aten="log2", tolerance=1e-6)
def log2(b, x):
    """base-2 logarithm"""
    return b.multiply(b.log(x), 1 / math.log(2))


@_single("log10", float_unary_infer, [((X23,), {})], aten="log10", tolerance=1e-6)
def log10(b, x):
    """base-10 logarithm"""
    return b.multiply(b.log(x), 1 / math.log(10))


@_single("exp2", float_unary_infer, [((X23,), {})], aten="exp2", tolerance=1e-6)
def exp2(b, x):
    """`2 ** a`"""
    return b.exp(b.multiply(x, math.log(2)))


# --- trigonometric and hyperbolic ----------------------------------------------------------
FLOATS = [((X23,), {})]
LN2 = math.log(2)


def _half_exps(b, x):
    """exp(x) / 2 and exp(-x) / 2, each as one exp (so exp(89) / 2 does not overflow)."""
    return b.exp(b.subtract(x, LN2)), b.exp(b.subtract(b.negative(x), LN2))


@_single("tan", float_unary_infer, FLOATS, onnx="Tan", aten="tan", tolerance=1e-5)
def tan(b, x):
    """tangent (radians)"""
    return b.divide(b.sin(x), b.cos(x))


@_single("sinh", float_unary_infer, FLOATS, onnx="Sinh", aten="sinh", tolerance=1e-6)
def sinh(b, x):
    """hyperbolic sine"""
    up, down = _half_exps(b, x)
    return b.subtract(up, down)


@_single("cosh", float_unary_infer, FLOATS, onnx="Cosh", aten="cosh", tolerance=1e-6)
def cosh(b, x):
    """hyperbolic cosine"""
    up, down = _half_exps(b, x)
    return b.add(up, down)


def _log_2a(b, size, near):
    """`near` (a log of a + sqrt(a^2 +- 1)), or log(2a) = log(a) + log(2) where a^2 +- 1
    rounds to a^2 (above 2 ** 13 in float32, 2 ** 27 in float64: 16-bit floats come in
    float32): there a^2 would overflow long before log(2a) does."""
    large = 2.0 ** (13 if size.dtype == "float32" else 27)
    return b.where(b.greater(size, large), b.add(b.log(size), LN2), near)


@_single("asinh", float_unary_infer, FLOATS, onnx="Asinh", aten="asinh", tolerance=1e-6)
def asinh(b, x):
    """inverse hyperbolic sine, `sign(a) log(|a| + sqrt(a^2 + 1))`"""
    size = b.abs(x)
    value = _log_2a(b, size, b.log(b.add(size, b.sqrt(b.add(b.multiply(size, size), 1.0)))))
    return b.where(b.less(x, 0.0), b.negative(value), value)


@_single("acosh", float_unary_infer, FLOATS, onnx="Acosh", aten="acosh", tolerance=1e-6)
def acosh(b, x):
    """inverse hyperbolic cosine, `log(a + sqrt(a^2 - 1))` (NaN below 1)"""
    value = _log_2a(b, x, b.log(b.add(x, b.sqrt(b.subtract(b.multiply(x, x), 1.0)))))
    return b.where(b.less(x, 1.0), math.nan, value)


@_single("atanh", float_unary_infer, FLOATS, onnx="Atanh", aten="atanh", tolerance=1e-6)
def atanh(b, x):
    """inverse hyperbolic tangent, `log((1 + a) / (1 - a)) / 2`"""
    return b.multiply(b.log(b.divide(b.add(x, 1.0), b.subtract(1.0, x))), 0.5)


# --- rounding and signs -------------------------------------------------------------------

def _same(types, attrs):
    return types[0]


@_single("sign", _same, NUMERIC + [((T("bool", 3),), {})], onnx="Sign", aten="sign",
         tolerance=0.0)
def sign(b, x):
    """-1, 0 or 1 by the sign of `a`, in its dtype (NaN stays NaN; a bool is itself)"""
    if x.dtype == "bool":
        return b.logical_and(x, x)  # the identity, as a call
    signs = b.where(b.less(x, 0), -1, x) if x.dtype != "uint8" else x
    return b.where(b.greater(x, 0), 1, signs)


@_single("trunc", float_unary_infer, [((X23,), {})], aten="trunc", tolerance=0.0)
def trunc(b, x):
    """`a` rounded toward zero"""
    return b.where(b.less(x, 0.0), b.ceil(x), b.floor(x))


@_pair("remainder", _arithmetic, PAIRS, "`a - floor(a / b) * b`: the sign of `b` (Python "
       "`%`, ONNX Mod with fmod=0, `torch.remainder`); an integer `remainder(a, 0)` is 0",
       aten="remainder")
def remainder(b, x, y):
    # Python's float modulo: the fmod, moved by one divisor where the signs differ.
    rest = b.fmod(x, y)
    if x.dtype == "uint8":
        return rest
    zero = 0.0 if is_float(x.dtype) else 0
    moved = b.logical_and(b.logical_not(b.equal(rest, zero)),
                          b.logical_not(b.equal(b.less(rest, zero), b.less(y, zero))))
    return b.where(moved, b.add(rest, y), rest)


# --- special functions ----------------------------------------------------------------------

def _float_pair(types, attrs):
    for t in types:
        if not is_float(t.dtype):
            fail(f"inputs must be float tensors, got {', '.join(t.dtype for t in types)}")
    return _arithmetic(types, attrs)


@composite("atan2", "a, b", _float_pair, "broadcast", 1, [((X23, f32(3)), {})], aten="atan2",
           tolerance=2e-6)
def atan2(b, y, x):
    """the angle of the point (`b`, `a`) in (-pi, pi] (`numpy.arctan2(a, b)`)"""
    ay, ax = b.abs(y), b.abs(x)
    big, small = b.maximum(ax, ay), b.minimum(ax, ay)
    # atan of small / big (in [0, 1]); 1 where they are equal (both infinite too), 0 at 0
    ratio = b.where(b.equal(small, big), b.cast(b.greater(big, 0.0), dtype=x.dtype),
                    b.divide(small, big))
    angle = b.atan(ratio)
    angle = b.where(b.greater(ay, ax), b.subtract(math.pi / 2, angle), angle)
    # -0.0 counts as negative, as in C: its reciprocal is -inf
    left = b.logical_or(b.less(x, 0.0), b.less(b.divide(1.0, x), 0.0))
    angle = b.where(left, b.subtract(math.pi, angle), angle)
    below = b.logical_or(b.less(y, 0.0), b.less(b.divide(1.0, y), 0.0))
    return b.where(below, b.negative(angle), angle)


# erfc(x) for x >= 1 as exp(-x^2) h(1/x) / x, h a polynomial in 1/x - 1/2 fitted on (0, 1]
# (highest power first): relative accuracy in the tail, where 1 - erf(x) is 0
ERFC_TAIL = (-1.520212176e-1, 4.740887386e-2, 1.564193784e-1, -1.394648379e-1,
             3.704832868e-2, 4.639222716e-2, -1.085973675e-1, 1.187883123e-1,
             -3.663540452e-2, -1.672088335e-1, 5.107913545e-1)


def _erfc_tail_over_exp(b, size):
    """exp(t^2) erfc(t) for t = max(size, 1): h(1/t) / t."""
    t = b.maximum(size, 1.0)
    r = b.divide(1.0, t)
    s = b.subtract(r, 0.5)
    h = ERFC_TAIL[0]
    for c in ERFC_TAIL[1:]:
        h = b.add(b.multiply(s, h), c)
    return t, b.multiply(h, r)


@_single("erfc", float_unary_infer, FLOATS, aten="erfc",
         tolerance=3e-4)  # as erf's, which it is computed from below 1
def erfc(b, x):
    """`1 - erf(a)`, accurate relative to itself in the right tail"""
    size = b.abs(x)
    t, scaled = _erfc_tail_over_exp(b, size)
    tail = b.multiply(b.exp(b.negative(b.multiply(t, t))), scaled)
    return b.where(b.less(size, 1.0), b.subtract(1.0, b.erf(x)),
                   b.where(b.less(x, 0.0), b.subtract(2.0, tail), tail))


@_single("erfcx", float_unary_infer, FLOATS, aten="special_erfcx",
         tolerance=3e-4)  # as erf's, which it is computed from below 1
def erfcx(b, x):
    """the scaled complementary error function `exp(a^2) erfc(a)` (no overflow for large
    `a`; +inf below about -9.4)"""
    size = b.abs(x)
    _, scaled = _erfc_tail_over_exp(b, size)
    square = b.exp(b.multiply(x, x))
    below = b.multiply(square, b.subtract(1.0, b.erf(x)))
    return b.where(b.less(size, 1.0), below,
                   b.where(b.less(x, 0.0), b.subtract(b.multiply(square, 2.0), scaled), scaled))


# Lanczos' approximation (g = 5, six terms; Numerical Recipes' gammln): a few float32 ulps
# of lgamma for a >= 1/2, relative to max(|lgamma|, 1)
LANCZOS = (76.18009172947146, -86.50532032941677, 24.01409824083091, -1.231739572450155,
           0.1208650973866179e-2, -0.5395239384953e-5)


def _lanczos_lgamma(b, y):
    series = 1.000000000190015
    for j, c in enumerate(LANCZOS):
        series = b.add(b.divide(c, b.add(y, float(j + 1))), series)
    # (y + 1/2) log(y + 11/2) - (y + 11/2), written so that y = inf gives inf
    head = b.subtract(b.multiply(b.add(y, 0.5), b.subtract(b.log(b.add(y, 5.5)), 1.0)), 5.0)
    return b.add(head, b.log(b.divide(b.multiply(series, 2.5066282746310005), y)))


@_single("lgamma", float_unary_infer, FLOATS, aten="lgamma", tolerance=1e-5)
def lgamma(b, x):
    """`log |gamma(a)|` (+inf at 0 and the negative integers)"""
    reflect = b.less(x, 0.5)
    direct = _lanczos_lgamma(b, b.where(reflect, b.subtract(1.0, x), x))
    # below 1/2: lgamma(a) = log(pi / |sin(pi a)|) - lgamma(1 - a), with sin(pi a) taken
    # at a minus its nearest integer (exact), so no rounding of pi * a moves the poles
    near = b.subtract(x, b.round(x))
    reflected = b.subtract(b.log(b.divide(math.pi, b.abs(b.sin(b.multiply(near, math.pi))))),
                           direct)
    finite = b.where(reflect, reflected, direct)
    return b.where(b.equal(b.abs(x), math.inf), math.inf, finite)  # at both infinities


def _digamma_series(b, y):
    """digamma(y) for y >= 1/2: moved up by 6 (digamma(y) = digamma(y + 6) - sum 1/(y + k)),
    where the asymptotic series log z - 1/(2z) - sum B_2k / (2k z^2k) has converged."""
    shift = None
    for k in range(6):
        term = b.divide(1.0, b.add(y, float(k)) if k else y)
        shift = term if shift is None else b.add(shift, term)
    z = b.add(y, 6.0)
    inv = b.divide(1.0, z)
    inv2 = b.multiply(inv, inv)
    tail = b.subtract(1 / 252, b.multiply(inv2, 1 / 240))
    tail = b.subtract(1 / 120, b.multiply(inv2, tail))
    tail = b.subtract(1 / 12, b.multiply(inv2, tail))
    series = b.subtract(b.subtract(b.log(z), b.multiply(inv, 0.5)), b.multiply(inv2, tail))
    return b.subtract(series, shift)


@_single("digamma", float_unary_infer, FLOATS, aten="digamma", tolerance=1e-5)
def digamma(b, x):
    """`gamma'(a) / gamma(a)` (-inf at 0, NaN at the negative integers and -inf)"""
    reflect = b.less(x, 0.5)
    direct = _digamma_series(b, b.where(reflect, b.subtract(1.0, x), x))
    # below 1/2: digamma(a) = digamma(1 - a) - pi / tan(pi a), tan taken at a minus its
    # nearest integer (exact), so no rounding of pi * a moves the poles
    near = b.subtract(x, b.round(x))
    angle = b.multiply(near, math.pi)
    reflected = b.subtract(direct, b.divide(b.multiply(b.cos(angle), math.pi), b.sin(angle)))
    value = b.where(reflect, reflected, direct)
    pole = b.logical_and(b.equal(near, 0.0), b.less(x, 0.0))
    below_zero = b.less(b.divide(1.0, x), 0.0)  # -0 too (1 / -0 is -inf): +inf there
    value = b.where(b.logical_and(b.equal(x, 0.0), below_zero), math.inf, value)
    return b.where(pole, math.nan, value)
