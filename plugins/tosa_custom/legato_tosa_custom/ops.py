"""Ops with TOSA semantics that legato's level-0 set does not express.

The lowering rules (rules.py) produce them; they are level 0 with their own type
inference, and only this backend declares them legal.
"""
from __future__ import annotations

from legato.ir import TensorType
from legato.ops.base import fail, float_unary_infer, is_float
from legato.shapes import broadcast_shapes

INDEX_DTYPE = "int32"


def _gather(types, attrs):
    """TOSA GATHER: values [N, K, C], indices [N, W] (int32) -> [N, W, C]."""
    values, indices = types
    if values.rank != 3 or indices.rank != 2 or indices.dtype != INDEX_DTYPE:
        fail(f"values must be 3-D and indices 2-D {INDEX_DTYPE}, got {values} and {indices}")
    if values.shape[0] != indices.shape[0]:
        fail(f"values {list(values.shape)} and indices {list(indices.shape)} differ in N")
    return TensorType((values.shape[0], indices.shape[1], values.shape[2]), values.dtype)


def _pow(types, attrs):
    a, b = types
    if a.dtype != b.dtype or not is_float(a.dtype):
        fail(f"operands must be floats of one type, got {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)


def _cast(types, attrs):
    return TensorType(types[0].shape, attrs["dtype"])


def register_all(register):
    # 1/x: TOSA has no float divide; legato's divide becomes multiply by this
    register("tosa.reciprocal", "a", float_unary_infer, "elemwise")
    register("tosa.gather", "values, indices", _gather, "injective")
    # TOSA POW: defined for a finite base > 0 (or 0 to a positive power) and a finite exponent
    register("tosa.pow", "a, b", _pow, "broadcast")
    # TOSA CAST: float to int rounds to nearest (legato's cast truncates toward zero)
    register("tosa.cast", "data", _cast, "elemwise", attrs={"dtype": ("dtype", "int32")})
