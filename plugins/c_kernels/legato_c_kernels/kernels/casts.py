"""Elementwise ops whose result dtype differs from their input's, computed by numpy
into the planned buffers (bound once, so a run makes one call per step).

cast: of any dtype to any other numpy converts the same way as the op definition:
an assignment into the result buffer (integers wrap, to bool is `!= 0`, integers to
floats round to nearest). Float to integer truncates, saturates and maps NaN to 0, which
numpy's conversion does not: float32 to int8/uint8 (the output stage of decomposed int8
ops) runs in C (csrc/qelementwise.c, lgk_cast_f32_to_byte), other float-to-integer casts
stay on the reference backend (`cast_check`, the capability's condition).

isnan: float tensors to bool, one numpy call (instead of its decomposition, not(x == x):
two steps and a temporary).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import Array, check_status, error, num_threads
from .elementwise import INTEGER_DTYPES

CAST_DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "int16", "int8",
                         "uint8", "bool"})


# saturating casts computed in C: (source, target) -> the C type code
_C_CASTS = {("float32", "int8"): lib.LGK_QTYPE_INT8, ("float32", "uint8"): lib.LGK_QTYPE_UINT8}


def _cast_refusal(source: str, target: str) -> Optional[str]:
    if source not in CAST_DTYPES or target not in CAST_DTYPES:
        return f"cast from {source} to {target}: dtypes {sorted(CAST_DTYPES)} only"
    if source.startswith("float") and target in INTEGER_DTYPES and \
            (source, target) not in _C_CASTS:
        return f"cast from {source} to {target} saturates: not numpy's conversion"
    return None


def cast_check(call) -> Optional[str]:
    """Legality of a cast here: None, or why not (float to integer saturates, which
    numpy's conversion does not: the reference backend computes it; float to bool is
    numpy's `!= 0`)."""
    return _cast_refusal(str(call.inputs[0].dtype), str(call.attrs.get("dtype")))


def _cast_out(data: Any, dtype: Any, out: Optional[Array]) -> Array:
    if not isinstance(data, np.ndarray):
        raise error("cast", f"data must be an ndarray, got {type(data).__name__}")
    target = str(dtype)
    reason = _cast_refusal(str(data.dtype), target)
    if reason is not None:
        raise error("cast", reason)
    if out is None:
        return np.empty(data.shape, target)
    if not isinstance(out, np.ndarray) or out.shape != data.shape or out.dtype != target:
        raise error("cast", f"out must be a {target} array of shape {data.shape}")
    return out


def cast(data: Array, *, dtype: str = "float32", out: Optional[Array] = None) -> Array:
    """cast: numpy's conversion (integers wrap, to bool is != 0); not float to integer."""
    out = _cast_out(data, dtype, out)
    if (str(data.dtype), str(dtype)) in _C_CASTS:
        _c_cast(np.ascontiguousarray(data), out)
        return out
    out[...] = data
    return out


def _c_cast(data: Array, out: Array) -> None:
    if out.size == 0:
        return
    span = data.shape[-1] if data.ndim else 1
    status = lib.lgk_cast_f32_to_byte(
        _C_CASTS[(str(data.dtype), str(out.dtype))], data.size // span, span,
        ffi.cast("float *", data.ctypes.data), data.size, ffi.cast("void *", out.ctypes.data),
        out.size, num_threads())
    if status:
        check_status("cast", status)


def _cast_bind(data: Array, *, out: Array, dtype: str = "float32") -> Callable[[], None]:
    out = _cast_out(data, dtype, out)
    if (str(data.dtype), str(dtype)) in _C_CASTS:
        if not (data.flags.c_contiguous and out.flags.c_contiguous):
            return functools.partial(cast, data, dtype=dtype, out=out)
        return functools.partial(_c_cast, data, out)
    return functools.partial(out.__setitem__, Ellipsis, data)  # an assignment: no kwargs


cast.bind = _cast_bind


def _isnan_out(data: Any, out: Optional[Array]) -> Array:
    if not isinstance(data, np.ndarray) or data.dtype.kind != "f":
        raise error("isnan", f"data must be a float ndarray, got "
                             f"{getattr(data, 'dtype', type(data).__name__)}")
    if out is None:
        return np.empty(data.shape, np.bool_)
    if not isinstance(out, np.ndarray) or out.shape != data.shape or out.dtype != np.bool_:
        raise error("isnan", f"out must be a bool array of shape {data.shape}")
    return out


def isnan(data: Array, *, out: Optional[Array] = None) -> Array:
    """isnan: True where data is NaN."""
    return np.isnan(data, _isnan_out(data, out))


def _isnan_bind(data: Array, *, out: Array) -> Callable[[], None]:
    return functools.partial(np.isnan, data, _isnan_out(data, out))


isnan.bind = _isnan_bind
KERNELS: dict[str, Callable[..., Array]] = {"cast": cast, "isnan": isnan}
