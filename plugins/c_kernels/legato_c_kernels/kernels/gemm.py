"""GEMM kernels: matmul, nn.linear, their fused bias + activation variants, and
constant weights packed once for the micro-kernel (csrc/gemm.c)."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import (ITEM, OUT, Array, CCall, F32, Unbindable, bound, broadcast_shape, check_status,
                     dense, detach, error, estrides, extent, f32, num_threads, opt_f32,
                     opt_ptr, out_array, prod, ptr, run_call, strided)


def _activation_names() -> dict[str, int]:
    """Epilogue activations by the op (variant) they apply, as the C library names them."""
    names, code = {"none": lib.LGK_ACT_NONE}, lib.LGK_ACT_NONE + 1
    while (name := lib.lgk_activation_name(code)) != ffi.NULL:
        names[ffi.string(name).decode()] = code
        code += 1
    return names


# activation= of the fused kernels: an op variant name ("nn.gelu:approximate=tanh"), or
# the short names this module has always accepted
ACTIVATIONS: dict[str, int] = _activation_names()
_SHORT_NAMES = {"relu": "nn.relu", "gelu": "nn.gelu:approximate=none",
                "gelu_tanh": "nn.gelu:approximate=tanh", "silu": "nn.silu"}
ACTIVATIONS.update({short: ACTIVATIONS[name] for short, name in _SHORT_NAMES.items()
                    if name in ACTIVATIONS})


def _activation(op: str, activation: str) -> int:
    if activation not in ACTIVATIONS:
        raise error(op, f"unsupported activation {activation!r}; one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[activation]


def _batch_offsets(x: Array, batch: tuple[int, ...]) -> Any:
    """Element offset of every (broadcast) batch matrix of x, in C order of batch (a
    list built in Python: a plan makes two per batched matmul, few offsets each, where
    numpy's broadcasting took ~18 us)."""
    if x.size == 0:  # K == 0: the operand is never read (and spans no floats to offset into)
        return ffi.new("int64_t[]", max(prod(batch), 1))
    xb = x.shape[:-2]
    steps = [0] * (len(batch) - len(xb)) + [
        stride if dim > 1 else 0 for dim, stride in zip(xb, estrides(x)[:-2])]
    offsets = [0]
    for dim, step in zip(batch, steps):
        offsets = [o + i * step for o in offsets for i in range(dim)]
    return ffi.new("int64_t[]", offsets)


def _bias_slot(bias: Optional[Array], bias_input: Optional[int], position: int) -> tuple:
    """The slot of a bias that is one of the kernel's inputs (nn.linear's third)."""
    return () if bias is None or bias_input is None else ((bias_input, position),)


def _gemm(op: str, a: Array, b: Array, c: Array, bias: Optional[Array], act: int,
          bias_input: Optional[int]) -> CCall:
    """c (M, N) = act(a (M, K) @ b (K, N) + bias[N]); a and b are strided 2-D views."""
    (m, k), n = a.shape, b.shape[1]
    (rsa, csa), (rsb, csb) = estrides(a), estrides(b)
    bias_mode = lib.LGK_BIAS_NONE if bias is None else lib.LGK_BIAS_COL
    return CCall(op, lib.lgk_sgemm, (
        m, n, k, ptr(a), extent(a), rsa, csa, ptr(b), extent(b), rsb, csb, ptr(c), c.size, n,
        opt_ptr(bias), 0 if bias is None else bias.size, bias_mode, act, num_threads()),
        (a, b, c, bias), ((0, 3), (1, 7), (OUT, 11), *_bias_slot(bias, bias_input, 14)))


def _as_rows(x: Array, strict: bool) -> Array:
    """(..., K) as a (rows, K) strided view without copying when possible."""
    shape = (prod(x.shape[:-1]), x.shape[-1])  # not -1: K may be 0
    try:
        return strided(x.reshape(shape, copy=False), strict)
    except ValueError:
        if strict:
            raise Unbindable from None
        return dense(x).reshape(shape)


def _gemm_batched(op: str, a: Array, b: Array, c: Array, batch: tuple[int, ...],
                  softmax: bool = False) -> CCall:
    """Broadcast batched matmul: one C call, per-matrix offsets for a and b; with
    `softmax`, the softmax of each C row over the last axis in the same call."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    a_off, b_off = _batch_offsets(a, batch), _batch_offsets(b, batch)
    (rsa, csa), (rsb, csb) = estrides(a)[-2:], estrides(b)[-2:]
    args = (prod(batch), m, n, k, ptr(a), extent(a), a_off, rsa, csa, ptr(b), extent(b), b_off,
            rsb, csb, ptr(c), c.size, m * n, n)
    if softmax:
        fn, args = lib.lgk_sgemm_batched_softmax, (*args, num_threads())
    else:
        fn, args = lib.lgk_sgemm_batched, (*args, ffi.NULL, 0, lib.LGK_BIAS_NONE,
                                           lib.LGK_ACT_NONE, num_threads())
    return CCall(op, fn, args, (a, b, c), ((0, 4), (1, 9), (OUT, 14)))


_ISA_NAMES = {lib.LGK_ISA_GENERIC: "generic", lib.LGK_ISA_AVX2: "avx2",
              lib.LGK_ISA_AVX512: "avx512"}
_ALIGN = 64  # bytes; lgk_sgemm_prepacked requires it of the packed buffer


def _aligned_empty(n: int) -> Array:
    raw = np.empty(n + _ALIGN // ITEM, dtype=F32)
    skip = (-raw.ctypes.data % _ALIGN) // ITEM
    return raw[skip:skip + n]


class PackedWeight:
    """A constant right operand B (K, N) of matmul / nn.linear, packed once by
    :func:`pack_weight` into the layout of the GEMM micro-kernel in use, so that
    GEMMs with it skip packing B on every call.

    ``k``, ``n``: B's shape; ``isa``: the ``lgk_isa`` it was packed for (a weight
    packed under another kernel family is refused: pack it again); ``transposed``:
    packed from an (N, K) nn.linear weight. Keep the source array if the weight
    may ever have to be repacked: the packed layout cannot be unpacked."""

    __slots__ = ("_data", "k", "n", "isa", "transposed")

    def __init__(self, data: Array, k: int, n: int, isa: int, transposed: bool):
        self._data, self.k, self.n, self.isa, self.transposed = data, k, n, isa, transposed

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    @property
    def data(self) -> Array:
        """The packed floats (read-only), 64-byte aligned as the C side requires:
        a copy (copy.copy, pickle) may have lost that, so it is restored here."""
        if self._data.ctypes.data % _ALIGN:
            data = _aligned_empty(self._data.size)
            data[:] = self._data  # _packed_buffer has checked it is float32
            data.flags.writeable = False
            self._data = data
        return self._data

    def __repr__(self) -> str:
        isa = _ISA_NAMES.get(self.isa, self.isa)
        return f"PackedWeight(k={self.k}, n={self.n}, isa={isa}, transposed={self.transposed})"


def pack_weight(b: Array, transposed: bool = False) -> PackedWeight:
    """Pack a constant 2-D right operand once: ``b`` is B (K, N) for matmul, or with
    ``transposed=True`` an nn.linear weight (N, K) = (out, in), packed as its
    transpose without a copy. Pass the result in place of ``b`` / ``weight`` to
    :func:`matmul`, :func:`fused_matmul`, :func:`nn_linear` and
    :func:`fused_linear` (the latter two need ``transposed=True``)."""
    op = "pack_weight"
    b = f32(op, "b", b)
    if b.ndim != 2:
        raise error(op, f"expected a 2-D weight, got shape {b.shape}")
    if not isinstance(transposed, (bool, np.bool_)):
        raise error(op, f"transposed must be a bool, got {transposed!r}")
    src = strided(b)
    view = src.T if transposed else src
    k, n = view.shape
    size = lib.lgk_sgemm_packed_b_size(k, n)
    if size < 0:
        check_status(op, -size)
    data = _aligned_empty(size)
    (rs, cs), isa = estrides(view), lib.lgk_gemm_isa()
    check_status(op, lib.lgk_sgemm_pack_b(k, n, ptr(view), extent(view), rs, cs,
                                           ptr(data), data.size))
    data.flags.writeable = False
    return PackedWeight(data, k, n, isa, bool(transposed))


def _packed_buffer(op: str, w: PackedWeight) -> Array:
    """The packed floats of w, after checking it fits the kernel family in use."""
    current = lib.lgk_gemm_isa()
    if w.isa != current:
        raise error(op, f"weight was packed for the {_ISA_NAMES.get(w.isa, w.isa)} GEMM kernels "
                        f"but {_ISA_NAMES[current]} is in use; pack it again")
    raw = w._data
    if not (isinstance(raw, np.ndarray) and raw.dtype == F32 and raw.ndim == 1
            and raw.flags.c_contiguous):
        raise error(op, "PackedWeight holds no packed float32 buffer; use pack_weight()")
    return w.data


def _plan_packed(op: str, a: Array, w: PackedWeight, bias: Optional[Array], act: int,
                 out: Optional[Array], strict: bool,
                 bias_input: Optional[int]) -> tuple[Array, Optional[CCall]]:
    """``act(a @ B + bias)`` with B prepacked; a's leading dims fold into M."""
    if a.ndim == 0:
        raise error(op, "matmul operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    if a2.shape[-1] != w.k:
        raise error(op, f"inner dimensions differ: {a.shape} @ packed {w.shape}")
    n = w.n
    if bias is not None and bias.shape != (n,):
        raise error(op, f"fused bias must have shape ({n},), got {bias.shape}")
    packed = _packed_buffer(op, w)
    out = out_array(op, out, (a2.shape[:-1] if a.ndim > 1 else ()) + (n,))
    if out.size == 0:
        return out, None
    rows = _as_rows(detach(a2, out, strict=strict), strict)
    bias = None if bias is None else dense(detach(bias, out, strict=strict), strict)
    (m, k), (rsa, csa) = rows.shape, estrides(rows)
    return out, CCall(op, lib.lgk_sgemm_prepacked, (
        m, n, k, ptr(rows), extent(rows), rsa, csa, ptr(packed), packed.size, ptr(out),
        out.size, n, opt_ptr(bias), 0 if bias is None else bias.size,
        lib.LGK_BIAS_NONE if bias is None else lib.LGK_BIAS_COL, act, num_threads()),
        (rows, packed, out, bias), ((0, 3), (OUT, 9), *_bias_slot(bias, bias_input, 12)))


def _plan_matmul(a: Array, b: Any, *, bias: Optional[Array] = None, activation: str = "none",
                 out: Optional[Array] = None, op: str = "matmul", strict: bool = False,
                 bias_input: Optional[int] = None) -> tuple[Array, Optional[CCall]]:
    """The C call of act(a @ b + bias); `bias_input`: the kernel input the bias is, if
    it is one (nn.linear), for its slot. int32 operands go to the int8 GEMM or numpy
    (int_matmul.py), looking at their values on every call: never a prepared call."""
    if op == "matmul" and _is_int32(a, b):
        if strict:
            raise Unbindable
        from .int_matmul import int_matmul
        return int_matmul(a, b, bias=bias, activation=activation, out=out, op=op), None
    a, bias = f32(op, "a", a), opt_f32(op, "bias", bias)
    act = _activation(op, activation)
    if isinstance(b, PackedWeight):
        return _plan_packed(op, a, b, bias, act, out, strict, bias_input)
    b = f32(op, "b", b)
    if a.ndim == 0 or b.ndim == 0:
        raise error(op, "matmul operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    (m, k), (kb, n) = a2.shape[-2:], b2.shape[-2:]
    if k != kb:
        raise error(op, f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = a2.shape[:-2] if b2.ndim == 2 else broadcast_shape(op, a2.shape[:-2], b2.shape[:-2])
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    if bias is not None and (b2.ndim != 2 or bias.shape != (n,)):
        raise error(op, f"fused bias must have shape ({n},) with a 2-D right operand")
    if b2.ndim != 2 and act != lib.LGK_ACT_NONE:
        raise error(op, "fused activation needs a 2-D right operand")
    out = out_array(op, out, shape)
    if out.size == 0:
        return out, None
    a2 = strided(detach(a2, out, strict=strict), strict)
    b2 = strided(detach(b2, out, strict=strict), strict)
    bias = None if bias is None else dense(detach(bias, out, strict=strict), strict)
    c2 = out.reshape(out.size // n, n)
    if b2.ndim == 2:  # fold every batch dim of a into M: one big GEMM
        return out, _gemm(op, _as_rows(a2, strict), b2, c2, bias, act, bias_input)
    return out, _gemm_batched(op, a2, b2, c2, batch)


def _plan_matmul_softmax(a: Array, b: Array, *, out: Optional[Array] = None,
                         op: str = "matmul", strict: bool = False
                         ) -> tuple[Array, Optional[CCall]]:
    """The C call of softmax(a @ b) over the last axis (numpy.matmul batch broadcasting,
    both operands at least 2-D): each C row strip's softmax runs while it is in cache."""
    a, b = f32(op, "a", a), f32(op, "b", b)
    if a.ndim < 2 or b.ndim < 2:
        raise error(op, f"matmul + softmax needs operands of 2 or more dims, got {a.shape} @ "
                        f"{b.shape}")
    (m, k), (kb, n) = a.shape[-2:], b.shape[-2:]
    if k != kb:
        raise error(op, f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = broadcast_shape(op, a.shape[:-2], b.shape[:-2])
    out = out_array(op, out, batch + (m, n))
    if out.size == 0:
        return out, None
    a = strided(detach(a, out, strict=strict), strict)
    b = strided(detach(b, out, strict=strict), strict)
    return out, _gemm_batched(op, a, b, out.reshape(out.size // n, n), batch, softmax=True)


def matmul_softmax(a: Array, b: Array, *, out: Optional[Array] = None) -> Array:
    """``softmax(a @ b, axis=-1)`` as one C call, equal to :func:`matmul` followed by
    :func:`nn_softmax` bit for bit; a and b at least 2-D, batch dims broadcast."""
    return run_call(*_plan_matmul_softmax(a, b, out=out))


def _is_int32(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and a.dtype == np.int32:
        return True
    if isinstance(b, (np.ndarray, PackedWeight)):
        return False  # the float case, without the import (a plan asks once per GEMM)
    from .int_matmul import PackedIntWeight
    return isinstance(b, PackedIntWeight)


def _pack_matmul_weight(weight: Array, **_attrs: Any) -> Any:
    """matmul's constant 2-D right operand packed once: float32 for the float GEMM, int32
    for the int8 GEMM where its columns fit bytes; None otherwise."""
    if weight.ndim != 2:
        return None
    if weight.dtype == np.int32:
        from .int_matmul import pack_int_weight
        return pack_int_weight(weight)
    return pack_weight(weight)


def fused_matmul(a: Array, b: Any, *, bias: Optional[Array] = None,
                 activation: str = "none", out: Optional[Array] = None,
                 op: str = "matmul") -> Array:
    """``act(a @ b + bias)`` with numpy.matmul semantics; bias (N,) needs 2-D b.
    b may be a :class:`PackedWeight` (a 2-D B packed by :func:`pack_weight`);
    ``activation`` is "none" or a name of :data:`ACTIVATIONS`."""
    return run_call(*_plan_matmul(a, b, bias=bias, activation=activation, out=out, op=op))


def matmul(a: Array, b: Any, *, out: Optional[Array] = None) -> Array:
    """numpy.matmul: 1-D promotion and broadcast batch dims; b may be a PackedWeight."""
    return run_call(*_plan_matmul(a, b, out=out))


def _plan_linear(data: Array, weight: Any, bias: Optional[Array] = None, *,
                 activation: str = "none", out: Optional[Array] = None, op: str = "nn.linear",
                 strict: bool = False) -> tuple[Array, Optional[CCall]]:
    data, bias = f32(op, "data", data), opt_f32(op, "bias", bias)
    if isinstance(weight, PackedWeight):
        if not weight.transposed:
            raise error(op, "a packed nn.linear weight must come from "
                            "pack_weight(weight, transposed=True)")
        (n_in, n_out), right = weight.shape, weight
    else:
        weight = f32(op, "weight", weight)
        if weight.ndim != 2:
            raise error(op, f"expected weight (out, in), got {weight.shape}")
        (n_out, n_in), right = weight.shape, weight.T
    if data.ndim < 1:
        raise error(op, f"expected data (..., in), got {data.shape}")
    if data.shape[-1] != n_in:
        raise error(op, f"data has {data.shape[-1]} features, weight expects {n_in}")
    if bias is not None:
        if bias.ndim > 1 or bias.size not in (n_out, 1):
            raise error(op, f"bias must have shape ({n_out},), got {bias.shape}")
        bias = np.broadcast_to(bias.reshape(-1), (n_out,))
    return _plan_matmul(data, right, bias=bias, activation=activation, out=out, op=op,
                        strict=strict, bias_input=2)


def fused_linear(data: Array, weight: Any, bias: Optional[Array] = None, *,
                 activation: str = "none", out: Optional[Array] = None,
                 op: str = "nn.linear") -> Array:
    """``act(data @ weight.T + bias)``; weight.T is read in place, never copied.
    weight may be a :class:`PackedWeight` from ``pack_weight(weight, transposed=True)``."""
    return run_call(*_plan_linear(data, weight, bias, activation=activation, out=out, op=op))


def nn_linear(data: Array, weight: Any, bias: Optional[Array] = None, *,
              out: Optional[Array] = None) -> Array:
    """nn.linear: ``data @ weight.T + bias``, weight (out_features, in_features)."""
    return run_call(*_plan_linear(data, weight, bias, out=out))


bound(fused_matmul, _plan_matmul)
bound(matmul, _plan_matmul)
bound(matmul_softmax, _plan_matmul_softmax)
bound(fused_linear, _plan_linear)
bound(nn_linear, _plan_linear)
# The fused variant a planned executor may use to apply a following bias add and
# activation in the GEMM's epilogue (same inputs, plus bias= and activation=).
matmul.epilogue, nn_linear.epilogue = fused_matmul, fused_linear
# The fused variant applying a following softmax over the last axis (float operands of
# 2 or more dims, neither a packed weight).
matmul.softmax_epilogue = matmul_softmax
# The binary op whose per-column form the epilogue's bias computes (LGK_BIAS_COL).
EPILOGUE_BIAS_OP = "add"
matmul.epilogue_bias = nn_linear.epilogue_bias = True
# A constant right operand may be packed once: (input index, packed as transposed).
matmul.packed_input, nn_linear.packed_input = (1, False), (1, True)
matmul.pack = _pack_matmul_weight
