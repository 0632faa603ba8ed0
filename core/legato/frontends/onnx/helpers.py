"""Helpers the ONNX converter modules share: axes from an input or an attribute, the
identity of an empty reduction, casts that fold constants (one-hot encoding, which the
torch importer writes too, is in common.indexing)."""
from __future__ import annotations

import numpy as np

from ...ir import Const

__all__ = ["_axes", "_empty_identity", "cast_to"]


def cast_to(node, x, dtype: str):
    """A cast; a small constant to a float type is cast now."""
    if isinstance(x, Const) and dtype.startswith(("float", "bfloat")) and \
            x.data.dtype.kind in "fiu" and x.type.size <= 4096:
        # a constant to a float type (a pad value, a mask fill): IEEE rounding, as any
        # backend would, done now so operands that must be constant stay constant
        if dtype == "bfloat16":
            import ml_dtypes  # noqa: F401  (registers the dtype with numpy)
        return Const.of(x.data.astype(dtype))
    return node.call("cast", x, dtype=dtype)


def _axes(node, index: int = 1):
    """Axes from input `index` (newer opsets) or the `axes` attribute (older ones)."""
    axes = node.ints(index)
    return node.attr("axes") if axes is None else axes


def _empty_identity(value: float, dtype: str, shape) -> np.ndarray:
    if dtype == "bool":
        return np.full(shape, value > 0)
    if not dtype.startswith(("float", "bfloat")):
        info = np.iinfo(dtype)
        value = 0 if value == 0 else info.max if value > 0 else info.min
    return np.full(shape, value, dtype=dtype)
