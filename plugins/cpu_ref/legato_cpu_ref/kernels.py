"""numpy reference kernels of the cpu_ref backend: one per operator of docs/ops.md.

A kernel is called as ``kernel(*inputs, **attrs)`` with every attribute present and returns
a fresh C-contiguous array (a tuple of them for ``split``) in the dtype the op reference
gives. These kernels are the yardstick other backends and every decomposition are checked
against, so they favour the plainest correct formulation over speed: floats are computed
in float64 and cast back once, integers keep their own dtype (wrap-around included).

``KERNELS`` maps every op name except ``custom`` (handled by the core) to its kernel.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from legato.plugin_api import (LegatoError, channel_view, norm_axes, norm_axis, resolve_reshape,
                              slice_params, split_sizes, window)

from .indexing import KERNELS as INDEXING_KERNELS, arg_extreme, wrapped_indices
from .quantized import KERNELS as QUANTIZED_KERNELS
from .spectral import KERNELS as SPECTRAL_KERNELS

# --- shared helpers -----------------------------------------------------------------------


def _fresh(x, dtype=None) -> np.ndarray:
    """An owned C-contiguous array: the executor may reuse buffers, so never hand out views."""
    return np.array(x, dtype=dtype, order="C", copy=True)


def _acc(x: np.ndarray) -> np.ndarray:
    """The array in the precision a kernel computes in: float64 for floats, else as is."""
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _axis(axis, ndim: int, what: str = "axis") -> int:
    return norm_axis(int(axis), ndim, what)


def _axes(axes, ndim: int) -> tuple[int, ...]:
    """Normalized axes in the given order; None means every axis."""
    return norm_axes(None if axes is None else [int(a) for a in axes], ndim,
                     keep_order=True)


def _ints(values, count: int, name: str, minimum: int) -> tuple[int, ...]:
    values = tuple(int(v) for v in values)
    if len(values) != count or any(v < minimum for v in values):
        raise LegatoError(f"{name} must be {count} ints >= {minimum}, got {list(values)}")
    return values


def _choice(table: dict, key, name: str):
    if key not in table:
        raise LegatoError(f"unknown {name} {key!r}; expected one of {', '.join(table)}")
    return table[key]


def _along_axis(param, ndim: int, axis: int) -> np.ndarray:
    """A scalar or 1-D per-channel parameter, shaped to broadcast along `axis`."""
    param = np.asarray(param)
    if param.ndim == 0 or param.shape == (1,):  # one element: per-tensor, as onnxruntime
        return param.reshape(())
    if param.ndim != 1:
        raise LegatoError(f"parameter must be a scalar or 1-D, got shape {list(param.shape)}")
    return param.reshape(channel_view(param.shape[0], ndim, int(axis)))


# --- elementwise --------------------------------------------------------------------------


def _truncating_divide(a, b):
    """Integer division rounding toward zero (C semantics); numpy's floor_divide floors."""
    with np.errstate(divide="ignore"):  # x/0 is undefined for integers; numpy gives 0
        quotient = np.floor_divide(a, b)
        inexact = np.remainder(a, b) != 0
    return quotient + (inexact & ((a < 0) != (b < 0)))


def _divide(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return _truncating_divide(a, b)
    return np.divide(a, b)


def _power(a, b):
    if not np.issubdtype(np.result_type(a, b), np.integer):
        return np.power(a, b)
    # numpy refuses negative integer exponents; a ** -n is the truncated quotient
    # 1 / a ** n, as integer division defines it: 1 for a == 1, +-1 for a == -1, else 0.
    negative = b < 0
    powers = np.power(a, np.where(negative, 0, b))
    odd = np.remainder(b, 2) == 1
    reciprocals = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, reciprocals, powers)


def _sigmoid(x):
    # exp only ever sees -|x|, so it cannot overflow at either tail.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# numpy has no erf; math.erf and math.erfc are accurate to a few ulp of float64.
_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])

# Both forms avoid 1 + erf(.) and 1 + tanh(.), which cancel to 0 in the left tail:
# 1 + erf(z) = erfc(-z), and 1 + tanh(u) = 2 sigmoid(2u).
_GELU = {
    "none": lambda x: 0.5 * x * _erfc(-x / math.sqrt(2)),
    "tanh": lambda x: x * _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)),
}

def _lgamma(x):
    """log |gamma(x)|: +inf at the poles (0 and the negative integers), where math.lgamma
    raises."""
    poles = (x <= 0) & (x == np.floor(x))
    return np.where(poles, np.inf, _lgamma_finite(np.where(poles, 1.0, x)))


_lgamma_finite = np.vectorize(math.lgamma, otypes=[np.float64])


def _erfcx(x):
    """exp(x^2) erfc(x) in float64: directly up to 25, then the asymptotic series (where
    erfc underflows), whose terms are below 1e-16 there."""
    big = x > 25
    with np.errstate(over="ignore", invalid="ignore"):
        direct = np.exp(x * x) * _erfc(np.where(big, 0.0, x))
    z = np.where(big, x, 25.0)
    series = (1 - 1 / (2 * z * z) + 3 / (4 * z ** 4) - 15 / (8 * z ** 6)) / (z * math.sqrt(math.pi))
    return np.where(big, series, direct)


def _digamma(x):
    """gamma'(x) / gamma(x): the recurrence up to x + 10, the asymptotic series there (five
    Bernoulli terms: float64-exact), the reflection below 1/2; -inf at +0, +inf at -0,
    NaN at the negative integers."""
    reflect = x < 0.5
    y = np.where(reflect, 1 - x, x)
    z = y + 10
    inv2 = 1 / (z * z)
    series = np.log(z) - 0.5 / z - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (
        1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    value = series - sum(1 / (y + k) for k in range(10))
    near = x - np.round(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(reflect, value - np.pi / np.tan(np.pi * near), value)
    value = np.where((near == 0) & (x < 0), np.nan, value)
    return np.where(x == 0, np.where(np.signbit(x), np.inf, -np.inf), value)


def _remainder(a, b):
    """Python's `%`: the sign of the divisor (numpy's remainder; 0 for integer x % 0)."""
    return np.remainder(a, b)


def _isinf(x, detect_positive=True, detect_negative=True):
    if x.dtype.kind != "f":
        return np.zeros(x.shape, bool)
    return (np.isposinf(x) & detect_positive) | (np.isneginf(x) & detect_negative)


def _softplus(x):
    return np.logaddexp(x, 0.0)


_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _divide,
    "power": _power, "maximum": np.maximum, "minimum": np.minimum, "matmul": np.matmul,
    "fmod": np.fmod, "remainder": _remainder, "atan2": np.arctan2, "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
}
_PREDICATES = {
    "equal": np.equal, "less": np.less, "greater": np.greater, "not_equal": np.not_equal,
    "greater_equal": np.greater_equal, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_not": np.logical_not,
    "logical_xor": np.logical_xor, "isnan": np.isnan,
}
_UNARY = {
    "negative": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh, "sigmoid": _sigmoid, "erf": _erf,
    "round": np.rint, "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sign": lambda x: x.copy() if x.dtype == np.bool_ else np.sign(x), "trunc": np.trunc, "bitwise_not": np.invert, "expm1": np.expm1,
    "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "exp2": np.exp2, "tan": np.tan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "erfc": _erfc, "lgamma": _lgamma, "digamma": _digamma, "erfcx": _erfcx,
    "nn.relu": lambda x: np.maximum(x, 0), "nn.silu": lambda x: x * _sigmoid(x),
    "nn.softsign": lambda x: x / (1 + np.abs(x)), "nn.mish": lambda x: x * np.tanh(_softplus(x)),
    "nn.hardswish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}


def _activation(fn):
    """Kernel of an activation with float attributes: fn(x, **attrs) in float64."""
    def kernel(data, **attrs):
        return _fresh(fn(_f64(data), **attrs), data.dtype)
    return kernel


def _elu(x, alpha=1.0, scale=1.0):
    return np.where(x > 0, x, alpha * np.expm1(x / scale))


def _softplus_beta(x, beta=1.0, threshold=None):
    y = _softplus(beta * x) / beta
    return y if threshold is None else np.where(beta * x > threshold, x, y)


def _shrink(x, lambd=0.5, bias=0.0):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0.0 * x))


_ACTIVATIONS = {
    "nn.elu": _elu,
    "nn.celu": lambda x, alpha=1.0: _elu(x, alpha, alpha),
    "nn.selu": lambda x, alpha=1.0, gamma=1.0: gamma * _elu(x, alpha),
    "nn.softplus": _softplus_beta,
    "nn.hardsigmoid": lambda x, alpha=0.2, beta=0.5: np.clip(alpha * x + beta, 0, 1),
    "nn.thresholded_relu": lambda x, alpha=1.0: np.where(x > alpha, x, 0.0),
    "nn.shrink": _shrink,
}


def _mirror(v, low2, high2):
    """v reflected into [low2 / 2, high2 / 2] (PyTorch's reflect_coordinates)."""
    if low2 == high2:
        return np.zeros_like(v)
    low, span = low2 / 2, (high2 - low2) / 2
    v = np.abs(v - low)
    extra, flips = np.fmod(v, span), np.floor(v / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def grid_sample(data, grid, *, mode="bilinear", padding_mode="zeros", align_corners=False):
    """Samples of (N, C, [D,] H, W) data at the grid's normalized points, in float64."""
    x, g = np.moveaxis(_f64(data), 1, -1), _f64(grid)  # x: (N, *sizes, C)
    sizes, batch = x.shape[1:-1], np.arange(x.shape[0]).reshape((-1,) + (1,) * (g.ndim - 2))
    coords = [g[..., len(sizes) - 1 - i] for i in range(len(sizes))]  # in the data's order
    coords = [(v + 1) / 2 * (n - 1) if align_corners else ((v + 1) * n - 1) / 2
              for v, n in zip(coords, sizes)]

    def pad(v, n):
        if padding_mode == "reflection":
            v = _mirror(v, 0, 2 * (n - 1)) if align_corners else _mirror(v, -1, 2 * n - 1)
        return v if padding_mode == "zeros" else np.clip(v, 0, n - 1)

    def value(points):  # (N, *out, C); zeros outside
        inside = np.all([(p >= 0) & (p <= n - 1) for p, n in zip(points, sizes)], axis=0)
        index = tuple(np.clip(p, 0, n - 1).astype(np.int64) for p, n in zip(points, sizes))
        return np.where(inside[..., None], x[(batch,) + index], 0.0)

    if mode == "nearest":
        out = value([np.rint(pad(v, n)) for v, n in zip(coords, sizes)])
    elif mode == "bilinear":
        coords = [pad(v, n) for v, n in zip(coords, sizes)]
        out = 0.0
        for corner in np.ndindex(*(2,) * len(sizes)):
            weight = np.prod([v - np.floor(v) if k else 1 - (v - np.floor(v))
                              for v, k in zip(coords, corner)], axis=0)
            out = out + weight[..., None] * value([np.floor(v) + k
                                                   for v, k in zip(coords, corner)])
    else:  # bicubic: Keys' kernel, a = -0.75, padding per tap
        def keys(d):
            d, a = np.abs(d), -0.75
            return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                            ((a * d - 5 * a) * d + 8 * a) * d - 4 * a)
        (y, xs), out = coords, 0.0
        for j, i in np.ndindex(4, 4):
            ty, tx = np.floor(y) + j - 1, np.floor(xs) + i - 1
            weight = keys(y - ty) * keys(xs - tx)
            out = out + weight[..., None] * value([pad(ty, sizes[0]), pad(tx, sizes[1])])
    return _fresh(np.moveaxis(out, -1, 1), data.dtype)


def isinf(data, *, detect_positive=True, detect_negative=True):
    return _fresh(_isinf(data, detect_positive, detect_negative), np.bool_)


def prelu(data, slope):
    x = _acc(data)
    return _fresh(np.where(x < 0, x * _acc(slope), x), data.dtype)


def _binary(fn):
    """Kernel for fn(a, b); the result keeps a's dtype (so `power` does too)."""
    def kernel(a, b):
        return _fresh(fn(_acc(a), _acc(b)), a.dtype)
    return kernel


def _predicate(fn):
    def kernel(*operands):
        return _fresh(fn(*operands), np.bool_)
    return kernel


def _unary(fn):
    def kernel(a):
        return _fresh(fn(_acc(a)), a.dtype)
    return kernel


def where(cond, x, y):
    return _fresh(np.where(cond, x, y), x.dtype)


def cast(data, *, dtype="float32"):
    if dtype == "bfloat16":  # numpy knows bfloat16 only once ml_dtypes is imported
        try:
            import ml_dtypes  # noqa: F401
        except ImportError as err:
            raise LegatoError("casting to bfloat16 needs the ml_dtypes package") from err
    try:
        target = np.dtype(dtype)
    except TypeError as err:
        raise LegatoError(f"unknown dtype {dtype!r}") from err
    if target.kind not in "biuf" and target.name != "bfloat16":
        raise LegatoError(f"cannot cast to {dtype!r}")
    if target.kind in "iu" and data.dtype.kind not in "biu":
        return _fresh(_float_to_int(data, target), target)
    # astype truncates floats toward zero, maps to bool as `!= 0` and wraps integers.
    return _fresh(data.astype(target), target)


def _float_to_int(data, target):
    """Truncate toward zero, saturate to the integer range, NaN to 0 (numpy leaves values
    out of range undefined and platform dependent)."""
    info = np.iinfo(target)
    x = np.trunc(_f64(data))
    too_low = x < info.min  # the bounds are powers of two: exact in float64
    too_high = x >= 2.0 ** (info.bits - (info.min < 0))
    inside = np.where(too_low | too_high | np.isnan(x), 0, x).astype(target)
    return np.where(too_high, info.max, np.where(too_low, info.min, inside)).astype(target)


def leaky_relu(data, *, alpha=0.01):
    x = _acc(data)
    return _fresh(np.where(x >= 0, x, alpha * x), data.dtype)


def clip(data, *, min=None, max=None):  # noqa: A002 - the op's attribute names
    x = _acc(data)
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return _fresh(x, data.dtype)


def gelu(data, *, approximate="none"):
    return _fresh(_choice(_GELU, approximate, "gelu approximation")(_acc(data)), data.dtype)


# --- reductions and softmax ---------------------------------------------------------------

# Integer sums are computed in int64 and cast back, which wraps exactly like the dtype would;
# an integer mean truncates like the decomposition's integer divide.
_REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod}


def _reduction(fn):
    def kernel(data, *, axes=None, keepdims=False):
        return _fresh(fn(_acc(data), axis=_axes(axes, data.ndim), keepdims=keepdims),
                      data.dtype)
    return kernel


def variance(data, *, axes=None, keepdims=False, unbiased=False):
    x, axes = _f64(data), _axes(axes, data.ndim)
    count = math.prod(data.shape[a] for a in axes)
    centered = x - np.mean(x, axis=axes, keepdims=True)
    squares = np.sum(np.square(centered), axis=axes, keepdims=keepdims)
    # unbiased over one element is 0 / 0: NaN, as numpy's var says with a warning
    return _fresh(squares / np.float64(count - 1 if unbiased else count), data.dtype)


def argmax(data, *, axis=0, keepdims=True, select_last_index=False):
    return arg_extreme(np.argmax, data, axis, keepdims, select_last_index)


def _shifted(x, axis):
    # Subtracting the max keeps exp from overflowing and does not change the result.
    if x.size == 0:  # nothing to normalize; an empty axis has no max
        return x
    return x - np.max(x, axis=axis, keepdims=True)


def _softmax(x, axis):
    e = np.exp(_shifted(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    s = _shifted(x, axis)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


_SOFTMAXES = {"nn.softmax": _softmax, "nn.log_softmax": _log_softmax}


def _along_one_axis(fn):
    def kernel(data, *, axis=-1):
        return _fresh(fn(_f64(data), _axis(axis, data.ndim)), data.dtype)
    return kernel


# --- data movement ------------------------------------------------------------------------


def reshape(data, *, shape):
    return _fresh(data.reshape(resolve_reshape(data.shape, [int(d) for d in shape])))


def permute_dims(data, *, axes=None):
    order = tuple(reversed(range(data.ndim))) if axes is None else _axes(axes, data.ndim)
    if len(order) != data.ndim:
        raise LegatoError(f"axes {list(axes)} are not a permutation of {data.ndim} dims")
    return _fresh(data.transpose(order))


def broadcast_to(data, *, shape):
    return _fresh(np.broadcast_to(data, tuple(int(d) for d in shape)))


def concat(*data, axis=0):
    if not data:
        raise LegatoError("concat needs at least one input")
    return _fresh(np.concatenate(data, axis=_axis(axis, data[0].ndim)), data[0].dtype)


def split(data, *, sections=2, axis=0):
    axis = _axis(axis, data.ndim)
    bounds = np.cumsum(split_sizes(data.shape[axis], sections))[:-1]
    return tuple(_fresh(part) for part in np.split(data, bounds, axis=axis))


def strided_slice(data, *, begin, end, strides=None, axes=None):
    params = slice_params(data.shape, {"begin": begin, "end": end, "strides": strides,
                                       "axes": axes})
    return _fresh(data[tuple(p.as_slice() for p in params)])


def take(data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    return _fresh(np.take(data, wrapped_indices(indices, data.shape[axis]), axis=axis))


_PAD_MODES = ("constant", "reflect", "edge")


def pad(data, *, pads, value=0.0, mode="constant"):
    if mode not in _PAD_MODES:
        raise LegatoError(f"unknown pad mode {mode!r}; expected one of {', '.join(_PAD_MODES)}")
    rank = data.ndim
    pads = _ints(pads, 2 * rank, "pads", 0)
    if rank == 0:  # nothing to pad (numpy reads an empty pad_width as floats)
        return _fresh(data)
    widths = list(zip(pads[:rank], pads[rank:]))
    # numpy would reflect repeatedly; ONNX runtimes reject a reflection wider than the dim.
    if mode == "reflect" and any(max(w) >= d for w, d in zip(widths, data.shape) if any(w)):
        raise LegatoError(f"reflect pads {list(pads)} must be smaller than dims {data.shape}")
    options = {"constant_values": value} if mode == "constant" else {}
    return _fresh(np.pad(data, widths, mode=mode, **options), data.dtype)


def squeeze(data, *, axes=None):
    if axes is None:
        axes = tuple(i for i, d in enumerate(data.shape) if d == 1)
    else:
        axes = _axes(axes, data.ndim)
        if any(data.shape[a] != 1 for a in axes):
            raise LegatoError(f"cannot squeeze axes {list(axes)} of shape {list(data.shape)}")
    return _fresh(np.squeeze(data, axis=axes))


def expand_dims(data, *, axes):
    # Unsqueeze axes index the output, whose rank grows by one per axis.
    return _fresh(np.expand_dims(data, _axes(axes, data.ndim + len(axes))))


def flatten(data, *, axis=1):
    rank = data.ndim
    if not -rank <= axis <= rank:  # axis == rank is allowed: (prod(shape), 1)
        raise LegatoError(f"flatten axis {axis} is out of range [{-rank}, {rank}]")
    axis = axis + rank if axis < 0 else axis
    return _fresh(data.reshape(math.prod(data.shape[:axis]), math.prod(data.shape[axis:])))


# --- normalization and linear -------------------------------------------------------------


def _scale_of(x, axes):
    """Per group the largest magnitude (1 where it is 0 or not finite): dividing by it
    first keeps squares of float64 inputs near the top of the range from overflowing."""
    if x.size == 0:
        return np.ones((1,) * x.ndim)
    peak = np.max(np.abs(x), axis=axes, keepdims=True)
    return np.where((peak > 0) & np.isfinite(peak), peak, 1.0)


def _standardize(x, axes, epsilon):
    """(x - mean) / sqrt(var + eps) over `axes`, with the population variance."""
    if x.size == 0:  # empty result; an empty axis has no mean
        return x
    scale = _scale_of(x, axes)
    y = x / scale
    mean = np.mean(y, axis=axes, keepdims=True)
    var = np.mean(np.square(y - mean), axis=axes, keepdims=True)
    return (y - mean) / np.sqrt(var + epsilon / scale**2)


def _scale_shift(y, gamma, beta, channel_axis=None):
    """y * gamma + beta, skipping absent params; per channel of `channel_axis` if given,
    otherwise broadcast against the trailing dims."""
    def shaped(param):
        param = _f64(param)
        return param if channel_axis is None else _along_axis(param, y.ndim, channel_axis)
    if gamma is not None:
        y = y * shaped(gamma)
    if beta is not None:
        y = y + shaped(beta)
    return y


def _channels(data) -> int:
    if data.ndim < 2:
        raise LegatoError(f"data must be (N, C, ...), got shape {list(data.shape)}")
    return data.shape[1]


def layer_norm(data, gamma=None, beta=None, *, axes=(-1,), epsilon=1e-5):
    y = _standardize(_f64(data), _axes(axes, data.ndim), epsilon)
    return _fresh(_scale_shift(y, gamma, beta), data.dtype)


def rms_norm(data, gamma=None, *, axes=(-1,), epsilon=1e-5):
    x, axes = _f64(data), _axes(axes, data.ndim)
    if x.size == 0:
        return _fresh(x, data.dtype)
    scale = _scale_of(x, axes)
    y = x / scale
    mean_square = np.mean(np.square(y), axis=axes, keepdims=True)
    return _fresh(_scale_shift(y / np.sqrt(mean_square + epsilon / scale**2), gamma, None),
                  data.dtype)


def batch_norm(data, gamma, beta, moving_mean, moving_var, *, axis=1, epsilon=1e-5):
    axis = _axis(axis, data.ndim)
    mean, var = (_along_axis(_f64(p), data.ndim, axis) for p in (moving_mean, moving_var))
    y = (_f64(data) - mean) / np.sqrt(var + epsilon)
    return _fresh(_scale_shift(y, gamma, beta, axis), data.dtype)


def group_norm(data, gamma, beta, *, num_groups=1, epsilon=1e-5):
    channels = _channels(data)
    if num_groups <= 0 or channels % num_groups:
        raise LegatoError(f"{channels} channels do not split into {num_groups} groups")
    grouped = _f64(data).reshape(data.shape[0], num_groups, channels // num_groups,
                                 *data.shape[2:])
    y = _standardize(grouped, tuple(range(2, grouped.ndim)), epsilon).reshape(data.shape)
    return _fresh(_scale_shift(y, gamma, beta, 1), data.dtype)


def instance_norm(data, gamma, beta, *, epsilon=1e-5):
    _channels(data)
    y = _standardize(_f64(data), tuple(range(2, data.ndim)), epsilon)
    return _fresh(_scale_shift(y, gamma, beta, 1), data.dtype)


def linear(data, weight, bias=None):
    y = _acc(data) @ _acc(weight).T
    if bias is not None:
        y = y + _acc(bias)
    return _fresh(y, data.dtype)


# --- convolution and pooling --------------------------------------------------------------

# The axis orders that read each layout as NCHW (data) or OIHW (weight).
_DATA_LAYOUTS = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 3, 1, 2)}
_KERNEL_LAYOUTS = {"OIHW": (0, 1, 2, 3), "HWIO": (3, 2, 0, 1), "OHWI": (0, 3, 1, 2)}


def _canonical(array, layouts: dict, layout: str, name: str):
    """`array` transposed to the canonical layout, and the axis order that transposes back."""
    order = _choice(layouts, layout, name)
    if array.ndim != 4:
        raise LegatoError(f"{layout} tensor must be 4-D, got shape {list(array.shape)}")
    return array.transpose(order), tuple(int(i) for i in np.argsort(order))


def _windows(x, win):
    """Sliding windows (N, C, OH, OW, KH, KW) over the spatial axes of NCHW x, padded by
    at least win.padding."""
    (sh, sw), (dh, dw), (oh, ow) = win.strides, win.dilation, win.out
    windows = sliding_window_view(x, win.span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    return windows[:, :, :oh, :ow]


def _conv_nchw(x, w, strides, padding, dilation, groups):
    """Cross-correlation of NCHW x with OIHW w (no bias), in the dtype of x * w."""
    n, channels = x.shape[:2]
    out_channels, group_channels, kh, kw = w.shape
    if (groups < 1 or channels % groups or out_channels % groups
            or channels // groups != group_channels):
        raise LegatoError(f"groups={groups} does not fit {channels} input channels and weight "
                          f"{list(w.shape)} (OIHW, I must be C/groups)")
    win = window(x.shape[2:], (kh, kw), strides, dilation, padding, what="conv2d")
    (top, left), (bottom, right) = win.pads_begin, win.pads_end
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    patches = _windows(x, win)
    patches = patches.reshape(n, groups, group_channels, *patches.shape[2:])
    w = w.reshape(groups, out_channels // groups, group_channels, kh, kw)
    out = np.einsum("ngcyxij,gocij->ngoyx", patches, w, optimize=True)
    return out.reshape(n, out_channels, *out.shape[3:])


def conv2d(data, weight, bias=None, *, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
           groups=1, data_layout="NCHW", kernel_layout="OIHW"):
    x, back = _canonical(data, _DATA_LAYOUTS, data_layout, "data_layout")
    w, _ = _canonical(weight, _KERNEL_LAYOUTS, kernel_layout, "kernel_layout")
    out = _conv_nchw(_acc(x), _acc(w), strides, padding, dilation, groups)
    if bias is not None:
        out = out + _along_axis(_acc(bias), 4, 1)
    return _fresh(out.transpose(back), data.dtype)


def _pool_window(x, pool_size, strides, padding, dilation, ceil_mode):
    return window(x.shape[2:], pool_size, strides, dilation, padding, ceil_mode,
                  what="pool", kernel_name="pool_size")


def _pool_windows(x, win, fill):
    """Windows (N, C, OH, OW, KH, KW) of NCHW x padded with `fill`, ceil mode's overhang
    included."""
    (top, left), (bottom, right) = win.pads_begin, win.sweep_padding[2:]
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    return _windows(x, win)


def _counts(win, axis: int, include_pad: bool) -> np.ndarray:
    """Per window along `axis`, the taps inside the input, or inside input + explicit
    padding (never the ceil-mode overhang, as in onnxruntime and PyTorch)."""
    begin, size, end = win.pads_begin[axis], win.spatial_in[axis], win.pads_end[axis]
    low, high = (0, begin + size + end) if include_pad else (begin, begin + size)
    taps = (np.arange(win.out[axis])[:, None] * win.strides[axis]
            + np.arange(win.kernel[axis]) * win.dilation[axis])
    return np.sum((taps >= low) & (taps < high), axis=1)


def _lowest(dtype):
    """The padding value max pooling can never pick over a real cell."""
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf  # bfloat16's kind is V


def max_pool2d(data, *, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1),
               ceil_mode=False, data_layout="NCHW"):
    x, back = _canonical(data, _DATA_LAYOUTS, data_layout, "data_layout")
    win = _pool_window(x, pool_size, strides, padding, dilation, ceil_mode)
    out = np.max(_pool_windows(x, win, _lowest(x.dtype)), axis=(-2, -1))
    return _fresh(out.transpose(back), data.dtype)


def avg_pool2d(data, *, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1),
               ceil_mode=False, count_include_pad=False, data_layout="NCHW"):
    x, back = _canonical(data, _DATA_LAYOUTS, data_layout, "data_layout")
    win = _pool_window(x, pool_size, strides, padding, dilation, ceil_mode)
    sums = np.sum(_pool_windows(_f64(x), win, 0.0), axis=(-2, -1))
    rows, cols = (_counts(win, axis, count_include_pad) for axis in (0, 1))
    return _fresh((sums / np.multiply.outer(rows, cols)).transpose(back), data.dtype)


# --- quantization and attention -----------------------------------------------------------

_QUANTIZED_DTYPES = {"int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8)}


def _saturate(values, dtype):
    """Clamp to the integer range as `cast` does (a NaN, from a zero scale, gives 0)."""
    return _float_to_int(values, dtype)


def quantize(data, scale, zero_point=None, *, axis=1, dtype="int8"):
    target = _choice(_QUANTIZED_DTYPES, dtype, "quantized dtype")
    # Divide in the input's precision, as ONNX runtimes do: a float64 quotient can fall on
    # the other side of a .5 tie than the float32 one and round differently.
    scaled = np.divide(data, _along_axis(scale, data.ndim, axis))
    zero = 0.0 if zero_point is None else _f64(_along_axis(zero_point, data.ndim, axis))
    return _fresh(_saturate(np.rint(scaled) + zero, target), target)


def dequantize(data, scale, zero_point=None, *, axis=1):
    zero = 0.0 if zero_point is None else _f64(_along_axis(zero_point, data.ndim, axis))
    out = (_f64(data) - zero) * _f64(_along_axis(scale, data.ndim, axis))
    return _fresh(out, scale.dtype)


def qnn_conv2d(data, data_scale, data_zero_point, weight, weight_scale, weight_zero_point,
               out_scale, out_zero_point, bias=None, *, strides=(1, 1), padding=(0, 0, 0, 0),
               dilation=(1, 1), groups=1, data_layout="NCHW", kernel_layout="OIHW"):
    x, back = _canonical(data, _DATA_LAYOUTS, data_layout, "data_layout")
    w, _ = _canonical(weight, _KERNEL_LAYOUTS, kernel_layout, "kernel_layout")
    # Zero points go before the padding, so padded cells hold the real value 0 exactly as
    # ONNX's padding with x_zero_point does; int64 keeps the accumulation exact.
    x = x.astype(np.int64) - np.asarray(data_zero_point, np.int64)
    w = w.astype(np.int64) - _along_axis(np.asarray(weight_zero_point, np.int64), 4, 0)
    acc = _conv_nchw(x, w, strides, padding, dilation, groups)
    if bias is not None:  # int32 at scale data_scale * weight_scale: adds to the accumulator
        acc = acc + _along_axis(bias.astype(np.int64), 4, 1)
    # onnxruntime's output stage: a float32 multiplier (data_scale * weight_scale /
    # out_scale, in that order) times the accumulator converted to float32
    multiplier = np.float32(data_scale) * _along_axis(np.asarray(weight_scale, np.float32),
                                                      4, 1) / np.float32(out_scale)
    scaled = acc.astype(np.float32) * np.asarray(multiplier, np.float32)
    out = _saturate(np.rint(scaled) + _f64(out_zero_point), out_zero_point.dtype)
    return _fresh(out.transpose(back), out_zero_point.dtype)


def attention(q, k, v, mask=None, *, scale=None, causal=False):
    out_shape = q.shape[:-1] + v.shape[-1:]
    if math.prod(out_shape) == 0:
        return np.zeros(out_shape, q.dtype)
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    scores = _f64(q) @ np.swapaxes(_f64(k), -1, -2) * scale
    if mask is not None:
        # A bool mask says which scores to keep; any other mask is an additive bias.
        scores = (np.where(mask, scores, -np.inf) if mask.dtype == np.bool_
                  else scores + _f64(mask))
    if causal:
        scores = np.where(np.tri(*scores.shape[-2:], dtype=bool), scores, -np.inf)
    return _fresh(_softmax(scores, -1) @ _f64(v), q.dtype)


# --- registry -----------------------------------------------------------------------------


def _reporting(name, kernel):
    """Let numpy's own shape and value complaints surface as a LegatoError naming the op.

    Floating-point exceptions are not warned about: overflow gives inf, 0/0 and sqrt(-1)
    NaN, as IEEE 754 defines, and integers wrap; the results say what happened."""
    @functools.wraps(kernel)
    def run(*inputs, **attrs):
        try:
            with np.errstate(all="ignore"):
                return kernel(*inputs, **attrs)
        except (ValueError, IndexError, TypeError, ArithmeticError) as err:
            # numpy's AxisError is a ValueError and an IndexError
            raise LegatoError(f"{name}: {err}") from err
    return run


KERNELS = {name: _reporting(name, kernel) for name, kernel in {
    **{name: _binary(fn) for name, fn in _BINARY.items()},
    **{name: _predicate(fn) for name, fn in _PREDICATES.items()},
    **{name: _unary(fn) for name, fn in _UNARY.items()},
    **{name: _reduction(fn) for name, fn in _REDUCTIONS.items()},
    **{name: _along_one_axis(fn) for name, fn in _SOFTMAXES.items()},
    **{name: _activation(fn) for name, fn in _ACTIVATIONS.items()},
    **INDEXING_KERNELS, **SPECTRAL_KERNELS, **QUANTIZED_KERNELS,
    "isinf": isinf, "nn.prelu": prelu, "nn.grid_sample": grid_sample,
    "where": where, "cast": cast, "argmax": argmax, "variance": variance,
    "reshape": reshape, "permute_dims": permute_dims, "broadcast_to": broadcast_to,
    "concat": concat, "split": split, "strided_slice": strided_slice, "take": take,
    "pad": pad, "squeeze": squeeze, "expand_dims": expand_dims, "flatten": flatten,
    "clip": clip, "nn.leaky_relu": leaky_relu, "nn.gelu": gelu,
    "nn.layer_norm": layer_norm, "nn.rms_norm": rms_norm, "nn.batch_norm": batch_norm,
    "nn.group_norm": group_norm, "nn.instance_norm": instance_norm, "nn.linear": linear,
    "nn.conv2d": conv2d, "nn.max_pool2d": max_pool2d, "nn.avg_pool2d": avg_pool2d,
    "qnn.quantize": quantize, "qnn.dequantize": dequantize, "qnn.conv2d": qnn_conv2d,
    "nn.attention": attention,
}.items()}
