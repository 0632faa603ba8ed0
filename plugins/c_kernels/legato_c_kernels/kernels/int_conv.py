"""nn.conv2d of int32 operands on the int8 conv kernel (csrc/qconv.c) where their values
allow it.

ONNX ConvInteger (onnxruntime's quantize_dynamic on a CNN) imports as an int32 conv of
`cast(x) - zero_point` and a constant weight with its zero point subtracted. When the
whole data tensor spans at most 256 consecutive values and each filter of the weight
does too, they are bytes minus a zero point (one for the data, one per filter), and the
int8 conv computes exactly sum (x8 - zx)(w8 - zw) in int32, its padding reading as the
data's zero point, i.e. as 0: the integers of an int32 convolution. The data's range is
looked at on every call; data or weights that do not fit go to a numpy convolution
(int32 sums, wrapping as numpy's do). A constant weight is converted once
(:func:`pack_int_conv_weight`).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .._lib import ffi, lib
from .common import Array, error
from .conv_pool import _geometry, _require_layout, _spatial
from .int_matmul import I32, byte_form
from .qnn import _Params, _QCall, _buffer, _cptr, _out


class PackedIntConvWeight:
    """A constant int32 OIHW weight whose filters fit bytes: (bytes, qtype, zero points
    per filter). ``source`` keeps the int32 array."""

    __slots__ = ("source", "bytes", "qtype", "zero")

    def __init__(self, source: Array, form: tuple[Array, int, Array]):
        self.source = source
        self.bytes, self.qtype, self.zero = form

    @property
    def shape(self) -> tuple[int, ...]:
        return self.source.shape


def _filter_form(weight: Array) -> Optional[tuple[Array, int, Array]]:
    """(OIHW bytes, qtype, zero point per filter) of an int32 weight, or None."""
    form = byte_form(weight.reshape(weight.shape[0], -1), 1) if weight.size else None
    return None if form is None else (form[0].reshape(weight.shape), *form[1:])


def pack_int_conv_weight(weight: Array, **_attrs: Any) -> Optional[PackedIntConvWeight]:
    """A constant int32 OIHW weight converted to bytes once, or None when some filter
    spans more than 256 values."""
    form = _filter_form(weight) if weight.ndim == 4 else None
    return None if form is None else PackedIntConvWeight(weight, form)


def _numpy_conv(x: Array, w: Array, out: Array, strides, padding, dilation, groups: int):
    """The int32 convolution in numpy, one tap at a time (sums wrap as int32's)."""
    (top, left, bottom, right), (sh, sw), (dh, dw) = padding, strides, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    (n, c), (o, per, kh, kw), (oh, ow) = x.shape[:2], w.shape, out.shape[2:]
    out[...] = 0
    view = out.reshape(n, groups, o // groups, oh, ow)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                       j * dw:j * dw + sw * (ow - 1) + 1:sw].reshape(n, groups, per, oh, ow)
            taps = w[:, :, i, j].reshape(groups, o // groups, per)
            view += np.einsum("ngchw,goc->ngohw", patch, taps, dtype=np.int32)


def int_conv2d(data: Array, weight: Any, bias: Optional[Array] = None, *,
               strides: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0, 0, 0),
               dilation: Sequence[int] = (1, 1), groups: int = 1, data_layout: str = "NCHW",
               kernel_layout: str = "OIHW", out: Optional[Array] = None,
               activation: str = "none", residual: Optional[Array] = None) -> Array:
    """nn.conv2d of int32 NCHW data and an int32 OIHW weight (or a PackedIntConvWeight),
    plus an int32 bias; on the int8 conv where the values fit bytes, else numpy."""
    op = "nn.conv2d"
    _require_layout(op, "data_layout", data_layout, "NCHW")
    _require_layout(op, "kernel_layout", kernel_layout, "OIHW")
    if activation != "none" or residual is not None:
        raise error(op, "no activation or residual is applied to int32 products")
    packed = weight if isinstance(weight, PackedIntConvWeight) else None
    w = packed.source if packed is not None else weight
    for name, v in (("data", data), ("weight", w), ("bias", bias)):
        if v is not None and (not isinstance(v, np.ndarray) or v.dtype != I32):
            raise error(op, f"{name} must be an int32 ndarray, got {getattr(v, 'dtype', v)}")
    if data.ndim != 4 or w.ndim != 4 or data.shape[1] != w.shape[1] * groups or \
            groups < 1 or w.shape[0] % groups or bias is not None and bias.shape != w.shape[:1]:
        raise error(op, f"data {data.shape}, weight {w.shape}, groups {groups} and bias "
                    f"{None if bias is None else bias.shape} do not match")
    strides, padding, dilation = _spatial(op, strides, padding, dilation)
    p = ffi.new("lgk_conv2d_params *")
    p.o, p.groups, (p.kh, p.kw) = w.shape[0], int(groups), w.shape[2:]
    win = _geometry(op, lib.lgk_conv2d_out_shape, p, data.shape, list(w.shape[2:]), strides,
                    padding, dilation)
    out = _out(op, out, (data.shape[0], w.shape[0], *win.out), I32)
    if out.size == 0:
        return out
    x_form = byte_form(data.reshape(1, -1), 1) if data.size else None
    w_form = (packed.bytes, packed.qtype, packed.zero) if packed is not None else \
        _filter_form(w)
    if x_form is None or w_form is None:
        _numpy_conv(data, w, out, strides, padding, dilation, groups)
        if bias is not None:
            out += bias.reshape(-1, 1, 1)
        return out
    (x8, x_type, zx), (w8, w_type, zw) = x_form, w_form
    params = _Params((w_type, zw), (x_type, zx), None, True,
                     None if bias is None else _buffer(bias, False))
    x8, w8 = np.ascontiguousarray(x8.reshape(data.shape)), np.ascontiguousarray(w8)
    head = (p, _cptr(x8), x8.size, _cptr(w8), w8.size, _cptr(out), out.size)
    _QCall(op, lib.lgk_qconv2d_nchw, head, params, (x8, w8, out, p)).run()
    return out


__all__ = ["PackedIntConvWeight", "int_conv2d", "pack_int_conv_weight"]
