"""Quantized elementwise kernels (csrc/qelementwise.c): qnn.add as onnxruntime's
com.microsoft QLinearAdd computes it (MLAS: `a * ratio_a + (b * ratio_b + fixed)`, each
multiply-add fused, rounded half to even, saturated), per-tensor int8/uint8 operands with
numpy broadcasting; qnn.quantize and qnn.dequantize (ONNX QuantizeLinear, DequantizeLinear)
of float32 data, per tensor or per axis.

The float32 constants are computed here with numpy, each step rounded as onnxruntime
rounds it (`ratio = scale / out_scale`, `fixed = out_zp - (ratio_a * a_zp + ratio_b *
b_zp)`); an operand that is one value per run of the innermost dim (a per-channel
residual, a scalar) is folded into a per-row addend `fixed + a * ratio_a` first, as MLAS
does. Scales and zero points are read on every run, as for the other qnn kernels.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import Array, Unbindable, check_status, error, num_threads
from .qnn import QTYPES, F32, _buffer, _cptr, _detached, _out, _quantized, _run, _values, qbound

OP = "qnn.add"


def _one_per_span(shape: tuple, out: tuple) -> bool:
    """Whether onnxruntime hands this operand to MLAS as one value per run of the
    innermost dim (one element, or broadcast along the last dim)."""
    return int(np.prod(shape)) == 1 or (len(out) > 0 and out[-1] > 1 and
                                        (len(shape) == 0 or shape[-1] == 1))


class _QAddCall:
    """One lgk_qadd_strided call; its ratios and addends are recomputed from the scale and
    zero-point arrays before each run."""

    def __init__(self, full: tuple, full_scale: Array, other,
                 other_scale: Array, other_zero: Array, full_zero: Array, y_scale: Array,
                 y_zero: Array, out: Array, rows: int, span: int, per_row: bool):
        # `full`: (array, row stride) of an operand of every output column; `other`: the
        # second operand, the same (per_row False) or a function giving one value per row
        # at run time (per_row True)
        self.full, self.other, self.out, self.per_row = full, other, out, per_row
        self.scales = (full_scale, other_scale, y_scale)
        self.zeros = (full_zero, other_zero, y_zero)
        self.addend = np.empty(rows if per_row else 1, F32)
        # the C arguments around the ratios, made once (the buffers are fixed)
        b, b_len, b_rs = full
        a, a_len, a_rs = (ffi.NULL, 0, 0) if per_row else (_cptr(other[0]), *other[1:])
        self.head = (QTYPES[out.dtype], rows, span, a, a_len, a_rs)
        self.b = (_cptr(b), b_len, b_rs)
        self.tail = (ffi.cast("float *", self.addend.ctypes.data), self.addend.size,
                     _cptr(out), out.size)

    def run(self) -> None:
        full_s, other_s, y_s = (F32.type(s.reshape(-1)[0]) for s in self.scales)
        full_z, other_z, y_z = (F32.type(z.reshape(-1)[0]) for z in self.zeros)
        ratio_f, ratio_o = full_s / y_s, other_s / y_s
        fixed = y_z - (ratio_f * full_z + ratio_o * other_z)  # float32 sums commute
        if self.per_row:  # `other` is read now: a bound input's buffer changes per run
            np.add(fixed, self.other().astype(F32) * ratio_o, out=self.addend)
            ratio_a = 0.0
        else:
            self.addend[0] = fixed
            ratio_a = float(ratio_o)
        status = lib.lgk_qadd_strided(*self.head, ratio_a, *self.b, float(ratio_f), *self.tail,
                                      num_threads())
        if status:
            check_status(OP, status)


def rows_view(x: Array, shape: tuple, out: Array, strict: bool) -> tuple:
    """`x` broadcast to `shape` as (array, row stride, column stride) over rows of
    shape[-1] elements, strides in elements: (x, span, 1) for a dense operand, row stride 0
    for one row read for every row, column stride 0 for one value per row. An operand that
    does not fold so, or overlaps `out` other than as `out` itself, is copied (in strict
    mode: Unbindable)."""
    span = shape[-1] if shape else 1
    view = np.broadcast_to(x, shape)
    try:
        view = np.reshape(view, (-1, span), copy=False) if span else None
    except ValueError:
        view = None
    if view is not None and x.flags.aligned and min(view.strides) >= 0 \
            and view.strides[1] in (0, x.itemsize) and view.strides[0] % x.itemsize == 0:
        rs, cs = (s // x.itemsize for s in view.strides)
        in_place = view.ctypes.data == out.ctypes.data and rs == span and cs == 1
        if in_place or not np.may_share_memory(x, out):
            return view, rs, cs
    if strict:
        raise Unbindable
    return np.ascontiguousarray(np.broadcast_to(x, shape)).reshape(-1, max(span, 1)), span, 1


def extent(view: Array, rs: int, cs: int) -> int:
    """Elements of the operand a (rows, span) view with these strides reaches."""
    rows, span = view.shape
    return 0 if view.size == 0 else (rows - 1) * rs + (span - 1) * cs + 1


def _plan_qadd(a: Array, a_scale: Any, a_zero_point: Any, b: Array, b_scale: Any,
               b_zero_point: Any, out_scale: Any, out_zero_point: Any, *,
               out: Optional[Array] = None, strict: bool = False):
    a, b = _quantized(OP, "a", a), _quantized(OP, "b", b)
    az = _values(OP, "a_zero_point", a_zero_point, None, str(a.dtype))
    bz = _values(OP, "b_zero_point", b_zero_point, None, str(b.dtype))
    yz = _values(OP, "out_zero_point", out_zero_point, None, str(a.dtype))
    scales = [_values(OP, name, s, None, "float32") for name, s in
              (("a_scale", a_scale), ("b_scale", b_scale), ("out_scale", out_scale))]
    if b.dtype != a.dtype:
        raise error(OP, f"a ({a.dtype}) and b ({b.dtype}) must share one dtype")
    try:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise error(OP, f"shapes {a.shape} and {b.shape} do not broadcast") from None
    out = _out(OP, out, shape, a.dtype)
    if out.size == 0:
        return out, None
    span = shape[-1] if shape else 1
    rows = out.size // span

    def full(x: Array) -> tuple:
        """(array, elements reached, row stride): dense rows, or one row for all."""
        view, rs, cs = rows_view(x, shape, out, strict)
        if cs != 1 or rs not in (0, span):
            if strict:
                raise Unbindable
            view, rs = np.ascontiguousarray(np.broadcast_to(x, shape)).reshape(-1, span), span
        return view, extent(view, rs, 1), rs

    def per_row(x: Array):
        """One value per row, read at each run (x may be a bound input's buffer)."""
        return lambda: np.broadcast_to(x, shape)[..., :1].reshape(-1) if shape \
            else x.reshape(-1)
    (as_, bs, ys) = scales
    if _one_per_span(a.shape, shape):
        return out, _QAddCall(full(b), bs, per_row(a), as_, az, bz, ys, yz, out, rows, span,
                              True)
    if _one_per_span(b.shape, shape):
        return out, _QAddCall(full(a), as_, per_row(b), bs, bz, az, ys, yz, out, rows, span,
                              True)
    return out, _QAddCall(full(b), bs, full(a), as_, az, bz, ys, yz, out, rows, span,
                          False)


def qnn_add(a: Array, a_scale: Any, a_zero_point: Any, b: Array, b_scale: Any,
            b_zero_point: Any, out_scale: Any, out_zero_point: Any, *,
            out: Optional[Array] = None) -> Array:
    """qnn.add (com.microsoft QLinearAdd): per-tensor int8/uint8 operands of one dtype,
    numpy broadcasting; the result has their dtype."""
    return _run(*_plan_qadd(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                            out_zero_point, out=out))


qbound(qnn_add, _plan_qadd)


# --- qnn.quantize / qnn.dequantize ---------------------------------------------------------

class _ConvertCall:
    """One lgk_quantize / lgk_dequantize call, its scales and zero points read per run."""

    def __init__(self, op: str, fn: Any, type_: int, dims: tuple, x: Array, scale: Array,
                 zero: Array, out: Array):
        self.op, self.fn, self.type, self.dims = op, fn, type_, dims
        self.x, self.scale_src, self.zero_src, self.out = x, scale, zero, out
        self.scale = np.empty(scale.size, F32)
        self.zero = np.empty(zero.size, np.int32)
        out_type = "float *" if out.dtype == F32 else "void *"
        self.args = (type_, *dims, _cptr(x), x.size, ffi.cast("float *", self.scale.ctypes.data),
                     ffi.cast("int32_t *", self.zero.ctypes.data), self.scale.size,
                     ffi.cast(out_type, out.ctypes.data), out.size)

    def run(self) -> None:
        self.scale[:] = self.scale_src
        self.zero[:] = self.zero_src
        status = self.fn(*self.args, num_threads())
        if status:
            check_status(self.op, status)


def _plan_convert(op: str, x: Array, scale: Any, zero_point: Any, axis: int, out_dtype,
                  out: Optional[Array], strict: bool):
    scale = _values(op, "scale", scale, None if np.size(scale) == 1 else x.shape[axis]
                    if -x.ndim <= axis < x.ndim else None, "float32")
    zero = np.asarray(zero_point)
    if zero.size != scale.size:
        raise error(op, f"scale ({scale.size} values) and zero_point ({zero.size}) differ")
    out = _out(op, out, x.shape, np.dtype(out_dtype))
    if out.size == 0:
        return out, None
    if scale.size == 1:
        span = x.shape[-1] if x.ndim else 1
        dims = (x.size // span, 1, span)
    else:
        axis = axis % x.ndim
        dims = (int(np.prod(x.shape[:axis])), x.shape[axis], int(np.prod(x.shape[axis + 1:])))
    x = _buffer(_detached(x, out, strict), strict)
    return out, (dims, x, scale, zero.reshape(-1), out)


def _plan_quantize(data: Array, scale: Any, zero_point: Any, *, axis: int = 1,
                   dtype: str = "int8", out: Optional[Array] = None, strict: bool = False):
    op = "qnn.quantize"
    x = _quantized(op, "data", data, ("float32",))
    _quantized(op, "zero_point", np.asarray(zero_point), (dtype,))
    out, plan = _plan_convert(op, x, scale, zero_point, axis, dtype, out, strict)
    if plan is None:
        return out, None
    return out, _ConvertCall(op, lib.lgk_quantize, QTYPES[np.dtype(dtype)], *plan)


def _plan_dequantize(data: Array, scale: Any, zero_point: Any, *, axis: int = 1,
                     out: Optional[Array] = None, strict: bool = False):
    op = "qnn.dequantize"
    x = _quantized(op, "data", data)
    _quantized(op, "zero_point", np.asarray(zero_point), (str(x.dtype),))
    out, plan = _plan_convert(op, x, scale, zero_point, axis, F32, out, strict)
    if plan is None:
        return out, None
    return out, _ConvertCall(op, lib.lgk_dequantize, QTYPES[x.dtype], *plan)


def qnn_quantize(data: Array, scale: Any, zero_point: Any, *, axis: int = 1,
                 dtype: str = "int8", out: Optional[Array] = None) -> Array:
    """qnn.quantize (ONNX QuantizeLinear) of float32 data: scale and zero point one value
    or one per index of `axis`; the result is int8 or uint8 (`dtype`)."""
    return _run(*_plan_quantize(data, scale, zero_point, axis=axis, dtype=dtype, out=out))


def qnn_dequantize(data: Array, scale: Any, zero_point: Any, *, axis: int = 1,
                   out: Optional[Array] = None) -> Array:
    """qnn.dequantize (ONNX DequantizeLinear) of int8/uint8 data to float32."""
    return _run(*_plan_dequantize(data, scale, zero_point, axis=axis, out=out))


qbound(qnn_quantize, _plan_quantize)
qbound(qnn_dequantize, _plan_dequantize)

KERNELS = {"qnn.add": qnn_add, "qnn.quantize": qnn_quantize, "qnn.dequantize": qnn_dequantize}
