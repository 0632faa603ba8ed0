"""Activation functions beyond relu/gelu/silu (composite.py), as level-1 composites of
elementwise primitives. `nn.*` names, so backends with a fused kernel keep them whole.

relu6 and hardtanh are `clip` (the importers map them there), and PyTorch's threshold is
`where`: no op of their own.
"""
from __future__ import annotations

from ..ir import TensorType
from .base import composite, f32, fail, float_unary_infer, require_float

X23 = (f32(2, 3),)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _activation(name: str, attrs: dict | None = None, examples=((X23, {}),), **facts):
    facts.setdefault("tolerance", 1e-6)
    return composite(name, "data", float_unary_infer, "elemwise", 1, examples, attrs, **facts)


def _negative_part(b, x, alpha, scale=1.0):
    """`alpha * (exp(x / scale) - 1)` where x < 0, else x (the tail of elu and celu). x is
    clamped to the negative half before scaling, so the unused half cannot overflow exp
    whatever the sign of `scale` (celu takes a negative alpha, as torch does)."""
    inner = b.minimum(x, 0.0)
    inner = inner if scale == 1.0 else b.multiply(inner, 1.0 / scale)
    tail = b.multiply(b.subtract(b.exp(inner), 1.0), alpha)
    return b.where(b.greater(x, 0.0), x, tail)


@_activation("nn.elu", {"alpha": ("float", 1.0)}, [(X23, {}), (X23, {"alpha": 0.5})])
def elu(b, x, alpha):
    """`x` if `x > 0` else `alpha * (exp(x) - 1)`"""
    return _negative_part(b, x, alpha)


@_activation("nn.selu", {"alpha": ("float", SELU_ALPHA), "gamma": ("float", SELU_SCALE)},
             aten="selu")
def selu(b, x, alpha, gamma):
    """`gamma * (x if x > 0 else alpha * (exp(x) - 1))` (ONNX Selu; the defaults are
    PyTorch's constants)"""
    return b.multiply(_negative_part(b, x, alpha), gamma)


def _celu(types, attrs):
    if attrs["alpha"] == 0:
        fail("celu alpha must not be 0")
    return float_unary_infer(types, attrs)


@composite("nn.celu", "data", _celu, "elemwise", 1,
           [(X23, {}), (X23, {"alpha": 2.0}), (X23, {"alpha": -1.5})],
           {"alpha": ("float", 1.0)}, tolerance=1e-6)
def celu(b, x, alpha):
    """`max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`"""
    return _negative_part(b, x, alpha, alpha)


def _softplus_terms(b, x):
    """`max(x, 0) + log(1 + exp(-|x|))`: log(1 + exp(x)) without overflow."""
    return b.add(b.maximum(x, 0.0), b.log(b.add(b.exp(b.negative(b.abs(x))), 1.0)))


@_activation("nn.softplus", {"beta": ("float", 1.0), "threshold": ("float?", None)},
             [(X23, {}), (X23, {"beta": 2.0, "threshold": 20.0})])
def softplus(b, x, beta, threshold):
    """`log(1 + exp(beta * x)) / beta`, and `x` where `beta * x > threshold` (None: no
    threshold)"""
    scaled = x if beta == 1.0 else b.multiply(x, beta)
    y = _softplus_terms(b, scaled)
    y = y if beta == 1.0 else b.divide(y, beta)
    return y if threshold is None else b.where(b.greater(scaled, threshold), x, y)


@_activation("nn.softsign", onnx="Softsign")
def softsign(b, x):
    """`x / (1 + |x|)`"""
    return b.divide(x, b.add(b.abs(x), 1.0))


@_activation("nn.mish", onnx="Mish", aten="mish", tolerance=3e-6)
def mish(b, x):
    """`x * tanh(softplus(x))`"""
    return b.multiply(x, b.tanh(_softplus_terms(b, x)))


def _hard_sigmoid(b, x, alpha, beta):
    return b.minimum(b.maximum(b.add(b.multiply(x, alpha), beta), 0.0), 1.0)


@_activation("nn.hardsigmoid", {"alpha": ("float", 0.2), "beta": ("float", 0.5)},
             [(X23, {}), (X23, {"alpha": 1 / 6})])
def hardsigmoid(b, x, alpha, beta):
    """`max(0, min(1, alpha * x + beta))` (ONNX HardSigmoid; PyTorch's has alpha=1/6)"""
    return _hard_sigmoid(b, x, alpha, beta)


@_activation("nn.hardswish", onnx="HardSwish", aten="hardswish")
def hardswish(b, x):
    """`x * max(0, min(1, x / 6 + 1 / 2))`"""
    return b.multiply(x, _hard_sigmoid(b, x, 1 / 6, 0.5))


@_activation("nn.thresholded_relu", {"alpha": ("float", 1.0)},
             [(X23, {}), (X23, {"alpha": -0.5})], tolerance=0.0)
def thresholded_relu(b, x, alpha):
    """`x` if `x > alpha` else 0"""
    return b.where(b.greater(x, alpha), x, 0.0)


@_activation("nn.shrink", {"lambd": ("float", 0.5), "bias": ("float", 0.0)},
             [(X23, {}), (X23, {"lambd": 0.2, "bias": 0.2})])
def shrink(b, x, lambd, bias):
    """`x + bias` if `x < -lambd`, `x - bias` if `x > lambd`, else 0 (ONNX Shrink;
    PyTorch's hardshrink has bias 0, softshrink bias = lambd)"""
    zeros = b.multiply(x, 0.0)  # keeps NaN, like the reference's comparisons do not
    low = b.where(b.less(x, -lambd), b.add(x, bias), zeros)
    return b.where(b.greater(x, lambd), b.subtract(x, bias), low)


def _prelu(types, attrs):
    data, slope = types
    require_float(data)
    if slope.dtype != data.dtype:
        fail(f"slope dtype {slope.dtype} differs from data dtype {data.dtype}")
    if len(slope.shape) > len(data.shape) or any(
            s not in (1, d) for s, d in zip(reversed(slope.shape), reversed(data.shape))):
        fail(f"slope {list(slope.shape)} does not broadcast to data {list(data.shape)}")
    return TensorType(data.shape, data.dtype)


@composite("nn.prelu", "data, slope", _prelu, "broadcast", 1,
           [((f32(2, 3), f32(3)), {}), ((f32(2, 3, 4), f32(3, 1)), {})], onnx="PRelu",
           tolerance=1e-6)
def prelu(b, x, slope):
    """`x` if `x >= 0` else `slope * x`; slope broadcasts to data (one way, as ONNX PRelu)"""
    return b.where(b.less(x, 0.0), b.multiply(x, slope), x)

