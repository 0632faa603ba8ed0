"""Elementwise ops whose result dtype differs from their input's, computed by numpy
into the planned buffers (bound once, so a run makes one call per step).

cast: of any dtype to any other numpy converts the same way as the op definition:
an assignment into the result buffer (integers wrap, to bool is `!= 0`, integers to
floats round to nearest). Float to integer saturates and maps NaN to 0, which numpy's
conversion does not: that cast stays on the reference backend (`cast_check`, the
capability's condition).

isnan: float tensors to bool, one numpy call (instead of its decomposition, not(x == x):
two steps and a temporary).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from .common import Array, error
from .elementwise import INTEGER_DTYPES

CAST_DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "int16", "int8",
                         "uint8", "bool"})


def _cast_refusal(source: str, target: str) -> Optional[str]:
    if source not in CAST_DTYPES or target not in CAST_DTYPES:
        return f"cast from {source} to {target}: dtypes {sorted(CAST_DTYPES)} only"
    if source.startswith("float") and target in INTEGER_DTYPES:
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
    out[...] = data
    return out


def _cast_bind(data: Array, *, out: Array, dtype: str = "float32") -> Callable[[], None]:
    out = _cast_out(data, dtype, out)
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
