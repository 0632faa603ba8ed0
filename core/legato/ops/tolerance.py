"""How far a float32 backend or decomposition may be from the reference kernels, per op.

The reference kernels (cpu_ref) compute floats in float64 and round once; a backend or a
decomposition computing in float32 rounds at every step. For a result `got` and the
reference `want` of one op, the bound is

    max |got - want| / max(max |want|, 1)  <=  error_bound(op)

over the finite elements (NaN equals NaN, an infinity must be matched exactly). Each op's
bound is its definition's `tolerance`: 0 for exact ops, a few float32 ulps for elementwise
ones, DEFAULT_ERROR where the definition gives none. Integer
and bool results are exact except for the ops in ROUNDING_OPS, which may be one step apart
where a float quotient lands on the other side of a rounding tie.

`input_limit(op, count)` is the magnitude of float32 inputs beyond which the decomposition
of the op may overflow where the reference does not (None: no such limit); `count` is the
number of elements the op reduces together. Checks should only compare values below it;
docs/ops.md explains each limit.
"""
from __future__ import annotations

import numpy as np

DEFAULT_ERROR = 1e-4  # reductions and contractions: the order of additions differs

ROUNDING_OPS = frozenset({
    "qnn.quantize", "qnn.requantize", "qnn.conv2d", "qnn.matmul", "qnn.linear", "qnn.add",
    "qnn.multiply", "qnn.global_avg_pool2d", "qnn.avg_pool2d", "qnn.sigmoid", "qnn.leaky_relu",
    "qnn.softmax"})

# Their decompositions sum squares of (x - mean) in the input dtype: float32 (max 3.4e38)
# overflows once count * (2 max|x|)**2 reaches it. The reference scales before squaring.
SUM_OF_SQUARES_OPS = frozenset({"variance", "nn.layer_norm", "nn.rms_norm", "nn.group_norm",
                                "nn.instance_norm"})
_FLOAT32_MAX = 3.4028234663852886e38


# machine epsilon of the narrower float dtypes, which a backend may compute in throughout
_EPSILON = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
LOW_PRECISION_ULPS = 32  # rounding at each step of a decomposition, in the result's ulps


def error_bound(op: str, dtype: str = "float32", registry=None) -> float:
    """The largest error relative to max(|reference|, 1) a result of `op` in `dtype` may
    have (float32 and float64 use the float32 table; float16 and bfloat16 allow
    LOW_PRECISION_ULPS ulps of their own where the op is not exact). The op's definition
    comes from `registry` (default: the current context's, which holds plugin ops)."""
    if registry is None:
        from ..plugins.context import context
        registry = context().registry
    opdef = registry.find(op)  # a plugin's op may be gone; unknown ops get the default
    bound = DEFAULT_ERROR if opdef is None or opdef.tolerance is None else opdef.tolerance
    return max(bound, _low_precision_bound(dtype)) if bound > 0 else bound


def result_tolerance(dtype: str) -> float:
    """The largest error relative to max |reference| a whole program's result in `dtype`
    may have against the reference kernels (`legato run`): DEFAULT_ERROR, and for float16
    and bfloat16 LOW_PRECISION_ULPS ulps of their own, as a backend computing in that
    dtype rounds every intermediate result to it (one float16 ulp is already 1e-3)."""
    return max(DEFAULT_ERROR, _low_precision_bound(dtype))


def _low_precision_bound(dtype: str) -> float:
    return LOW_PRECISION_ULPS * _EPSILON.get(str(dtype), 0.0)


def input_limit(op: str, count: int = 256) -> float | None:
    """The input magnitude up to which the float32 decomposition of `op`, reducing `count`
    elements together, cannot overflow (None: any)."""
    if op not in SUM_OF_SQUARES_OPS:
        return None
    return (_FLOAT32_MAX / max(count, 1)) ** 0.5 / 2 * 0.99


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the largest finite |want|; NaN matches NaN and an
    infinity matches itself."""
    if got.shape != want.shape:
        return float("inf")
    if not want.size:
        return 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    scale = max(float(np.max(np.abs(w[finite]))) if finite.any() else 0.0, 1e-30)
    with np.errstate(invalid="ignore"):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        diff = np.where(same, 0.0, np.abs(g - w))
    return float(np.max(np.where(np.isnan(diff), np.inf, diff))) / scale
