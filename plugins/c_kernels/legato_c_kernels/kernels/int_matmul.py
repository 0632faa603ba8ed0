"""matmul of int32 operands on the int8 GEMM (csrc/qgemm.c) where their values allow it.

Integer programs multiply int32 values that came from int8/uint8 tensors (ONNX
MatMulInteger and the integer decompositions of the qnn ops: `cast(x) - zero_point`).
When every row of A and every column of B spans at most 256 consecutive values, each is
a byte tensor minus a zero point of its own (per row of A, per column of B), and the int8
GEMM computes exactly sum_k (A8 - za)(B8 - zb) in int32 arithmetic modulo 2^32: the
same integers numpy's int32 matmul gives, wrap-around included. The ranges are looked at
on every call (an int32 input may hold anything); operands that do not fit go to numpy's
integer matmul, with the same result. A constant B is converted and packed once
(:func:`pack_int_weight`).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._lib import lib
from .common import Array, error
from .qnn import PackedQWeight, _Params, _buffer, _out, gemm_call

I32 = np.dtype(np.int32)
# (qtype, dtype, lowest, highest) of the byte forms, uint8 tried first
_FORMS = ((lib.LGK_QTYPE_UINT8, np.uint8, 0, 255), (lib.LGK_QTYPE_INT8, np.int8, -128, 127))


def byte_form(x: Array, axis: int) -> Optional[tuple[Array, int, Array]]:
    """(bytes, qtype, zero points) with x == bytes - zero_point, the zero points one per
    line along `axis` (axis 1: per row, 0: per column) inside the byte type's range; None
    when some line spans more than 256 values."""
    if x.size == 0:
        return None
    lo, hi = x.min(axis=axis).astype(np.int64), x.max(axis=axis).astype(np.int64)
    for qtype, dtype, low, high in _FORMS:
        zero = np.clip(low - lo, low, high)  # the smallest shift that lifts lo to the range
        if np.all(lo + zero >= low) and np.all(hi + zero <= high):
            shift = np.expand_dims(zero, axis).astype(I32)
            return (x + shift).astype(dtype), qtype, zero.astype(I32)
    return None


class PackedIntWeight:
    """A constant int32 right operand (K, N) whose columns fit bytes: packed once for the
    int8 GEMM with its per-column zero points. ``source`` keeps the int32 array."""

    __slots__ = ("source", "bytes", "qtype", "zero")

    def __init__(self, source: Array, form: tuple[Array, int, Array]):
        self.source = source
        data, self.qtype, self.zero = form
        self.bytes = PackedQWeight(data, left=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.source.shape


def pack_int_weight(weight: Array) -> Optional[PackedIntWeight]:
    """A constant 2-D int32 matmul weight packed for the int8 GEMM, or None when its
    values do not fit bytes column by column."""
    if weight.ndim != 2 or weight.dtype != I32:
        return None
    form = byte_form(weight, 0)
    return None if form is None else PackedIntWeight(weight, form)


def _int_call(op: str, rows: Array, b: Any, out2: Array, bias: Optional[Array]):
    """The int8 GEMM call of rows (M, K) @ b into out2 (M, N), or None (values too wide)."""
    a_form = byte_form(rows, 1)
    if a_form is None:
        return None
    if isinstance(b, PackedIntWeight):
        right, b_type, zb = b.bytes, b.qtype, b.zero
    else:
        b_form = byte_form(b, 0)
        if b_form is None:
            return None
        right, b_type, zb = b_form
    a8, a_type, za = a_form
    params = _Params((a_type, za), (b_type, zb), None, False, bias)
    return gemm_call(op, a8, right, out2, params)


def _result_shape(op: str, a: tuple, b: tuple) -> tuple:
    """numpy.matmul's result shape (1-D operands promoted, batch dims broadcast)."""
    if not a or not b:
        raise error(op, "matmul operands must have at least one dimension")
    a2, b2 = (1,) + a if len(a) == 1 else a, b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise error(op, f"inner dimensions differ: {a} @ {b}")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise error(op, f"batch dims of {a} and {b} do not broadcast") from None
    return batch + (a2[-2:-1] if len(a) > 1 else ()) + (b2[-1:] if len(b) > 1 else ())


def int_matmul(a: Array, b: Any, *, bias: Optional[Array] = None, activation: str = "none",
               out: Optional[Array] = None, op: str = "matmul") -> Array:
    """numpy.matmul of int32 operands (b may be a PackedIntWeight), plus an int32 bias
    along the last axis; on the int8 GEMM where the values fit bytes, else numpy."""
    if activation != "none":
        raise error(op, f"activation {activation!r} is not applied to int32 products")
    if not isinstance(a, np.ndarray) or a.dtype != I32:
        raise error(op, f"a must be an int32 ndarray, got {getattr(a, 'dtype', type(a))}")
    source = b.source if isinstance(b, PackedIntWeight) else b
    if not isinstance(source, np.ndarray) or source.dtype != I32:
        raise error(op, f"b must be an int32 ndarray like a, got {getattr(source, 'dtype', None)}")
    shape = _result_shape(op, a.shape, source.shape)
    if bias is not None and (bias.dtype != I32 or bias.shape != shape[-1:]):
        raise error(op, f"bias must be int32 of shape {shape[-1:]}, got {bias.dtype}{bias.shape}")
    out = _out(op, out, shape, I32)
    call = None
    if source.ndim == 2 and a.ndim >= 1 and out.size:
        k = a.shape[-1]
        rows = np.ascontiguousarray(a).reshape(-1, k)
        call = _int_call(op, rows, b if isinstance(b, PackedIntWeight) else source,
                         out.reshape(-1, source.shape[1]),
                         None if bias is None else _buffer(bias, False))
    if call is not None:
        call.run()
        return out
    np.matmul(a, source, out=out)  # numpy's int32 matmul: the same wrapping sums
    if bias is not None:
        out += bias
    return out


__all__ = ["PackedIntWeight", "byte_form", "int_matmul", "pack_int_weight"]
