"""Elementwise primitives: one row per op, with everything else derived from it.

A row names the op, its one-line semantics, the ONNX op types and ATen packets that map
onto it one to one (the importers derive their converters from them) and its error bound
(legato.ops.tolerance). The reference kernel, the C kernel and the TOSA lowering are found
by name in their plugins; the docs (docs/ops.md) and the test kit's samples are generated.
"""
from __future__ import annotations

from ..ir import TensorType
from .base import broadcast_shapes, fail, float_unary_infer, primitive, same_dtype, unary_infer

EXACT = 0.0
ULPS = 1e-6  # a float64 result rounded to float32 may be one ulp from the float32 operation


def _binary(types, attrs):
    a, b = types
    return TensorType(broadcast_shapes(a.shape, b.shape), same_dtype(types))


def _arithmetic(types, attrs):
    if any(t.dtype == "bool" for t in types):  # as in ONNX; numpy refuses some of them too
        fail("arithmetic needs numeric tensors, got bool (use the logical ops)")
    return _binary(types, attrs) if len(types) == 2 else types[0]


def _compare(types, attrs):
    return TensorType(_binary(types, attrs).shape, "bool")


def _logical(types, attrs):
    if any(t.dtype != "bool" for t in types):
        fail(f"inputs must be bool, got {', '.join(t.dtype for t in types)}")
    return TensorType(broadcast_shapes(*(t.shape for t in types)), "bool")


def _integer(types, attrs):
    if any(t.dtype == "bool" or t.dtype.startswith(("float", "bfloat")) for t in types):
        fail(f"bitwise ops need integer tensors, got {', '.join(t.dtype for t in types)} "
             "(on bool use the logical ops)")
    return _binary(types, attrs) if len(types) == 2 else types[0]


def _where(types, attrs):
    cond, x, y = types
    if cond.dtype != "bool":
        fail(f"condition must be bool, got {cond.dtype}")
    return TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), same_dtype([x, y]))


def _cast(types, attrs):
    return TensorType(types[0].shape, attrs["dtype"])


def binary(name, infer, doc, *, onnx=(), aten=(), tolerance=None):
    primitive(name, "a, b", infer, "broadcast", doc=doc, onnx=onnx, aten=aten,
              tolerance=tolerance)


def unary(name, doc, *, infer=float_unary_infer, onnx=(), aten=(), tolerance=None):
    primitive(name, "a", infer, "elemwise", doc=doc, onnx=onnx, aten=aten,
              tolerance=tolerance)


# --- arithmetic (numpy broadcasting; integers wrap, as in numpy) ----------------------------
binary("add", _arithmetic, "`a + b`", onnx="Add", aten="add", tolerance=ULPS)
binary("subtract", _arithmetic, "`a - b`", onnx="Sub", aten="sub", tolerance=ULPS)
binary("multiply", _arithmetic, "`a * b`", onnx="Mul", aten="mul", tolerance=EXACT)
binary("divide", _arithmetic, "`a / b`; integers truncate toward zero (C semantics)",
       onnx="Div", aten="div", tolerance=ULPS)
binary("power", _arithmetic, "`a ** b`, in the dtype of `a`", aten="pow",
       tolerance=1e-3)  # x ** y amplifies the error of x by |y|
binary("fmod", _arithmetic, "`a - trunc(a / b) * b`: the sign of `a` (C `fmod`, ONNX Mod "
       "with fmod=1, `torch.fmod`); an integer `fmod(a, 0)` is 0", aten="fmod",
       tolerance=EXACT)  # exact in any float format
binary("maximum", _binary, "elementwise maximum (on bool: or)", aten="maximum",
       tolerance=EXACT)
binary("minimum", _binary, "elementwise minimum (on bool: and)", aten="minimum",
       tolerance=EXACT)

# --- comparisons and logic (bool results) ---------------------------------------------------
binary("equal", _compare, "`a == b`", onnx="Equal", aten="eq", tolerance=EXACT)
binary("less", _compare, "`a < b`", onnx="Less", aten="lt", tolerance=EXACT)
binary("greater", _compare, "`a > b`", onnx="Greater", aten="gt", tolerance=EXACT)
binary("logical_and", _logical, "`a and b` on bool tensors", onnx="And",
       aten="logical_and", tolerance=EXACT)
binary("logical_or", _logical, "`a or b` on bool tensors", onnx="Or", aten="logical_or",
       tolerance=EXACT)
binary("bitwise_and", _integer, "`a & b` on integers", onnx="BitwiseAnd", aten="bitwise_and",
       tolerance=EXACT)
binary("bitwise_or", _integer, "`a | b` on integers", onnx="BitwiseOr", aten="bitwise_or",
       tolerance=EXACT)
binary("bitwise_xor", _integer, "`a ^ b` on integers", onnx="BitwiseXor", aten="bitwise_xor",
       tolerance=EXACT)
unary("bitwise_not", "`~a` on integers", infer=_integer, onnx="BitwiseNot",
      aten="bitwise_not", tolerance=EXACT)
unary("logical_not", "`not a` on a bool tensor", infer=_logical, onnx="Not",
      aten="logical_not", tolerance=EXACT)
primitive("where", "cond, x, y", _where, "broadcast", onnx="Where", aten="where",
          tolerance=EXACT, doc="`x` where `cond` else `y`; `cond` bool, all three broadcast")

# --- unary math -----------------------------------------------------------------------------
unary("negative", "`-a`", infer=_arithmetic, onnx="Neg", aten="neg", tolerance=EXACT)
unary("abs", "`|a|`", infer=unary_infer, onnx="Abs", aten="abs", tolerance=EXACT)
unary("exp", "`e ** a`", onnx="Exp", aten="exp", tolerance=ULPS)
unary("log", "natural logarithm", onnx="Log", aten="log", tolerance=ULPS)
unary("sqrt", "square root", onnx="Sqrt", aten="sqrt", tolerance=ULPS)
unary("rsqrt", "`1 / sqrt(a)`", aten="rsqrt", tolerance=ULPS)
unary("tanh", "hyperbolic tangent", onnx="Tanh", aten="tanh", tolerance=ULPS)
unary("sigmoid", "`1 / (1 + exp(-a))`", onnx="Sigmoid", aten="sigmoid", tolerance=ULPS)
unary("sin", "sine (radians)", onnx="Sin", aten="sin", tolerance=ULPS)
unary("cos", "cosine (radians)", onnx="Cos", aten="cos", tolerance=ULPS)
unary("asin", "inverse sine (NaN outside [-1, 1])", onnx="Asin", aten="asin", tolerance=ULPS)
unary("acos", "inverse cosine (NaN outside [-1, 1])", onnx="Acos", aten="acos", tolerance=ULPS)
unary("atan", "inverse tangent", onnx="Atan", aten="atan", tolerance=ULPS)
unary("erf", "the error function", onnx="Erf", aten="erf",
      tolerance=3e-4)  # backends use polynomial approximations of erf
unary("round", "round half to even (numpy `rint`)", onnx="Round", aten="round",
      tolerance=EXACT)
unary("floor", "largest integer not above `a`", onnx="Floor", aten="floor", tolerance=EXACT)
unary("ceil", "smallest integer not below `a`", onnx="Ceil", aten="ceil", tolerance=EXACT)

primitive("cast", "data", _cast, "elemwise", {"dtype": ("dtype", "float32")}, tolerance=EXACT,
          doc="`astype`; float to int truncates toward zero and saturates (NaN gives 0); "
              "to bool is `!= 0`; int to int wraps")
