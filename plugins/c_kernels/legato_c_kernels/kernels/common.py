"""What every kernel module shares: errors, threads, buffer conversions, attribute
checks, and prepared C calls (`CCall`, `bound`).

A kernel's implementation returns the C call it would make (`CCall`) instead of making
it. The public kernel runs that call at once; its ``bind`` runs the same implementation
in strict mode, where any input that would need a copy (not aligned, not contiguous,
overlapping the output) raises `Unbindable`, so a prepared call only ever reads and
writes the buffers it was bound to.
"""
from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

from legato.plugin_api import ExecutionError

from .._lib import ffi, lib

Array = np.ndarray
F32 = np.dtype(np.float32)
ITEM = F32.itemsize
MAX_NDIM: int = lib.LGK_MAX_NDIM


# ---------------------------------------------------------------------------------
# errors and threads


def error(op: str, message: str) -> ExecutionError:
    return ExecutionError(f"c_kernels {op}: {message}")


_STATUS_NAMES = {
    lib.LGK_ERR_NULL: "LGK_ERR_NULL", lib.LGK_ERR_SHAPE: "LGK_ERR_SHAPE",
    lib.LGK_ERR_OVERFLOW: "LGK_ERR_OVERFLOW", lib.LGK_ERR_ARG: "LGK_ERR_ARG",
    lib.LGK_ERR_NOMEM: "LGK_ERR_NOMEM", lib.LGK_ERR_THREAD: "LGK_ERR_THREAD",
}


def check_status(op: str, status: int) -> None:
    """Raise for a non-zero C status (validation here should make this rare)."""
    if status != lib.LGK_OK:
        name = _STATUS_NAMES.get(status, f"status {status}")
        text = ffi.string(lib.lgk_strerror(status)).decode()
        raise error(op, f"C kernel failed: {text} ({name})")


def _default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 2))


_DEFAULT_THREADS = _default_threads()


_applied_spin = [""]  # the LEGATO_SPIN_US text the C pool was last set from


def _apply_spin_setting() -> None:
    """Pass ``LEGATO_SPIN_US`` (how long idle pool workers poll before sleeping) to the
    C pool when it changed; unset restores the C default."""
    raw = os.environ.get("LEGATO_SPIN_US", "").strip()
    if raw == _applied_spin[0]:
        return
    try:
        value = int(raw) if raw else -1
    except ValueError:
        value = None
    if value is None or (raw and value < 0) or lib.lgk_set_pool_spin_us(value) != 0:
        raise ExecutionError("c_kernels: LEGATO_SPIN_US must be an integer number of "
                             f"microseconds from 0 to 1000000, got {raw!r}")
    _applied_spin[0] = raw


def num_threads() -> int:
    """Thread count for GEMM-based kernels, from ``LEGATO_NUM_THREADS``."""
    _apply_spin_setting()
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


def release_scratch() -> None:
    """Free the scratch buffers the C side keeps for reuse between calls (a few
    MiB). Only call it while no kernel is running in another thread."""
    lib.lgk_free_scratch()


# ---------------------------------------------------------------------------------
# prepared calls


class Unbindable(Exception):
    """Raised in strict mode: this call needs a temporary (a copy of an input, or
    several C calls), so it cannot be prepared once on fixed buffers."""


OUT = "out"  # the slot role of the result buffer


class CCall(NamedTuple):
    """One C call of a kernel: ``fn(*args)`` returning an lgk_status. ``keep`` holds
    the arrays the pointer arguments point into (cffi casts do not). ``slots`` says
    which arguments are the data pointers of which arrays: (role, argument position)
    with role an input's position or OUT; a caller may pass another C-contiguous array
    of the same shape there (a prepared call made without copies points at the first
    element of each array it reads or writes)."""

    op: str
    fn: Any
    args: tuple
    keep: tuple = ()
    slots: tuple = ()

    def run(self) -> None:
        status = self.fn(*self.args)
        if status:
            check_status(self.op, status)

    def prepared(self) -> Callable[[], None]:
        """A zero-argument callable making this call (marked ``direct``)."""
        op, fn, args = self.op, self.fn, self.args

        def run() -> None:
            status = fn(*args)
            if status:
                check_status(op, status)
        run.direct, run.call, run.fixed = True, self, True  # fixed: its arguments never change
        return run


def _nothing() -> None:
    """The prepared call of an empty result: nothing to compute."""


_nothing.direct = True


def run_call(out: Array, call: Optional[CCall]) -> Array:
    """Make a kernel's planned call (if any) and return its result."""
    if call is not None:
        call.run()
    return out


def bound(kernel: Callable, plan: Callable) -> Callable:
    """Attach ``kernel.bind(*inputs, out=..., **attrs)``: a zero-argument callable that
    computes the kernel into ``out`` on every call. ``plan(*inputs, out=, strict=True,
    **attrs)`` returns (out, the kernel's C call or None for an empty result); where it
    raises Unbindable the callable runs the whole kernel instead. Errors of the inputs
    and attributes are raised by bind itself."""
    def bind(*inputs: Any, out: Array, **attrs: Any) -> Callable[[], None]:
        try:
            _, call = plan(*inputs, out=out, strict=True, **attrs)
        except Unbindable:
            return functools.partial(kernel, *inputs, out=out, **attrs)
        return _nothing if call is None else call.prepared()
    kernel.bind = bind
    return kernel


def bind_generic(kernel: Callable, *inputs: Any, out: Array, **attrs: Any) -> Callable[[], None]:
    """A kernel's bind, or for a kernel without one a call of the kernel that copies its
    result into ``out`` (for kernels without an ``out`` parameter)."""
    bind = getattr(kernel, "bind", None)
    if bind is not None:
        return bind(*inputs, out=out, **attrs)

    def run() -> None:
        np.copyto(out, kernel(*inputs, **attrs))
    return run


# ---------------------------------------------------------------------------------
# buffers


def f32(op: str, name: str, x: Any) -> Array:
    """The input as a float32 ndarray; anything else is an error (no silent casts)."""
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise error(op, f"{name} must be a float32 ndarray, got {type(x).__name__}")
    if x.dtype != F32:
        raise error(op, f"{name} must have dtype float32, got {x.dtype}")
    return x


def opt_f32(op: str, name: str, x: Any) -> Optional[Array]:
    return None if x is None else f32(op, name, x)


def dense(x: Array, strict: bool = False) -> Array:
    """C-contiguous and aligned (copies only when needed; never in strict mode)."""
    flags = x.flags
    if flags.c_contiguous and flags.aligned:
        return x
    if strict:
        raise Unbindable
    return np.require(x, F32, ["C", "A"])


def strided(x: Array, strict: bool = False) -> Array:
    """A view the C kernels can walk with element strides: aligned, strides >= 0
    and whole elements. Anything else (negative or odd strides) is copied."""
    if x.flags.aligned and all(s >= 0 and s % ITEM == 0 for s in x.strides):
        return x
    return dense(x, strict)


def estrides(x: Array) -> list[int]:
    return [s // ITEM for s in x.strides]


def extent(x: Array) -> int:
    """Floats spanned by a strided view (what the C side may touch)."""
    if x.size == 0:
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(x.shape, estrides(x)))


def ptr(x: Array) -> Any:
    """Float pointer to x's first element. from_buffer (fast, keeps x alive)
    needs a contiguous buffer; for strided views the caller keeps x alive."""
    if x.flags.c_contiguous:
        return ffi.from_buffer("float[]", x)
    return ffi.cast("float *", x.ctypes.data)


def opt_ptr(x: Optional[Array]) -> Any:
    return ffi.NULL if x is None else ptr(x)


def i64(values: Sequence[int]) -> Any:
    return ffi.new("int64_t[]", [int(v) for v in values] or [0])


def out_array(op: str, out: Optional[Array], shape: tuple[int, ...], dtype: Any = F32) -> Array:
    """A fresh result array, or the validated caller-provided one."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if dtype == F32:
        out = f32(op, "out", out)
    elif not isinstance(out, np.ndarray) or out.dtype != dtype:
        raise error(op, f"out must be a {np.dtype(dtype)} ndarray, got "
                        f"{getattr(out, 'dtype', type(out).__name__)}")
    if out.shape != tuple(shape):
        raise error(op, f"out has shape {out.shape}, expected {tuple(shape)}")
    if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise error(op, "out must be a writeable, aligned, C-contiguous array")
    return out


def detach(x: Optional[Array], out: Array, in_place_ok: bool = False,
           strict: bool = False) -> Optional[Array]:
    """Copy an input that overlaps ``out`` unless it is exactly ``out`` and the
    kernel supports in-place operation (in strict mode: Unbindable instead)."""
    if x is None or not np.may_share_memory(x, out):
        return x
    exact = (x.__array_interface__["data"][0] == out.__array_interface__["data"][0]
             and x.shape == out.shape and x.flags.c_contiguous)
    if in_place_ok and exact:
        return x
    if strict:
        raise Unbindable
    return x.copy()


# ---------------------------------------------------------------------------------
# attributes and shapes


def norm_axis(op: str, axis: Any, ndim: int) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise error(op, f"axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise error(op, f"axis {axis} is out of range for rank {ndim}")
    return int(axis) % ndim


def norm_axes(op: str, axes: Any, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative, duplicate-free axes (None means all)."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        axes = [axes]
    norm = [norm_axis(op, a, ndim) for a in axes]
    if len(set(norm)) != len(norm):
        raise error(op, f"duplicate axes {list(axes)}")
    return tuple(sorted(norm))


def ints(op: str, name: str, value: Any, length: int, minimum: int) -> list[int]:
    if isinstance(value, (int, np.integer)) or value is None:
        raise error(op, f"{name} must be a list of {length} ints, got {value!r}")
    items = list(value)
    ok = len(items) == length and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in items)
    if not ok:
        raise error(op, f"{name} must be a list of {length} ints, got {value!r}")
    if any(v < minimum for v in items):
        raise error(op, f"{name} values must be >= {minimum}, got {items}")
    return [int(v) for v in items]


def number(op: str, name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise error(op, f"{name} must be a number, got {value!r}")
    return float(value)


def prod(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise error(op, f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None
