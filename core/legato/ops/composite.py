"""Level-1 composites: reductions, activations and shape helpers built from primitives."""
from __future__ import annotations

import math

from ..ir import TensorType
import numpy as np

from . import layout_rules
from .base import (T, composite, f32, fail, float_unary_infer, is_float, norm_axes, norm_axis,
                   require_float)
from .primitives import REDUCE_ATTRS, _reduce

X23 = (f32(2, 3),)


def count(shape, axes) -> int:
    return math.prod(shape[a] for a in norm_axes(axes, len(shape)))


# --- reductions ---------------------------------------------------------------------------

def _float_reduce(types, attrs):
    require_float(types[0])
    return _reduce(types, attrs)


@composite("mean", "data", _float_reduce, "reduce", 1, attrs=REDUCE_ATTRS,
           examples=[(X23, {}), (X23, {"axes": [-1], "keepdims": True})],
           layout_rule=layout_rules.reduce)
def mean(b, x, axes, keepdims):
    """sum over `axes` / count"""
    return b.divide(b.sum(x, axes=axes, keepdims=keepdims), float(count(x.shape, axes)))


@composite("variance", "data", _float_reduce, "reduce", 1,
           attrs={**REDUCE_ATTRS, "unbiased": ("bool", False)},
           examples=[(X23, {}), (X23, {"axes": [0], "unbiased": True})], tolerance=3e-4,
           layout_rule=layout_rules.reduce)
def variance(b, x, axes, keepdims, unbiased):
    """population variance over `axes` (divide by N), or by N-1 when `unbiased`"""
    n = count(x.shape, axes)
    centered = b.subtract(x, b.divide(b.sum(x, axes=axes, keepdims=True), float(n)))
    squares = b.sum(b.multiply(centered, centered), axes=axes, keepdims=keepdims)
    return b.divide(squares, float(n - 1 if unbiased else n))


# --- activations --------------------------------------------------------------------------

def _activation(name: str, attrs: dict | None = None, examples=((X23, {}),), **facts):
    return composite(name, "data", float_unary_infer, "elemwise", 1, examples, attrs, **facts)


@_activation("nn.relu", aten="relu", tolerance=0.0)  # ONNX Relu also takes ints
def relu(b, x):
    """`max(x, 0)`"""
    return b.maximum(x, 0.0)


@_activation("nn.leaky_relu", {"alpha": ("float", 0.01)}, tolerance=1e-6)
def leaky_relu(b, x, alpha):
    """`x` if `x >= 0` else `alpha * x`"""
    return b.where(b.less(x, 0.0), b.multiply(x, alpha), x)


def _clip(types, attrs):
    if types[0].dtype == "bool":
        fail("clip needs a numeric tensor, got bool")
    for key in ("min", "max"):
        if attrs[key] is not None and math.isnan(attrs[key]):
            fail(f"clip {key} is NaN; leave the bound out (None) to not clip")
    return types[0]


@composite("clip", "data", _clip, "elemwise", 1,
           [(X23, {"min": -1.0, "max": 1.0}), (X23, {"min": 0.0}), (X23, {}),
            ((T("uint8", 2, 3),), {"min": -1.0, "max": 7.5})],
           {"min": ("float?", None), "max": ("float?", None)}, tolerance=0.0)
def clip(b, x, min, max):
    """`x` clamped to `[min, max]`; a `None` bound is absent"""
    if not is_float(x.dtype):  # a bound beyond the integer range clips nothing
        info = np.iinfo(x.dtype)
        min = None if min is None or min <= info.min else int(math.ceil(min))
        max = None if max is None or max >= info.max else int(math.floor(max))
    if min is not None:
        x = b.maximum(x, min)
    if max is not None:
        x = b.minimum(x, max)
    return x


def gelu_as_exported(b, x, approximate):
    """How exporters write the tanh form: `0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))`
    (`pow(x, 3)` or `x*x*x`, any order of the products; recomposition only)."""
    if approximate != "tanh":
        return gelu(b, x, approximate)
    cube = b.power(x, 3.0)
    inner = b.multiply(b.add(x, b.multiply(cube, 0.044715)), math.sqrt(2 / math.pi))
    return b.multiply(b.multiply(x, 0.5), b.add(b.tanh(inner), 1.0))


@_activation("nn.gelu", {"approximate": ("str:none|tanh", "none")},
             [(X23, {}), (X23, {"approximate": "tanh"})], aten="gelu",
             tolerance=3e-4,  # erf, and 1 + erf(x/sqrt2) cancelling in the left tail
             patterns=[gelu_as_exported])
def gelu(b, x, approximate):
    """`"none"`: `0.5x(1+erf(x/sqrt2))`; `"tanh"`: `0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))`
    """
    if approximate == "tanh":
        # 0.5 x (1 + tanh(u)) written as x sigmoid(2u): 1 + tanh(u) cancels to 0 for x << 0
        # while sigmoid keeps the tail's relative accuracy.
        cube = b.multiply(b.multiply(x, x), x)
        inner = b.multiply(b.add(x, b.multiply(cube, 0.044715)), 2 * math.sqrt(2 / math.pi))
        return b.multiply(x, b.sigmoid(inner))
    # 1 + erf(z) cancels for x << 0 too (absolute error ~3e-8 |x| in float32); no primitive
    # gives erfc, so the tail's relative accuracy is lost (docs/ops.md, tolerances).
    return b.multiply(b.multiply(x, 0.5), b.add(b.erf(b.multiply(x, 1 / math.sqrt(2))), 1.0))


@_activation("nn.silu", aten="silu", tolerance=1e-6)
def silu(b, x):
    """`x * sigmoid(x)`"""
    return b.multiply(x, b.sigmoid(x))


def _axis_infer(types, attrs):
    require_float(types[0])
    norm_axis(attrs["axis"], types[0].rank)
    return types[0]


def softmax_unshifted(b, x, axis):
    """`exp(x) / sum(exp(x))` without subtracting the row maximum, as some exporters write
    it (recomposition only)."""
    exps = b.exp(x)
    return b.divide(exps, b.sum(exps, axes=[axis], keepdims=True))


@composite("nn.softmax", "data", _axis_infer, "opaque", 1, [(X23, {}), (X23, {"axis": 0})],
           {"axis": ("int", -1)}, layout_rule=layout_rules.one_axis,
           patterns=[softmax_unshifted])
def softmax(b, x, axis):
    """`exp(x) / sum(exp(x))` along `axis` (ONNX opset 13), the row maximum subtracted"""
    exps = b.exp(b.subtract(x, b.max(x, axes=[axis], keepdims=True)))
    return b.divide(exps, b.sum(exps, axes=[axis], keepdims=True))


@composite("nn.log_softmax", "data", _axis_infer, "opaque", 1, [(X23, {})],
           {"axis": ("int", -1)}, tolerance=3e-4, layout_rule=layout_rules.one_axis)
def log_softmax(b, x, axis):
    """`log(softmax(x))` along `axis`, computed from the shifted row"""
    shifted = b.subtract(x, b.max(x, axes=[axis], keepdims=True))
    return b.subtract(shifted, b.log(b.sum(b.exp(shifted), axes=[axis], keepdims=True)))


# --- shape helpers ------------------------------------------------------------------------

def _squeeze_shape(shape, axes):
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = norm_axes(axes, len(shape))
    if any(shape[a] != 1 for a in axes):
        fail(f"cannot squeeze axes {list(axes)} of shape {list(shape)}: not all are 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _expand_shape(shape, axes):
    rank = len(shape) + len(axes)
    axes = norm_axes(axes, rank)
    dims = iter(shape)
    return tuple(1 if i in axes else next(dims) for i in range(rank))


def _flatten_shape(shape, axis):
    if not -len(shape) <= axis <= len(shape):  # ONNX: axis in [-r, r], negative counts from r
        fail(f"flatten axis {axis} is out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


def _reshaping(name: str, attrs: dict, new_shape, examples, doc: str):
    def infer(types, attrs):
        return TensorType(new_shape(types[0].shape, *attrs.values()), types[0].dtype)

    @composite(name, "data", infer, "injective", 1, examples, attrs, tolerance=0.0, doc=doc)
    def decompose(b, x, **attrs):
        return b.reshape(x, shape=list(new_shape(x.shape, *attrs.values())))
    return decompose


squeeze = _reshaping("squeeze", {"axes": ("ints?", None)}, _squeeze_shape,
                     [((f32(1, 3, 1),), {}), ((f32(1, 3, 1),), {"axes": [-1]})],
                     "remove size-1 `axes` (`None`: all size-1 axes)")
expand_dims = _reshaping("expand_dims", {"axes": ("ints",)}, _expand_shape,
                         [(X23, {"axes": [0, -1]})],
                         "ONNX Unsqueeze: insert size-1 dims at `axes` of the output")
flatten = _reshaping("flatten", {"axis": ("int", 1)}, _flatten_shape,
                     [((f32(2, 3, 4),), {}), ((f32(2, 3, 4),), {"axis": 0})],
                     "ONNX Flatten: 2-D `(prod(shape[:axis]), prod(shape[axis:]))`, `axis` in "
                     "`[-rank, rank]`")


# --- linear -------------------------------------------------------------------------------

def _linear(types, attrs):
    data, weight, bias = types
    if weight.rank != 2 or data.rank < 1 or data.shape[-1] != weight.shape[1]:
        fail(f"data {list(data.shape)} and weight {list(weight.shape)} do not match "
             "(weight is (out_features, in_features))")
    if bias is not None and bias.shape not in ((weight.shape[0],), ()):
        fail(f"bias {list(bias.shape)} must be ({weight.shape[0]},)")
    if len({t.dtype for t in types if t is not None}) != 1:
        fail("data, weight and bias must share one dtype")
    if data.dtype == "bool":
        fail("nn.linear needs numeric tensors, got bool")
    return TensorType(data.shape[:-1] + (weight.shape[0],), data.dtype)


@composite("nn.linear", "data, weight, bias?", _linear, "out_elemwise_fusable", 1,
           [((f32(2, 3), f32(4, 3), f32(4)), {}), ((f32(3), f32(4, 3), None), {})])
def linear(b, x, weight, bias):
    """`data @ weight.T + bias`, weight `(out_features, in_features)`"""
    y = b.matmul(x, b.permute_dims(weight, axes=[1, 0]))
    return y if bias is None else b.add(y, bias)

