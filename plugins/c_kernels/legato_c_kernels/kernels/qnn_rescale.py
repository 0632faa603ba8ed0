"""Quantized kernels that rescale one value at a time (csrc/qrescale.c): qnn.multiply
(com.microsoft QLinearMul: the int32 product after the zero points, times the float32
multiplier `a_scale * b_scale / out_scale` in that order, rounded half to even, the output
zero point, saturation) with numpy broadcasting, and qnn.softmax (com.microsoft
QLinearSoftmax) over the last axis.

The float32 constants are computed here with numpy as the reference kernels compute them:
the multiplier, and the softmax's 256-entry table `exp((i - 255 + shift / scale) * scale)`
in float64 rounded to float32 once (made again only when the data scale changes) and
`floor(1 / out_scale)`. Scales and zero points are read on every run.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import Array, Unbindable, check_status, error, num_threads
from .qnn import F32, QTYPES, _cptr, _out, _quantized, _run, _values, qbound
from .qnn_elementwise import extent, rows_view


def _one(x: Array) -> np.float32:
    return F32.type(x.reshape(-1)[0])


def _same_dtype(op: str, *named: tuple) -> None:
    dtypes = {str(x.dtype) for _, x in named}
    if len(dtypes) != 1:
        raise error(op, "operands and out_zero_point must share one dtype, got " +
                    ", ".join(f"{name} {x.dtype}" for name, x in named))


# --- qnn.multiply ----------------------------------------------------------------------------

class _QMulCall:
    """One lgk_qmul call, its multiplier and zero points read before each run."""

    def __init__(self, operands: tuple, scales: tuple, zeros: tuple, out: Array, rows: int,
                 span: int):
        self.operands, self.scales, self.zeros, self.out = operands, scales, zeros, out
        (a, a_rs, a_cs), (b, b_rs, b_cs) = operands
        self.head = (QTYPES[out.dtype], rows, span, _cptr(a), extent(a, a_rs, a_cs), a_rs,
                     a_cs)
        self.b = (_cptr(b), extent(b, b_rs, b_cs), b_rs, b_cs)
        self.tail = (_cptr(out), out.size)

    def run(self) -> None:
        a_s, b_s, y_s = (_one(s) for s in self.scales)
        za, zb, zy = (int(z.reshape(-1)[0]) for z in self.zeros)
        with np.errstate(all="ignore"):  # a zero out_scale is refused just below
            multiplier = a_s * b_s / y_s  # float32, in this order
        if not np.isfinite(multiplier):
            raise error("qnn.multiply", f"the multiplier a_scale * b_scale / out_scale is "
                        f"{multiplier} (scales {a_s}, {b_s}, {y_s})")
        status = lib.lgk_qmul(*self.head, za, *self.b, zb, float(multiplier), zy, *self.tail,
                              num_threads())
        if status:
            check_status("qnn.multiply", status)


def _plan_qmul(a: Array, a_scale: Any, a_zero_point: Any, b: Array, b_scale: Any,
               b_zero_point: Any, out_scale: Any, out_zero_point: Any, *,
               out: Optional[Array] = None, strict: bool = False):
    op = "qnn.multiply"
    a, b = _quantized(op, "a", a), _quantized(op, "b", b)
    zeros = tuple(_values(op, name, z, None) for name, z in (
        ("a_zero_point", a_zero_point), ("b_zero_point", b_zero_point),
        ("out_zero_point", out_zero_point)))
    _same_dtype(op, ("a", a), ("b", b), ("out_zero_point", zeros[2]))
    scales = tuple(_values(op, name, s, None, "float32") for name, s in (
        ("a_scale", a_scale), ("b_scale", b_scale), ("out_scale", out_scale)))
    try:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise error(op, f"shapes {a.shape} and {b.shape} do not broadcast") from None
    out = _out(op, out, shape, a.dtype)
    if out.size == 0:
        return out, None
    span = shape[-1] if shape else 1
    operands = (rows_view(a, shape, out, strict), rows_view(b, shape, out, strict))
    return out, _QMulCall(operands, scales, zeros, out, out.size // span, span)


def qnn_multiply(a: Array, a_scale: Any, a_zero_point: Any, b: Array, b_scale: Any,
                 b_zero_point: Any, out_scale: Any, out_zero_point: Any, *,
                 out: Optional[Array] = None) -> Array:
    """qnn.multiply (com.microsoft QLinearMul): per-tensor int8/uint8 operands of one dtype,
    numpy broadcasting; the result has their dtype."""
    return _run(*_plan_qmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                            out_zero_point, out=out))


qbound(qnn_multiply, _plan_qmul)


# --- qnn.softmax -----------------------------------------------------------------------------

FLOAT32_MAX = float(np.finfo(np.float32).max)


def softmax_table(data_scale: np.float32, count: int) -> Array:
    """The exponentials of the 256 differences from a row's maximum, as the reference."""
    shift = max(0.0, np.log(FLOAT32_MAX / max(count, 1)) - 5)
    scale = np.float64(data_scale)
    return np.exp((np.arange(256, dtype=np.float64) - 255 + shift / scale) * scale) \
        .astype(np.float32)


class _QSoftmaxCall:
    """One lgk_qsoftmax call; the table is made again when the data scale changes."""

    def __init__(self, x: Array, scales: tuple, out_zero: Array, out: Array, count: int):
        self.x, self.scales, self.out_zero, self.out, self.count = x, scales, out_zero, out, count
        self.key: Optional[np.float32] = None
        self.table = np.empty(256, F32)
        self.head = (QTYPES[out.dtype], out.size // count, count, _cptr(x), x.size,
                     ffi.cast("float *", self.table.ctypes.data))
        self.tail = (_cptr(out), out.size)

    def run(self) -> None:
        x_s, y_s = (_one(s) for s in self.scales)
        if self.key is None or x_s != self.key or np.isnan(x_s):
            self.table[:] = softmax_table(x_s, self.count)
            self.key = x_s
        quotient = np.floor(np.float32(1.0) / y_s)
        status = lib.lgk_qsoftmax(*self.head, float(quotient), int(self.out_zero.reshape(-1)[0]),
                                  *self.tail, num_threads())
        if status:
            check_status("qnn.softmax", status)


def _last_axis(shape: tuple, axis: int) -> bool:
    return len(shape) == 0 or int(axis) % len(shape) == len(shape) - 1


def qsoftmax_check(call) -> Optional[str]:
    """Legality of a qnn.softmax here: None, or why not (the C kernel reduces the last
    axis only, in the reference's order; another axis is decomposed)."""
    if not _last_axis(call.inputs[0].shape, call.attrs.get("axis", -1)):
        return f"axis {call.attrs.get('axis')} is not the last (the C kernel's only axis)"
    return None


def _plan_qsoftmax(data: Array, data_scale: Any, data_zero_point: Any, out_scale: Any,
                   out_zero_point: Any, *, axis: int = -1, out: Optional[Array] = None,
                   strict: bool = False):
    op = "qnn.softmax"
    x = _quantized(op, "data", data)
    _values(op, "data_zero_point", data_zero_point, None, str(x.dtype))
    yz = _values(op, "out_zero_point", out_zero_point, None)
    _same_dtype(op, ("data", x), ("out_zero_point", yz))
    scales = tuple(_values(op, name, s, None, "float32") for name, s in (
        ("data_scale", data_scale), ("out_scale", out_scale)))
    if not _last_axis(x.shape, axis):
        raise error(op, f"axis {axis} of {list(x.shape)}: the kernel reduces the last axis")
    out = _out(op, out, x.shape, x.dtype)
    if out.size == 0:
        return out, None
    x, rs, cs = rows_view(x, x.shape, out, strict)  # rows read whole before any write
    if (rs, cs) != (x.shape[-1], 1):  # an input broadcast in itself: stride-0 dims
        if strict:
            raise Unbindable
        x = np.ascontiguousarray(x)
    return out, _QSoftmaxCall(x, scales, yz, out, x.shape[-1])


def qnn_softmax(data: Array, data_scale: Any, data_zero_point: Any, out_scale: Any,
                out_zero_point: Any, *, axis: int = -1, out: Optional[Array] = None) -> Array:
    """qnn.softmax (com.microsoft QLinearSoftmax) of per-tensor int8/uint8 data over the
    last axis; the result has the data's dtype."""
    return _run(*_plan_qsoftmax(data, data_scale, data_zero_point, out_scale, out_zero_point,
                                axis=axis, out=out))


qbound(qnn_softmax, _plan_qsoftmax)

KERNELS = {"qnn.multiply": qnn_multiply, "qnn.softmax": qnn_softmax}
