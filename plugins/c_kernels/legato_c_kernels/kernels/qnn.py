"""Quantized kernels on the int8 GEMM and conv (csrc/qgemm.c, csrc/qconv.c): qnn.conv2d,
qnn.linear and qnn.matmul with onnxruntime's arithmetic (int32 sums after the zero points,
the float32 multiplier `data_scale * weight_scale / out_scale` in that order, rounding
half to even, the output zero point, saturation), and integer matmul of int32 operands
whose values the int8 GEMM can hold.

Scales and zero points are read from their arrays on every run (they may be values a model
computes, e.g. a dynamically quantized activation's), so a prepared call refreshes the
C parameter block before each C call; the operand buffers are fixed at bind time as for
the float kernels. Constant weights are packed once (`pack_qweight`, `pack_qconv_weight`).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import Array, Unbindable, check_status, error, ints, num_threads, prod
from .conv_pool import _geometry, _require_layout, _spatial
from .gemm import _ALIGN

QTYPES = {np.dtype(np.uint8): lib.LGK_QTYPE_UINT8, np.dtype(np.int8): lib.LGK_QTYPE_INT8,
          np.dtype(np.int32): lib.LGK_QTYPE_INT32}
I32, F32 = np.dtype(np.int32), np.dtype(np.float32)


# --- operands and parameters ------------------------------------------------------------------

def _quantized(op: str, name: str, x: Any, dtypes=("int8", "uint8")) -> Array:
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray) or str(x.dtype) not in dtypes:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise error(op, f"{name} must be a {' or '.join(dtypes)} ndarray, got {got}")
    return x


def _values(op: str, name: str, x: Any, count: Optional[int], dtype: Optional[str] = None) -> Array:
    """A scale or zero point as a flat array of 1 (or `count`) values."""
    x = np.asarray(x)
    if dtype is not None and str(x.dtype) != dtype:
        raise error(op, f"{name} must have dtype {dtype}, got {x.dtype}")
    flat = x.reshape(-1)
    if flat.size != 1 and (count is None or flat.size != count or x.ndim != 1):
        want = "one value" + ("" if count is None else f" or {count}")
        raise error(op, f"{name} must hold {want}, got shape {list(x.shape)}")
    return flat


def _multiplier(a_scale: Array, w_scale: Array, y_scale: Array) -> Array:
    """float32(a_scale * w_scale) / y_scale, each step rounded to float32 (onnxruntime)."""
    return (a_scale.astype(F32) * w_scale.astype(F32)) / y_scale.astype(F32)


class _Params:
    """A C lgk_qparams block and the arrays it points into, refilled from the scale and
    zero-point arrays before every call."""

    def __init__(self, a: tuple, b: tuple, out_zero: Optional[Array], per_row: bool,
                 bias: Optional[Array], relu: bool = False):
        self.c = ffi.new("lgk_qparams *")
        (a_type, self.a_zp), (b_type, self.b_zp) = a, b
        self.za = np.empty(self.a_zp.size, I32)
        self.zb = np.empty(self.b_zp.size, I32)
        self.c.a_type, self.c.b_type, self.c.per_row = a_type, b_type, int(per_row)
        self.c.a_zero_point, self.c.a_zero_point_len = ffi.from_buffer("int32_t[]", self.za), self.za.size
        self.c.b_zero_point, self.c.b_zero_point_len = ffi.from_buffer("int32_t[]", self.zb), self.zb.size
        self.out_zero = out_zero
        self.c.out_type = lib.LGK_QTYPE_INT32 if out_zero is None else QTYPES[out_zero.dtype]
        self.c.relu = int(relu)
        self.bias = bias
        if bias is not None:
            self.c.bias, self.c.bias_len = ffi.cast("int32_t *", bias.ctypes.data), bias.size
        self.mult: Optional[Array] = None
        self.scales: tuple = ()

    def with_scales(self, a_scale: Array, w_scale: Array, y_scale: Array) -> "_Params":
        self.scales = (a_scale, w_scale, y_scale)
        self.mult = np.empty(max(a_scale.size, w_scale.size, y_scale.size), F32)
        self.c.multiplier = ffi.from_buffer("float[]", self.mult)
        self.c.multiplier_len = self.mult.size
        return self

    def refresh(self) -> Any:
        """The C block, with the zero points and multipliers read now."""
        self.za[:] = self.a_zp
        self.zb[:] = self.b_zp
        if self.out_zero is not None:
            self.c.out_zero_point = int(self.out_zero.reshape(-1)[0])
        if self.scales:
            self.mult[:] = _multiplier(*self.scales)
        return self.c


class _QCall:
    """One C call of a quantized kernel: `fn(*head, params, threads)` after the
    parameters are refreshed."""

    def __init__(self, op: str, fn: Any, head: tuple, params: _Params, keep: tuple):
        self.op, self.fn, self.head, self.params, self.keep = op, fn, head, params, keep

    def run(self) -> None:
        status = self.fn(*self.head, self.params.refresh(), num_threads())
        if status:
            check_status(self.op, status)


class _Calls(list):
    """Several C calls (one per batch matrix) run in order."""

    def run(self) -> None:
        for call in self:
            call.run()


def _buffer(x: Array, strict: bool) -> Array:
    """A C-contiguous array (copied where needed; never in strict mode)."""
    if x.flags.c_contiguous and x.flags.aligned:
        return x
    if strict:
        raise Unbindable
    return np.ascontiguousarray(x)


def _out(op: str, out: Optional[Array], shape: tuple, dtype: np.dtype) -> Array:
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape) or out.dtype != dtype:
        raise error(op, f"out must be a {dtype} array of shape {tuple(shape)}")
    if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise error(op, "out must be a writeable, aligned, C-contiguous array")
    return out


def _detached(x: Array, out: Array, strict: bool) -> Array:
    if np.may_share_memory(x, out):
        if strict:
            raise Unbindable
        return x.copy()
    return x


def _cptr(x: Array) -> Any:
    return ffi.cast("void *", x.ctypes.data)


def qbound(kernel: Callable, plan: Callable) -> Callable:
    """`kernel.bind` as for the float kernels: the planned call made on every run (its
    parameters re-read), or the whole kernel where the buffers need copies."""
    def bind(*inputs: Any, out: Array, **attrs: Any) -> Callable[[], None]:
        try:
            _, call = plan(*inputs, out=out, strict=True, **attrs)
        except Unbindable:
            return functools.partial(kernel, *inputs, out=out, **attrs)
        return (lambda: None) if call is None else call.run
    kernel.bind = bind
    return kernel


def _run(out: Array, call: Any) -> Array:
    if call is not None:
        call.run()
    return out


# --- packed weights -------------------------------------------------------------------------

def _aligned_bytes(n: int) -> Array:
    raw = np.empty(n + _ALIGN, np.uint8)
    skip = -raw.ctypes.data % _ALIGN
    return raw[skip:skip + n]


class PackedQWeight:
    """A constant int8/uint8 GEMM operand packed once for the int8 micro-kernels: as B
    (K, N) (`left=False`; an nn.linear weight (N, K) is read transposed) or as A (M, K)
    (`left=True`, conv filters). Packed again if another kernel family is selected
    (lgk_qgemm_force_isa); ``source`` is the (K, N) / (M, K) view it was packed from,
    ``shape`` the weight's own (a conv's OIHW)."""

    __slots__ = ("source", "left", "shape", "_packed")

    def __init__(self, source: Array, left: bool, shape: Optional[tuple] = None):
        self.source, self.left, self._packed = source, left, None
        self.shape = source.shape if shape is None else tuple(shape)

    @property
    def dtype(self) -> np.dtype:
        return self.source.dtype

    def data(self, op: str) -> Array:
        isa = lib.lgk_qgemm_isa()
        if self._packed is None or self._packed[0] != isa:
            rows, cols = self.source.shape
            size = (lib.lgk_qgemm_packed_a_size(rows, cols) if self.left
                    else lib.lgk_qgemm_packed_b_size(rows, cols))
            if size < 0:
                check_status(op, -size)
            data = _aligned_bytes(size)
            rs, cs = (s // self.source.itemsize for s in self.source.strides)
            pack = lib.lgk_qgemm_pack_a if self.left else lib.lgk_qgemm_pack_b
            extent = 1 + (rows - 1) * rs + (cols - 1) * cs if self.source.size else 0
            check_status(op, pack(rows, cols, QTYPES[self.source.dtype], _cptr(self.source),
                                  extent, rs, cs, _cptr(data), data.size))
            data.flags.writeable = False
            self._packed = (isa, data)
        return self._packed[1]

    def __repr__(self) -> str:
        return f"PackedQWeight(shape={self.shape}, dtype={self.dtype}, left={self.left})"


def pack_qweight(weight: Array, transposed: bool = True, **_attrs: Any) -> Optional[PackedQWeight]:
    """A constant 2-D int8/uint8 right operand packed once: an nn.linear weight
    (out, in) with `transposed`, a matmul's (K, N) without; None where it does not apply."""
    if not isinstance(weight, np.ndarray) or weight.dtype not in (np.int8, np.uint8) \
            or weight.ndim != 2:
        return None
    return PackedQWeight(weight.T if transposed else weight, left=False)


def pack_qconv_weight(weight: Array, groups: int = 1, kernel_layout: str = "OIHW",
                      **_attrs: Any) -> Optional[PackedQWeight]:
    """A constant OIHW int8/uint8 conv weight of a groups == 1 conv, packed as the GEMM's
    left operand (filters x taps); None where that does not apply."""
    if not isinstance(weight, np.ndarray) or weight.dtype not in (np.int8, np.uint8) \
            or weight.ndim != 4 or groups != 1 or kernel_layout != "OIHW" or weight.size == 0:
        return None
    flat = np.ascontiguousarray(weight).reshape(weight.shape[0], -1)
    return PackedQWeight(flat, left=True, shape=weight.shape)


# --- qnn.conv2d ------------------------------------------------------------------------------

def _plan_qconv2d(data: Array, data_scale: Any, data_zero_point: Any, weight: Any,
                  weight_scale: Any, weight_zero_point: Any, out_scale: Any,
                  out_zero_point: Any, bias: Optional[Array] = None, *,
                  strides: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0, 0, 0),
                  dilation: Sequence[int] = (1, 1), groups: int = 1, data_layout: str = "NCHW",
                  kernel_layout: str = "OIHW", out: Optional[Array] = None,
                  strict: bool = False, relu: bool = False):
    op = "qnn.conv2d"
    _require_layout(op, "data_layout", data_layout, "NCHW")
    _require_layout(op, "kernel_layout", kernel_layout, "OIHW")
    packed = weight if isinstance(weight, PackedQWeight) else None
    x = _quantized(op, "data", data)
    w_dtype = packed.dtype if packed is not None else _quantized(op, "weight", weight).dtype
    w_shape = packed.shape if packed is not None else weight.shape
    if packed is not None and groups != 1:
        raise error(op, f"a packed weight needs groups=1, got groups={groups}")
    strides, padding, dilation = _spatial(op, strides, padding, dilation)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise error(op, f"groups must be a positive int, got {groups!r}")
    if x.ndim != 4 or len(w_shape) != 4:
        raise error(op, f"expected 4-D data and weight, got {x.shape}, {w_shape}")
    n_out, kernel = w_shape[0], list(w_shape[2:])
    if x.shape[1] != w_shape[1] * groups or n_out % groups:
        raise error(op, f"channels do not match: data {x.shape}, weight {w_shape}, groups {groups}")
    xz = _values(op, "data_zero_point", data_zero_point, None, str(x.dtype))
    wz = _values(op, "weight_zero_point", weight_zero_point, n_out, str(w_dtype))
    yz = _values(op, "out_zero_point", out_zero_point, None)
    _quantized(op, "out_zero_point", yz)
    xs = _values(op, "data_scale", data_scale, None, "float32")
    ws = _values(op, "weight_scale", weight_scale, n_out, "float32")
    ys = _values(op, "out_scale", out_scale, None, "float32")
    if bias is not None:
        bias = _quantized(op, "bias", bias, ("int32",))
        if bias.shape != (n_out,):
            raise error(op, f"bias must have shape ({n_out},), got {bias.shape}")
    p = ffi.new("lgk_conv2d_params *")
    p.o, p.groups = n_out, int(groups)
    p.kh, p.kw = kernel
    win = _geometry(op, lib.lgk_conv2d_out_shape, p, x.shape, kernel, strides, padding,
                    dilation)
    out = _out(op, out, (x.shape[0], n_out, *win.out), yz.dtype)
    if out.size == 0:
        return out, None
    x = _buffer(_detached(x, out, strict), strict)
    params = _Params((QTYPES[np.dtype(w_dtype)], wz), (QTYPES[x.dtype], xz), yz, True,
                     None if bias is None else _buffer(bias, strict), relu).with_scales(xs, ws, ys)
    if packed is not None:
        w = packed.data(op)
        head = (p, _cptr(x), x.size, _cptr(w), w.size, _cptr(out), out.size)
        return out, _QCall(op, lib.lgk_qconv2d_nchw_packed, head, params, (x, w, out, p))
    w = _buffer(weight, strict)
    head = (p, _cptr(x), x.size, _cptr(w), w.size, _cptr(out), out.size)
    return out, _QCall(op, lib.lgk_qconv2d_nchw, head, params, (x, w, out, p))


def qnn_conv2d(data: Array, data_scale: Any, data_zero_point: Any, weight: Any,
               weight_scale: Any, weight_zero_point: Any, out_scale: Any, out_zero_point: Any,
               bias: Optional[Array] = None, *, out: Optional[Array] = None, **attrs: Any) -> Array:
    """qnn.conv2d (ONNX QLinearConv), NCHW data and OIHW weight (or a packed weight from
    :func:`pack_qconv_weight`); the result has out_zero_point's dtype."""
    return _run(*_plan_qconv2d(data, data_scale, data_zero_point, weight, weight_scale,
                               weight_zero_point, out_scale, out_zero_point, bias, out=out,
                               **attrs))


# --- qnn.matmul / qnn.linear ----------------------------------------------------------------

def _extent(x: Array) -> int:
    if x.size == 0:
        return 0
    return 1 + sum((d - 1) * (s // x.itemsize) for d, s in zip(x.shape, x.strides))


def _matrix(x: Array, strict: bool) -> Array:
    """A 2-D view with non-negative whole-element strides (copied otherwise)."""
    if x.flags.aligned and all(s >= 0 and s % x.itemsize == 0 for s in x.strides):
        return x
    return _buffer(x, strict)


def gemm_call(op: str, a: Array, b: Any, c: Array, params: _Params) -> _QCall:
    """One lgk_qgemm (or, b packed, lgk_qgemm_prepacked) call: c (M, N) = a (M, K) @ b."""
    (m, k), n = a.shape, c.shape[1]
    rsa, csa = (s // a.itemsize for s in a.strides)
    head = (m, n, k, _cptr(a), _extent(a), rsa, csa)
    if isinstance(b, PackedQWeight):
        w = b.data(op)
        return _QCall(op, lib.lgk_qgemm_prepacked, (*head, _cptr(w), w.size, _cptr(c), c.size,
                                                     n), params, (a, w, c))
    rsb, csb = (s // b.itemsize for s in b.strides)
    return _QCall(op, lib.lgk_qgemm, (*head, _cptr(b), _extent(b), rsb, csb, _cptr(c), c.size,
                                      n), params, (a, b, c))


def _plan_qproduct(op: str, a: Array, a_scale: Any, a_zero: Any, b: Any, b_scale: Any,
                   b_zero: Any, y_scale: Any, y_zero: Any, bias: Optional[Array], linear: bool,
                   out: Optional[Array], strict: bool):
    a = _quantized(op, "a" if not linear else "data", a)
    packed = b if isinstance(b, PackedQWeight) else None
    if packed is not None:
        if packed.left:
            raise error(op, f"a packed weight for {op} must come from pack_qweight")
        right = packed.source
    else:
        b = _quantized(op, "weight" if linear else "b", b)
        if linear and b.ndim != 2:
            raise error(op, f"expected weight (out, in), got {b.shape}")
        right = b.T if linear else b
    if a.ndim == 0 or right.ndim == 0:
        raise error(op, "operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    r2 = right[:, None] if right.ndim == 1 else right
    (m, k), (kb, n) = a2.shape[-2:], r2.shape[-2:]
    if k != kb:
        raise error(op, f"inner dimensions differ: {a.shape} and {right.shape}")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], r2.shape[:-2])) if r2.ndim > 2 else ()
    except ValueError:
        raise error(op, f"batch dims of {a.shape} and {right.shape} do not broadcast") from None
    rows = a2.shape[:-2] if r2.ndim == 2 else batch
    shape = rows + ((m,) if a.ndim > 1 else ()) + ((n,) if right.ndim > 1 else ())
    az = _values(op, "a_zero_point", a_zero, None, str(a.dtype))
    bz = _values(op, "b_zero_point", b_zero, n if right.ndim > 1 else None, str(right.dtype))
    yz = _quantized(op, "out_zero_point", _values(op, "out_zero_point", y_zero, None))
    scales = (_values(op, "a_scale", a_scale, None, "float32"),
              _values(op, "b_scale", b_scale, n if right.ndim > 1 else None, "float32"),
              _values(op, "out_scale", y_scale, None, "float32"))
    if bias is not None:
        bias = _quantized(op, "bias", bias, ("int32",))
        if bias.shape != (n,):
            raise error(op, f"bias must have shape ({n},), got {bias.shape}")
        bias = _buffer(bias, strict)
    out = _out(op, out, shape, yz.dtype)
    if out.size == 0:
        return out, None
    params = _Params((QTYPES[a.dtype], az), (QTYPES[right.dtype], bz), yz, False,
                     bias).with_scales(*scales)
    c2 = out.reshape(-1, n)
    if r2.ndim == 2:  # every batch dim of a folds into M
        a_rows = _buffer(_detached(a2, out, strict), strict).reshape(-1, k)
        return out, gemm_call(op, a_rows, packed if packed is not None else
                              _matrix(_detached(r2, out, strict), strict), c2, params)
    ab = np.broadcast_to(_detached(a2, out, strict), batch + (m, k))
    rb = np.broadcast_to(_detached(r2, out, strict), batch + (k, n))
    cb = out.reshape(batch + (m, n))
    call = batched_call(op, ab, rb, cb, params)
    if call is not None:
        return out, call
    return out, _Calls(gemm_call(op, _matrix(ab[i], strict), _matrix(rb[i], strict), cb[i],
                                 params) for i in np.ndindex(*batch))


def _stacked(x: Array) -> Optional[tuple]:
    """(pointer view, batch stride, row stride, column stride) in elements of a stack of
    matrices whose batch dims fold into one stride (None where they do not)."""
    try:
        flat = np.reshape(x, (-1,) + x.shape[-2:], copy=False)
    except ValueError:
        return None
    if not x.flags.aligned or any(s < 0 or s % x.itemsize for s in flat.strides):
        return None
    return (flat, *(s // x.itemsize for s in flat.strides))


def batched_call(op: str, a: Array, b: Array, c: Array, params: _Params) -> Optional[_QCall]:
    """One lgk_qgemm_batched call for c[i] = a[i] @ b[i] over the batch dims (a or b may be
    broadcast, stride 0), or None where a stack does not fold into one batch stride."""
    parts = [_stacked(x) for x in (a, b, c)]
    if any(part is None for part in parts):
        return None
    (fa, bsa, rsa, csa), (fb, bsb, rsb, csb), (fc, bsc, ldc, csc) = parts
    if csc != 1:
        return None
    (m, k), n = a.shape[-2:], c.shape[-1]
    head = (fa.shape[0], m, n, k, _cptr(fa), _extent(fa), bsa, rsa, csa, _cptr(fb),
            _extent(fb), bsb, rsb, csb, _cptr(fc), _extent(fc), bsc, ldc)
    return _QCall(op, lib.lgk_qgemm_batched, head, params, (a, b, c))


def _plan_qmatmul(a: Array, a_scale: Any, a_zero_point: Any, b: Any, b_scale: Any,
                  b_zero_point: Any, out_scale: Any, out_zero_point: Any, *,
                  out: Optional[Array] = None, strict: bool = False):
    return _plan_qproduct("qnn.matmul", a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                          out_scale, out_zero_point, None, False, out, strict)


def _plan_qlinear(data: Array, data_scale: Any, data_zero_point: Any, weight: Any,
                  weight_scale: Any, weight_zero_point: Any, out_scale: Any,
                  out_zero_point: Any, bias: Optional[Array] = None, *,
                  out: Optional[Array] = None, strict: bool = False):
    return _plan_qproduct("qnn.linear", data, data_scale, data_zero_point, weight,
                          weight_scale, weight_zero_point, out_scale, out_zero_point, bias,
                          True, out, strict)


def qnn_matmul(a: Array, a_scale: Any, a_zero_point: Any, b: Any, b_scale: Any,
               b_zero_point: Any, out_scale: Any, out_zero_point: Any, *,
               out: Optional[Array] = None) -> Array:
    """qnn.matmul (ONNX QLinearMatMul): numpy matmul broadcasting; b per tensor or per
    column; b may be a packed (K, N) weight (`pack_qweight(b, transposed=False)`)."""
    return _run(*_plan_qmatmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                               out_zero_point, out=out))


def qnn_linear(data: Array, data_scale: Any, data_zero_point: Any, weight: Any,
               weight_scale: Any, weight_zero_point: Any, out_scale: Any, out_zero_point: Any,
               bias: Optional[Array] = None, *, out: Optional[Array] = None) -> Array:
    """qnn.linear: data @ weight.T (+ int32 bias), weight (out, in) per tensor or per output
    channel, or packed by `pack_qweight(weight)`."""
    return _run(*_plan_qlinear(data, data_scale, data_zero_point, weight, weight_scale,
                               weight_zero_point, out_scale, out_zero_point, bias, out=out))


qbound(qnn_conv2d, _plan_qconv2d)
qbound(qnn_matmul, _plan_qmatmul)
qbound(qnn_linear, _plan_qlinear)
# constant weights packed once by the planner: (input index, transposed) and the packer
qnn_conv2d.packed_input, qnn_conv2d.pack = (3, False), pack_qconv_weight
qnn_linear.packed_input, qnn_linear.pack = (3, True), pack_qweight
qnn_matmul.packed_input = (3, False)
qnn_matmul.pack = functools.partial(pack_qweight, transposed=False)

KERNELS = {"qnn.conv2d": qnn_conv2d, "qnn.matmul": qnn_matmul, "qnn.linear": qnn_linear}
