"""Typed Python wrappers of the C kernels.

Every public kernel follows the reference-kernel convention ``kernel(*inputs, **attrs)``:
inputs positionally, every attribute as a keyword (defaults as in docs/ops.md; list
attributes may be tuples), returning a new float32 ndarray. Each also takes ``out=``: a
preallocated C-contiguous float32 array of the result's shape, which is filled and
returned (for executors that plan buffers). ``out`` may alias an input.

Before any call into C the inputs are validated: dtype float32, consistent shapes,
valid attributes. Non-contiguous inputs are passed as strided views where the C kernel
supports it (GEMM operands, broadcasting binary ops, permute) and copied otherwise.
Every failure raises :class:`legato.errors.ExecutionError` (a ``LegatoError``) whose
message names the op; attribute combinations a kernel does not implement (e.g. NHWC
conv) raise it too, saying so.

Function names are the op names with ``.`` replaced by ``_`` (``nn.layer_norm`` ->
``nn_layer_norm``), plus a trailing ``_`` where that would shadow a Python builtin
(``abs_``, ``sum_``, ``max_``, ``min_``). ``KERNELS`` maps op names to the functions.

Constant weights: :func:`pack_weight` packs a 2-D right operand once (the layout the GEMM
micro-kernel reads); the resulting :class:`PackedWeight` is accepted by ``matmul``,
``nn_linear`` and the fused variants in place of ``b`` / ``weight`` and saves the
per-call packing of B (15-25% of a GEMM at M = 64..128).

Threads: ``LEGATO_NUM_THREADS`` (read at every call; default: the usable cores, at most
2, measured fastest on the 2-core target). Small problems always run single-threaded.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from legato.errors import ExecutionError

from ._lib import ffi, lib

__all__ = [
    "KERNELS", "num_threads", "release_scratch", "PackedWeight", "pack_weight",
    "fused_linear", "fused_matmul",
    "matmul", "nn_linear", "nn_conv2d", "nn_max_pool2d", "nn_avg_pool2d",
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
    "negative", "abs_", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
    "nn_relu", "nn_gelu", "nn_silu", "nn_softmax", "nn_log_softmax",
    "nn_layer_norm", "nn_rms_norm", "sum_", "mean", "max_", "min_", "permute_dims",
]

Array = np.ndarray
_F32 = np.dtype(np.float32)
_ITEM = _F32.itemsize
MAX_NDIM: int = lib.LGK_MAX_NDIM

# ---------------------------------------------------------------------------------
# errors, threads, buffers


def _error(op: str, message: str) -> ExecutionError:
    return ExecutionError(f"c_kernels {op}: {message}")


_STATUS_NAMES = {
    lib.LGK_ERR_NULL: "LGK_ERR_NULL", lib.LGK_ERR_SHAPE: "LGK_ERR_SHAPE",
    lib.LGK_ERR_OVERFLOW: "LGK_ERR_OVERFLOW", lib.LGK_ERR_ARG: "LGK_ERR_ARG",
    lib.LGK_ERR_NOMEM: "LGK_ERR_NOMEM", lib.LGK_ERR_THREAD: "LGK_ERR_THREAD",
}


def _check_status(op: str, status: int) -> None:
    """Raise for a non-zero C status (validation here should make this rare)."""
    if status != lib.LGK_OK:
        name = _STATUS_NAMES.get(status, f"status {status}")
        text = ffi.string(lib.lgk_strerror(status)).decode()
        raise _error(op, f"C kernel failed: {text} ({name})")


def _default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 2))


_DEFAULT_THREADS = _default_threads()


def num_threads() -> int:
    """Thread count for GEMM-based kernels, from ``LEGATO_NUM_THREADS``."""
    raw = os.environ.get("LEGATO_NUM_THREADS", "").strip()
    if not raw:
        return _DEFAULT_THREADS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ExecutionError(f"c_kernels: LEGATO_NUM_THREADS must be a positive integer, got {raw!r}")
    return min(value, lib.LGK_MAX_THREADS)


class _Recorder:
    """Stands in for ``lib`` while some thread records: that thread's compute calls are
    logged, then made; other threads' calls go straight through."""

    _NOT_COMPUTE = ("lgk_strerror", "lgk_free_scratch", "lgk_conv2d_out_shape",
                    "lgk_pool2d_out_shape", "lgk_gemm_isa", "lgk_gemm_force_isa",
                    "lgk_sgemm_packed_b_size")

    def __init__(self, real: Any):
        self._real = real
        self.logs: dict[int, list] = {}  # thread id -> calls recorded for it

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        log = self.logs.get(threading.get_ident())
        if log is None or not name.startswith("lgk_") or name in self._NOT_COMPUTE:
            return value

        def logged(*args: Any) -> Any:
            log.append((value, args))
            return value(*args)
        return logged


_recording_lock = threading.Lock()


@contextmanager
def recording():
    """Log the C calls kernels make in this thread (function, arguments) while the block
    runs; kernels other threads run meanwhile are neither logged nor disturbed.

    A planned executor runs each kernel once on its fixed buffers under this, and where
    that was a single C call on those buffers, replays it directly on every run: the
    Python-side validation then costs nothing per run."""
    global lib
    me, calls = threading.get_ident(), []
    with _recording_lock:
        if not isinstance(lib, _Recorder):
            lib = _Recorder(lib)
        outer = lib.logs.get(me)
        lib.logs[me] = calls
    try:
        yield calls
    finally:
        with _recording_lock:
            if outer is None:
                del lib.logs[me]
            else:
                lib.logs[me] = outer
            if not lib.logs:
                lib = lib._real


def release_scratch() -> None:
    """Free the scratch buffers the C side keeps for reuse between calls (a few
    MiB). Only call it while no kernel is running in another thread."""
    lib.lgk_free_scratch()


def _f32(op: str, name: str, x: Any) -> Array:
    """The input as a float32 ndarray; anything else is an error (no silent casts)."""
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise _error(op, f"{name} must be a float32 ndarray, got {type(x).__name__}")
    if x.dtype != _F32:
        raise _error(op, f"{name} must have dtype float32, got {x.dtype}")
    return x


def _opt_f32(op: str, name: str, x: Any) -> Optional[Array]:
    return None if x is None else _f32(op, name, x)


def _dense(x: Array) -> Array:
    """C-contiguous and aligned (copies only when needed)."""
    flags = x.flags
    if flags.c_contiguous and flags.aligned:
        return x
    return np.require(x, _F32, ["C", "A"])


def _strided(x: Array) -> Array:
    """A view the C kernels can walk with element strides: aligned, strides >= 0
    and whole elements. Anything else (negative or odd strides) is copied."""
    if x.flags.aligned and all(s >= 0 and s % _ITEM == 0 for s in x.strides):
        return x
    return _dense(x)


def _estrides(x: Array) -> list[int]:
    return [s // _ITEM for s in x.strides]


def _extent(x: Array) -> int:
    """Floats spanned by a strided view (what the C side may touch)."""
    if x.size == 0:
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(x.shape, _estrides(x)))


def _ptr(x: Array) -> Any:
    """Float pointer to x's first element. from_buffer (fast, keeps x alive)
    needs a contiguous buffer; for strided views the caller keeps x alive."""
    if x.flags.c_contiguous:
        return ffi.from_buffer("float[]", x)
    return ffi.cast("float *", x.ctypes.data)


def _i64(values: Sequence[int]) -> Any:
    return ffi.new("int64_t[]", [int(v) for v in values] or [0])


def _out(op: str, out: Optional[Array], shape: tuple[int, ...]) -> Array:
    """A fresh result array, or the validated caller-provided one."""
    if out is None:
        return np.empty(shape, dtype=_F32)
    out = _f32(op, "out", out)
    if out.shape != tuple(shape):
        raise _error(op, f"out has shape {out.shape}, expected {tuple(shape)}")
    if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise _error(op, "out must be a writeable, aligned, C-contiguous array")
    return out


def _detach(x: Array, out: Array, in_place_ok: bool = False) -> Array:
    """Copy an input that overlaps ``out`` unless it is exactly ``out`` and the
    kernel supports in-place operation."""
    if x is None or not np.may_share_memory(x, out):
        return x
    exact = (x.__array_interface__["data"][0] == out.__array_interface__["data"][0]
             and x.shape == out.shape and x.flags.c_contiguous)
    return x if (in_place_ok and exact) else x.copy()


# ---------------------------------------------------------------------------------
# attribute helpers


def _norm_axis(op: str, axis: Any, ndim: int) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise _error(op, f"axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise _error(op, f"axis {axis} is out of range for rank {ndim}")
    return int(axis) % ndim


def _norm_axes(op: str, axes: Any, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative, duplicate-free axes (None means all)."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        axes = [axes]
    norm = [_norm_axis(op, a, ndim) for a in axes]
    if len(set(norm)) != len(norm):
        raise _error(op, f"duplicate axes {list(axes)}")
    return tuple(sorted(norm))


def _ints(op: str, name: str, value: Any, length: int, minimum: int) -> list[int]:
    if isinstance(value, (int, np.integer)) or value is None:
        raise _error(op, f"{name} must be a list of {length} ints, got {value!r}")
    items = list(value)
    ok = len(items) == length and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in items)
    if not ok:
        raise _error(op, f"{name} must be a list of {length} ints, got {value!r}")
    if any(v < minimum for v in items):
        raise _error(op, f"{name} values must be >= {minimum}, got {items}")
    return [int(v) for v in items]


def _prod(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False


def _broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise _error(op, f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None


# ---------------------------------------------------------------------------------
# GEMM: matmul, nn.linear


_ACTIVATIONS = {
    "none": lib.LGK_ACT_NONE, "relu": lib.LGK_ACT_RELU, "gelu": lib.LGK_ACT_GELU,
    "gelu_tanh": lib.LGK_ACT_GELU_TANH, "silu": lib.LGK_ACT_SILU,
}


def _activation(op: str, activation: str) -> int:
    if activation not in _ACTIVATIONS:
        raise _error(op, f"unsupported activation {activation!r}; one of {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[activation]


def _batch_offsets(x: Array, batch: tuple[int, ...]) -> Any:
    """Element offset of every (broadcast) batch matrix of x, in C order of batch."""
    nb, xb = len(batch), x.shape[:-2]
    offsets = np.zeros((1,) * nb, dtype=np.int64)
    for i, (dim, stride) in enumerate(zip(xb, _estrides(x)[:-2])):
        shape = [1] * nb
        shape[nb - len(xb) + i] = dim
        offsets = offsets + (np.arange(dim, dtype=np.int64) * (stride if dim > 1 else 0)).reshape(shape)
    flat = np.ascontiguousarray(np.broadcast_to(offsets, batch), dtype=np.int64).ravel()
    return ffi.from_buffer("int64_t[]", flat)  # the cdata keeps `flat` alive


def _gemm(op: str, a: Array, b: Array, c: Array, bias: Optional[Array], act: int) -> None:
    """c (M, N) = act(a (M, K) @ b (K, N) + bias[N]); a and b are strided 2-D views."""
    (m, k), n = a.shape, b.shape[1]
    (rsa, csa), (rsb, csb) = _estrides(a), _estrides(b)
    bias_mode = lib.LGK_BIAS_NONE if bias is None else lib.LGK_BIAS_COL
    bias_ptr = ffi.NULL if bias is None else _ptr(bias)
    status = lib.lgk_sgemm(m, n, k, _ptr(a), _extent(a), rsa, csa, _ptr(b), _extent(b), rsb, csb,
                           _ptr(c), c.size, n, bias_ptr, 0 if bias is None else bias.size,
                           bias_mode, act, num_threads())
    _check_status(op, status)


def _as_rows(x: Array) -> Array:
    """(..., K) as a (rows, K) strided view without copying when possible."""
    shape = (_prod(x.shape[:-1]), x.shape[-1])  # not -1: K may be 0
    try:
        return _strided(x.reshape(shape, copy=False))
    except ValueError:
        return _dense(x).reshape(shape)


def _gemm_batched(op: str, a: Array, b: Array, c: Array, batch: tuple[int, ...]) -> None:
    """Broadcast batched matmul: one C call, per-matrix offsets for a and b."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    a_off, b_off = _batch_offsets(a, batch), _batch_offsets(b, batch)
    (rsa, csa), (rsb, csb) = _estrides(a)[-2:], _estrides(b)[-2:]
    status = lib.lgk_sgemm_batched(
        _prod(batch), m, n, k, _ptr(a), _extent(a), a_off, rsa, csa, _ptr(b), _extent(b), b_off,
        rsb, csb, _ptr(c), c.size, m * n, n, ffi.NULL, 0, lib.LGK_BIAS_NONE, lib.LGK_ACT_NONE,
        num_threads())
    _check_status(op, status)


_ISA_NAMES = {lib.LGK_ISA_GENERIC: "generic", lib.LGK_ISA_AVX2: "avx2",
              lib.LGK_ISA_AVX512: "avx512"}
_ALIGN = 64  # bytes; lgk_sgemm_prepacked requires it of the packed buffer


def _aligned_empty(n: int) -> Array:
    raw = np.empty(n + _ALIGN // _ITEM, dtype=_F32)
    skip = (-raw.ctypes.data % _ALIGN) // _ITEM
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
    b = _f32(op, "b", b)
    if b.ndim != 2:
        raise _error(op, f"expected a 2-D weight, got shape {b.shape}")
    if not isinstance(transposed, (bool, np.bool_)):
        raise _error(op, f"transposed must be a bool, got {transposed!r}")
    src = _strided(b)
    view = src.T if transposed else src
    k, n = view.shape
    size = lib.lgk_sgemm_packed_b_size(k, n)
    if size < 0:
        _check_status(op, -size)
    data = _aligned_empty(size)
    (rs, cs), isa = _estrides(view), lib.lgk_gemm_isa()
    _check_status(op, lib.lgk_sgemm_pack_b(k, n, _ptr(view), _extent(view), rs, cs,
                                           _ptr(data), data.size))
    data.flags.writeable = False
    return PackedWeight(data, k, n, isa, bool(transposed))


def _packed_buffer(op: str, w: PackedWeight) -> Array:
    """The packed floats of w, after checking it fits the kernel family in use."""
    current = lib.lgk_gemm_isa()
    if w.isa != current:
        raise _error(op, f"weight was packed for the {_ISA_NAMES.get(w.isa, w.isa)} GEMM kernels "
                         f"but {_ISA_NAMES[current]} is in use; pack it again")
    raw = w._data
    if not (isinstance(raw, np.ndarray) and raw.dtype == _F32 and raw.ndim == 1
            and raw.flags.c_contiguous):
        raise _error(op, "PackedWeight holds no packed float32 buffer; use pack_weight()")
    return w.data


def _fused_matmul_packed(op: str, a: Array, w: PackedWeight, bias: Optional[Array], act: int,
                         out: Optional[Array]) -> Array:
    """``act(a @ B + bias)`` with B prepacked; a's leading dims fold into M."""
    if a.ndim == 0:
        raise _error(op, "matmul operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    if a2.shape[-1] != w.k:
        raise _error(op, f"inner dimensions differ: {a.shape} @ packed {w.shape}")
    n = w.n
    if bias is not None and bias.shape != (n,):
        raise _error(op, f"fused bias must have shape ({n},), got {bias.shape}")
    packed = _packed_buffer(op, w)
    out = _out(op, out, (a2.shape[:-1] if a.ndim > 1 else ()) + (n,))
    if out.size == 0:
        return out
    rows = _as_rows(_detach(a2, out))
    bias = None if bias is None else _dense(_detach(bias, out))
    (m, k), (rsa, csa) = rows.shape, _estrides(rows)
    status = lib.lgk_sgemm_prepacked(
        m, n, k, _ptr(rows), _extent(rows), rsa, csa, _ptr(packed), packed.size, _ptr(out),
        out.size, n, ffi.NULL if bias is None else _ptr(bias), 0 if bias is None else bias.size,
        lib.LGK_BIAS_NONE if bias is None else lib.LGK_BIAS_COL, act, num_threads())
    _check_status(op, status)
    return out


def fused_matmul(a: Array, b: Any, *, bias: Optional[Array] = None,
                 activation: str = "none", out: Optional[Array] = None,
                 op: str = "matmul") -> Array:
    """``act(a @ b + bias)`` with numpy.matmul semantics; bias (N,) needs 2-D b.
    b may be a :class:`PackedWeight` (a 2-D B packed by :func:`pack_weight`)."""
    a, bias = _f32(op, "a", a), _opt_f32(op, "bias", bias)
    act = _activation(op, activation)
    if isinstance(b, PackedWeight):
        return _fused_matmul_packed(op, a, b, bias, act, out)
    b = _f32(op, "b", b)
    if a.ndim == 0 or b.ndim == 0:
        raise _error(op, "matmul operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    (m, k), (kb, n) = a2.shape[-2:], b2.shape[-2:]
    if k != kb:
        raise _error(op, f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = a2.shape[:-2] if b2.ndim == 2 else _broadcast_shape(op, a2.shape[:-2], b2.shape[:-2])
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    if bias is not None and (b2.ndim != 2 or bias.shape != (n,)):
        raise _error(op, f"fused bias must have shape ({n},) with a 2-D right operand")
    out = _out(op, out, shape)
    if out.size == 0:
        return out
    a2, b2 = _strided(_detach(a2, out)), _strided(_detach(b2, out))
    bias = None if bias is None else _dense(_detach(bias, out))
    c2 = out.reshape(out.size // n, n)
    if b2.ndim == 2:  # fold every batch dim of a into M: one big GEMM
        _gemm(op, _as_rows(a2), b2, c2, bias, act)
    else:
        if act != lib.LGK_ACT_NONE:
            raise _error(op, "fused activation needs a 2-D right operand")
        _gemm_batched(op, a2, b2, c2, batch)
    return out


def matmul(a: Array, b: Any, *, out: Optional[Array] = None) -> Array:
    """numpy.matmul: 1-D promotion and broadcast batch dims; b may be a PackedWeight."""
    return fused_matmul(a, b, out=out, op="matmul")


def fused_linear(data: Array, weight: Any, bias: Optional[Array] = None, *,
                 activation: str = "none", out: Optional[Array] = None,
                 op: str = "nn.linear") -> Array:
    """``act(data @ weight.T + bias)``; weight.T is read in place, never copied.
    weight may be a :class:`PackedWeight` from ``pack_weight(weight, transposed=True)``."""
    data, bias = _f32(op, "data", data), _opt_f32(op, "bias", bias)
    if isinstance(weight, PackedWeight):
        if not weight.transposed:
            raise _error(op, "a packed nn.linear weight must come from "
                             "pack_weight(weight, transposed=True)")
        (n_in, n_out), right = weight.shape, weight
    else:
        weight = _f32(op, "weight", weight)
        if weight.ndim != 2:
            raise _error(op, f"expected weight (out, in), got {weight.shape}")
        (n_out, n_in), right = weight.shape, weight.T
    if data.ndim < 1:
        raise _error(op, f"expected data (..., in), got {data.shape}")
    if data.shape[-1] != n_in:
        raise _error(op, f"data has {data.shape[-1]} features, weight expects {n_in}")
    if bias is not None:
        if bias.ndim > 1 or bias.size not in (n_out, 1):
            raise _error(op, f"bias must have shape ({n_out},), got {bias.shape}")
        bias = np.broadcast_to(bias.reshape(-1), (n_out,))
    return fused_matmul(data, right, bias=bias, activation=activation, out=out, op=op)


def nn_linear(data: Array, weight: Any, bias: Optional[Array] = None, *,
              out: Optional[Array] = None) -> Array:
    """nn.linear: ``data @ weight.T + bias``, weight (out_features, in_features)."""
    return fused_linear(data, weight, bias, out=out, op="nn.linear")


# ---------------------------------------------------------------------------------
# conv2d and pooling (NCHW)


def _require_layout(op: str, name: str, value: str, supported: str) -> None:
    if value != supported:
        raise _error(op, f"{name}={value!r} is not supported by c_kernels (only {supported!r})")


def _spatial(op: str, strides: Any, padding: Any, dilation: Any) -> tuple[list[int], ...]:
    return (_ints(op, "strides", strides, 2, 1), _ints(op, "padding", padding, 4, 0),
            _ints(op, "dilation", dilation, 2, 1))


def _fill_geometry(p: Any, shape: tuple[int, ...], strides: list[int], padding: list[int],
                   dilation: list[int]) -> None:
    p.n, p.c, p.h, p.w = shape
    p.stride_h, p.stride_w = strides
    p.pad_top, p.pad_left, p.pad_bottom, p.pad_right = padding
    p.dilation_h, p.dilation_w = dilation


def _out_hw(op: str, fn: Any, params: Any, what: str) -> tuple[int, int]:
    oh, ow = ffi.new("int64_t *"), ffi.new("int64_t *")
    if fn(params, oh, ow) != lib.LGK_OK:
        raise _error(op, f"invalid geometry: {what}")
    return oh[0], ow[0]


def nn_conv2d(data: Array, weight: Array, bias: Optional[Array] = None, *,
              strides: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0, 0, 0),
              dilation: Sequence[int] = (1, 1), groups: int = 1, data_layout: str = "NCHW",
              kernel_layout: str = "OIHW", out: Optional[Array] = None,
              activation: str = "none") -> Array:
    """nn.conv2d, NCHW data and OIHW weight; ``activation`` is an optional fusion."""
    op = "nn.conv2d"
    _require_layout(op, "data_layout", data_layout, "NCHW")
    _require_layout(op, "kernel_layout", kernel_layout, "OIHW")
    data, weight = _f32(op, "data", data), _f32(op, "weight", weight)
    bias, act = _opt_f32(op, "bias", bias), _activation(op, activation)
    strides, padding, dilation = _spatial(op, strides, padding, dilation)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise _error(op, f"groups must be a positive int, got {groups!r}")
    if data.ndim != 4 or weight.ndim != 4:
        raise _error(op, f"expected 4-D data and weight, got {data.shape}, {weight.shape}")
    n_out, c_per_group = weight.shape[:2]
    if data.shape[1] != c_per_group * groups or n_out % groups:
        raise _error(op, f"channels do not match: data {data.shape}, weight {weight.shape}, groups {groups}")
    if bias is not None and bias.shape != (n_out,):
        raise _error(op, f"bias must have shape ({n_out},), got {bias.shape}")
    p = ffi.new("lgk_conv2d_params *")
    _fill_geometry(p, data.shape, strides, padding, dilation)
    p.o, p.kh, p.kw, p.groups = n_out, weight.shape[2], weight.shape[3], int(groups)
    oh, ow = _out_hw(op, lib.lgk_conv2d_out_shape, p,
                     f"input {data.shape}, kernel {weight.shape[2:]}, strides {strides}, "
                     f"padding {padding}, dilation {dilation}")
    out = _out(op, out, (data.shape[0], n_out, oh, ow))
    if out.size == 0:
        return out
    x, w = _dense(_detach(data, out)), _dense(_detach(weight, out))
    b = None if bias is None else _dense(_detach(bias, out))
    status = lib.lgk_conv2d_nchw(p, _ptr(x), x.size, _ptr(w), w.size,
                                 ffi.NULL if b is None else _ptr(b), 0 if b is None else b.size,
                                 _ptr(out), out.size, act, num_threads())
    _check_status(op, status)
    return out


def _pool(op: str, fn: Any, data: Array, pool_size: Any, strides: Any, padding: Any,
          dilation: Any, ceil_mode: bool, count_include_pad: bool, data_layout: str,
          out: Optional[Array]) -> Array:
    _require_layout(op, "data_layout", data_layout, "NCHW")
    data = _f32(op, "data", data)
    if data.ndim != 4:
        raise _error(op, f"expected 4-D NCHW data, got shape {data.shape}")
    kernel = _ints(op, "pool_size", pool_size, 2, 1)
    strides, padding, dilation = _spatial(op, kernel if strides is None else strides, padding,
                                          dilation)
    p = ffi.new("lgk_pool2d_params *")
    _fill_geometry(p, data.shape, strides, padding, dilation)
    p.kh, p.kw = kernel
    p.ceil_mode, p.count_include_pad = bool(ceil_mode), bool(count_include_pad)
    oh, ow = _out_hw(op, lib.lgk_pool2d_out_shape, p,
                     f"input {data.shape}, pool_size {kernel}, strides {strides}, "
                     f"padding {padding}, dilation {dilation}")
    out = _out(op, out, data.shape[:2] + (oh, ow))
    if out.size == 0:
        return out
    x = _dense(_detach(data, out))
    _check_status(op, fn(p, _ptr(x), x.size, _ptr(out), out.size))
    return out


def nn_max_pool2d(data: Array, *, pool_size: Sequence[int], strides: Optional[Sequence[int]] = None,
                  padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                  ceil_mode: bool = False, data_layout: str = "NCHW",
                  out: Optional[Array] = None) -> Array:
    """nn.max_pool2d (NCHW); padded cells are -inf."""
    return _pool("nn.max_pool2d", lib.lgk_max_pool2d_nchw, data, pool_size, strides, padding,
                 dilation, ceil_mode, False, data_layout, out)


def nn_avg_pool2d(data: Array, *, pool_size: Sequence[int], strides: Optional[Sequence[int]] = None,
                  padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                  ceil_mode: bool = False, count_include_pad: bool = False,
                  data_layout: str = "NCHW", out: Optional[Array] = None) -> Array:
    """nn.avg_pool2d (NCHW, ONNX AveragePool). With count_include_pad the divisor
    counts taps inside the padded input (windows are clipped at its end, as in
    PyTorch / ONNX Runtime for ceil_mode)."""
    return _pool("nn.avg_pool2d", lib.lgk_avg_pool2d_nchw, data, pool_size, strides, padding,
                 dilation, ceil_mode, count_include_pad, data_layout, out)


# ---------------------------------------------------------------------------------
# elementwise


def _broadcast_strides(x: Array, shape: tuple[int, ...]) -> list[int]:
    """Element strides of x viewed in the broadcast shape (0 on broadcast dims)."""
    lead = len(shape) - x.ndim
    return [0] * lead + [0 if d == 1 else s for d, s in zip(x.shape, _estrides(x))]


_UNIT_STRIDE = ffi.new("int64_t[1]", [1])


def _binary(op: str, code: int, a: Any, b: Any, out: Optional[Array]) -> Array:
    a, b = _f32(op, "a", a), _f32(op, "b", b)
    shape = a.shape if a.shape == b.shape else _broadcast_shape(op, a.shape, b.shape)
    if len(shape) > MAX_NDIM:
        raise _error(op, f"rank {len(shape)} exceeds the supported maximum of {MAX_NDIM}")
    out = _out(op, out, shape)
    if out.size == 0:
        return out
    a, b = _strided(_detach(a, out, True)), _strided(_detach(b, out, True))
    if a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous:
        # the common case: one flat unit-stride loop
        ndim, dims, sa, sb = 1, _i64([out.size]), _UNIT_STRIDE, _UNIT_STRIDE
    else:
        ndim, dims = len(shape), _i64(shape)
        sa, sb = _i64(_broadcast_strides(a, shape)), _i64(_broadcast_strides(b, shape))
    status = lib.lgk_binary(code, ndim, dims, _ptr(a), _extent(a), sa, _ptr(b), _extent(b), sb,
                            _ptr(out), out.size)
    _check_status(op, status)
    return out


def _unary(op: str, code: int, x: Any, out: Optional[Array]) -> Array:
    x = _f32(op, "data", x)
    out = _out(op, out, x.shape)
    if out.size == 0:
        return out
    x = _dense(_detach(x, out, True))
    _check_status(op, lib.lgk_unary(code, x.size, _ptr(x), _ptr(out)))
    return out


def _make_binary(op: str, code: int) -> Callable[..., Array]:
    def kernel(a: Array, b: Array, *, out: Optional[Array] = None) -> Array:
        return _binary(op, code, a, b, out)

    kernel.__name__ = kernel.__qualname__ = op
    kernel.__doc__ = f"{op}(a, b) with numpy broadcasting (float32)."
    return kernel


def _make_unary(op: str, code: int) -> Callable[..., Array]:
    def kernel(data: Array, *, out: Optional[Array] = None) -> Array:
        return _unary(op, code, data, out)

    kernel.__name__ = kernel.__qualname__ = op.replace(".", "_")
    kernel.__doc__ = f"{op}(data), elementwise (float32)."
    return kernel


add = _make_binary("add", lib.LGK_BINARY_ADD)
subtract = _make_binary("subtract", lib.LGK_BINARY_SUBTRACT)
multiply = _make_binary("multiply", lib.LGK_BINARY_MULTIPLY)
divide = _make_binary("divide", lib.LGK_BINARY_DIVIDE)
maximum = _make_binary("maximum", lib.LGK_BINARY_MAXIMUM)
minimum = _make_binary("minimum", lib.LGK_BINARY_MINIMUM)
power = _make_binary("power", lib.LGK_BINARY_POWER)

negative = _make_unary("negative", lib.LGK_UNARY_NEGATIVE)
abs_ = _make_unary("abs", lib.LGK_UNARY_ABS)
exp = _make_unary("exp", lib.LGK_UNARY_EXP)
log = _make_unary("log", lib.LGK_UNARY_LOG)
sqrt = _make_unary("sqrt", lib.LGK_UNARY_SQRT)
rsqrt = _make_unary("rsqrt", lib.LGK_UNARY_RSQRT)
tanh = _make_unary("tanh", lib.LGK_UNARY_TANH)
sigmoid = _make_unary("sigmoid", lib.LGK_UNARY_SIGMOID)
erf = _make_unary("erf", lib.LGK_UNARY_ERF)
nn_relu = _make_unary("nn.relu", lib.LGK_UNARY_RELU)
nn_silu = _make_unary("nn.silu", lib.LGK_UNARY_SILU)

_GELU = {"none": lib.LGK_UNARY_GELU, "tanh": lib.LGK_UNARY_GELU_TANH}


def nn_gelu(data: Array, *, approximate: str = "none", out: Optional[Array] = None) -> Array:
    """nn.gelu: exact (erf) for approximate="none", tanh form for "tanh"."""
    if approximate not in _GELU:
        raise _error("nn.gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary("nn.gelu", _GELU[approximate], data, out)


# ---------------------------------------------------------------------------------
# softmax, norms


def _softmax(op: str, fn: Any, data: Any, axis: Any, out: Optional[Array]) -> Array:
    data = _f32(op, "data", data)
    if data.ndim == 0:
        raise _error(op, "softmax needs at least one dimension")
    ax = _norm_axis(op, axis, data.ndim)
    out = _out(op, out, data.shape)
    if out.size == 0:
        return out
    x = _dense(_detach(data, out, True))
    outer, n, inner = _prod(data.shape[:ax]), data.shape[ax], _prod(data.shape[ax + 1:])
    _check_status(op, fn(outer, n, inner, _ptr(x), _ptr(out)))
    return out


def nn_softmax(data: Array, *, axis: int = -1, out: Optional[Array] = None) -> Array:
    """nn.softmax along one axis (ONNX opset 13)."""
    return _softmax("nn.softmax", lib.lgk_softmax, data, axis, out)


def nn_log_softmax(data: Array, *, axis: int = -1, out: Optional[Array] = None) -> Array:
    """nn.log_softmax along one axis."""
    return _softmax("nn.log_softmax", lib.lgk_log_softmax, data, axis, out)


def _per_feature(p: Optional[Array], norm_shape: tuple[int, ...]) -> Optional[Array]:
    """gamma/beta (already known to broadcast against the data) as a dense vector
    over the trailing normalised dims, or None when it also spans other dims."""
    if p is None or p.ndim > len(norm_shape):
        return None
    return _dense(np.broadcast_to(p, norm_shape)).reshape(-1)


def _float(op: str, name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise _error(op, f"{name} must be a number, got {value!r}")
    return float(value)


def _normalize(op: str, data: Any, gamma: Any, beta: Any, axes: Any, epsilon: Any,
               out: Optional[Array], rms: bool) -> Array:
    data = _f32(op, "data", data)
    gamma, beta = _opt_f32(op, "gamma", gamma), _opt_f32(op, "beta", beta)
    ax = _norm_axes(op, axes, data.ndim)
    if not ax:
        raise _error(op, "axes must name at least one axis")
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is not None and not _broadcasts_to(p.shape, data.shape):
            raise _error(op, f"{name} of shape {p.shape} does not broadcast to data {data.shape}")
    eps = _float(op, "epsilon", epsilon)
    perm = [d for d in range(data.ndim) if d not in ax] + list(ax)
    trailing = perm == list(range(data.ndim))
    norm_shape = tuple(data.shape[d] for d in ax)
    # gamma/beta fuse into the C kernel when they only span the normalised dims.
    g, b = (_per_feature(gamma, norm_shape), _per_feature(beta, norm_shape)) if trailing else (None, None)
    fused = trailing and (gamma is None) == (g is None) and (beta is None) == (b is None)
    g, b = (g, b) if fused else (None, None)
    out = _out(op, out, data.shape)
    if out.size == 0:
        return out
    # Non-trailing axes: normalise a transposed copy, then transpose back.
    x = _dense(_detach(data, out, True)) if trailing else permute_dims(data, axes=perm)
    y = out if trailing else np.empty(x.shape, _F32)
    rows, n = x.size // _prod(norm_shape), _prod(norm_shape)
    g_ptr, b_ptr = (ffi.NULL if v is None else _ptr(v) for v in (g, b))
    status = (lib.lgk_rms_norm(rows, n, _ptr(x), g_ptr, eps, _ptr(y)) if rms
              else lib.lgk_layer_norm(rows, n, _ptr(x), g_ptr, b_ptr, eps, _ptr(y)))
    _check_status(op, status)
    if not trailing:
        permute_dims(y, axes=[int(i) for i in np.argsort(perm)], out=out)
    if not fused:
        _apply_affine(out, gamma, beta)
    return out


def _apply_affine(out: Array, gamma: Optional[Array], beta: Optional[Array]) -> None:
    if gamma is not None:
        multiply(out, gamma, out=out)
    if beta is not None:
        add(out, beta, out=out)


def nn_layer_norm(data: Array, gamma: Optional[Array] = None, beta: Optional[Array] = None, *,
                  axes: Sequence[int] = (-1,), epsilon: float = 1e-5,
                  out: Optional[Array] = None) -> Array:
    """nn.layer_norm over ``axes`` (population variance); gamma/beta broadcast
    against the trailing dims."""
    return _normalize("nn.layer_norm", data, gamma, beta, axes, epsilon, out, rms=False)


def nn_rms_norm(data: Array, gamma: Optional[Array] = None, *, axes: Sequence[int] = (-1,),
                epsilon: float = 1e-5, out: Optional[Array] = None) -> Array:
    """nn.rms_norm: ``x / sqrt(mean(x^2) + eps) * gamma`` over ``axes``."""
    return _normalize("nn.rms_norm", data, gamma, None, axes, epsilon, out, rms=True)


# ---------------------------------------------------------------------------------
# reductions and permute


def _reduce_view(x: Array, ax: tuple[int, ...]) -> tuple[Array, int, int, int]:
    """(dense input, outer, r, inner) so the reduction runs over the middle dim.
    A contiguous run of axes is reduced in place; otherwise the kept axes are
    moved to the front first."""
    if ax == tuple(range(ax[0], ax[-1] + 1)):
        x = _dense(x)
        shape = x.shape
        return x, _prod(shape[:ax[0]]), _prod(shape[ax[0]:ax[-1] + 1]), _prod(shape[ax[-1] + 1:])
    keep = [d for d in range(x.ndim) if d not in ax]
    moved = permute_dims(x, axes=keep + list(ax))
    return moved, _prod(x.shape[d] for d in keep), _prod(x.shape[d] for d in ax), 1


def _reduce(op: str, code: int, data: Any, axes: Any, keepdims: bool, out: Optional[Array]) -> Array:
    data = _f32(op, "data", data)
    ax = _norm_axes(op, axes, data.ndim)
    shape = tuple(1 if d in ax else n for d, n in enumerate(data.shape) if keepdims or d not in ax)
    out = _out(op, out, shape)
    if not ax:  # axes=[] is the identity
        np.copyto(out, data)
        return out
    if out.size == 0:
        return out
    if data.size == 0 and code in (lib.LGK_REDUCE_MAX, lib.LGK_REDUCE_MIN):
        raise _error(op, f"cannot reduce a zero-size array {data.shape} (no identity)")
    x, outer, r, inner = _reduce_view(_detach(data, out), ax)
    _check_status(op, lib.lgk_reduce(code, outer, r, inner, _ptr(x), _ptr(out)))
    return out


def _make_reduce(op: str, code: int) -> Callable[..., Array]:
    def kernel(data: Array, *, axes: Optional[Sequence[int]] = None, keepdims: bool = False,
               out: Optional[Array] = None) -> Array:
        return _reduce(op, code, data, axes, keepdims, out)

    kernel.__name__ = kernel.__qualname__ = op + "_" if op != "mean" else op
    kernel.__doc__ = f"{op} over axes (None: all; []: identity; negative allowed)."
    return kernel


sum_ = _make_reduce("sum", lib.LGK_REDUCE_SUM)
mean = _make_reduce("mean", lib.LGK_REDUCE_MEAN)
max_ = _make_reduce("max", lib.LGK_REDUCE_MAX)
min_ = _make_reduce("min", lib.LGK_REDUCE_MIN)


def permute_dims(data: Array, *, axes: Optional[Sequence[int]] = None,
                 out: Optional[Array] = None) -> Array:
    """numpy.transpose into a new dense array (axes=None reverses)."""
    op = "permute_dims"
    data = _f32(op, "data", data)
    if axes is not None and not isinstance(axes, (list, tuple, np.ndarray)):
        raise _error(op, f"axes must be a list of ints or None, got {axes!r}")
    perm = list(range(data.ndim))[::-1] if axes is None else [_norm_axis(op, a, data.ndim) for a in axes]
    if sorted(perm) != list(range(data.ndim)):
        raise _error(op, f"axes {axes} is not a permutation of {data.ndim} dims")
    if data.ndim > MAX_NDIM:
        raise _error(op, f"rank {data.ndim} exceeds the supported maximum of {MAX_NDIM}")
    shape = tuple(data.shape[p] for p in perm)
    out = _out(op, out, shape)
    if out.size == 0:
        return out
    x = _strided(_detach(data, out))
    src_strides = [_estrides(x)[p] for p in perm]
    status = lib.lgk_strided_copy(len(shape), _i64(shape), _ptr(x), _extent(x), _i64(src_strides),
                                  _ptr(out), out.size)
    _check_status(op, status)
    return out


# ---------------------------------------------------------------------------------

KERNELS: dict[str, Callable[..., Array]] = {
    "matmul": matmul,
    "nn.linear": nn_linear,
    "nn.conv2d": nn_conv2d,
    "nn.max_pool2d": nn_max_pool2d,
    "nn.avg_pool2d": nn_avg_pool2d,
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
    "maximum": maximum,
    "minimum": minimum,
    "power": power,
    "negative": negative,
    "abs": abs_,
    "exp": exp,
    "log": log,
    "sqrt": sqrt,
    "rsqrt": rsqrt,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "erf": erf,
    "nn.relu": nn_relu,
    "nn.gelu": nn_gelu,
    "nn.silu": nn_silu,
    "nn.softmax": nn_softmax,
    "nn.log_softmax": nn_log_softmax,
    "nn.layer_norm": nn_layer_norm,
    "nn.rms_norm": nn_rms_norm,
    "sum": sum_,
    "mean": mean,
    "max": max_,
    "min": min_,
    "permute_dims": permute_dims,
}
