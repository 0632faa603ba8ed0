"""Normalization ops (level 1), all built on one normalize-over-axes helper."""
from __future__ import annotations

from ..ir import TensorType
from ..ir import shapes
from . import layout_rules
from .base import broadcast_shapes, composite, f32, fail, norm_axes, require_float
from .composite import count


def normalize(b, x, axes, epsilon):
    """(x - mean) / sqrt(var + eps) over `axes`, population variance."""
    n = float(count(x.shape, axes))
    centered = b.subtract(x, b.divide(b.sum(x, axes=axes, keepdims=True), n))
    var = b.divide(b.sum(b.multiply(centered, centered), axes=axes, keepdims=True), n)
    return b.multiply(centered, b.rsqrt(b.add(var, epsilon)))


def _affine_params(data: TensorType, params, what: str):
    for name, t in zip(what.split(), params):
        if t is None:
            continue
        if t.dtype != data.dtype:
            fail(f"{name} dtype {t.dtype} differs from data dtype {data.dtype}")
        if broadcast_shapes(data.shape, t.shape) != data.shape:
            fail(f"{name} {list(t.shape)} does not broadcast to data {list(data.shape)}")


def _layer_norm(types, attrs):
    data = types[0]
    require_float(data)
    norm_axes(attrs["axes"], data.rank)
    _affine_params(data, types[1:], "gamma beta")
    return data


NORM_ATTRS = {"axes": ("ints", [-1]), "epsilon": ("float", 1e-5)}
X234 = f32(2, 3, 4)


def layer_norm_as_exported(b, x, gamma, beta, axes, epsilon):
    """ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add: layer norm as older
    exporters write it (recomposition only)."""
    centered = b.subtract(x, b.mean(x, axes=axes, keepdims=True))
    var = b.mean(b.power(centered, 2.0), axes=axes, keepdims=True)
    y = b.divide(centered, b.sqrt(b.add(var, epsilon)))
    y = y if gamma is None else b.multiply(y, gamma)
    return y if beta is None else b.add(y, beta)


@composite("nn.layer_norm", "data, gamma?, beta?", _layer_norm, "opaque", 1, attrs=NORM_ATTRS,
           examples=[((X234, f32(4), f32(4)), {}), ((X234, None, None), {"axes": [1, 2]})],
           tolerance=3e-4, layout_rule=layout_rules.norm, patterns=[layer_norm_as_exported])
def layer_norm(b, x, gamma, beta, axes, epsilon):
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over `axes` (population variance);
    gamma and beta broadcast against the trailing dims"""
    y = normalize(b, x, axes, epsilon)
    y = y if gamma is None else b.multiply(y, gamma)
    return y if beta is None else b.add(y, beta)


def rms_norm_as_llama(b, x, gamma, axes, epsilon):
    """`gamma * (x * rsqrt(mean(x ** 2) + epsilon))`, as Llama writes it (recomposition
    only; sqrt with a reciprocal or a division is the same canonical form)."""
    mean_square = b.mean(b.power(x, 2.0), axes=axes, keepdims=True)
    y = b.multiply(x, b.rsqrt(b.add(mean_square, epsilon)))
    return y if gamma is None else b.multiply(gamma, y)


@composite("nn.rms_norm", "data, gamma?", _layer_norm, "opaque", 1, attrs=NORM_ATTRS,
           examples=[((X234, f32(4)), {}), ((X234, None), {"axes": [-2, -1]})],
           tolerance=3e-4, layout_rule=layout_rules.norm, patterns=[rms_norm_as_llama])
def rms_norm(b, x, gamma, axes, epsilon):
    """`x / sqrt(mean(x^2) + epsilon) * gamma` over `axes`"""
    mean_square = b.divide(b.sum(b.multiply(x, x), axes=axes, keepdims=True),
                           float(count(x.shape, axes)))
    y = b.multiply(x, b.rsqrt(b.add(mean_square, epsilon)))
    return y if gamma is None else b.multiply(y, gamma)


def _per_channel_infer(axis_attr: str | None):
    def infer(types, attrs):
        data = types[0]
        require_float(data)
        axis = attrs[axis_attr] if axis_attr else 1
        if data.rank < 2 or not -data.rank <= axis < data.rank:
            fail(f"data {list(data.shape)} has no channel axis {axis}")
        channels = data.shape[axis]
        for t in types[1:]:
            if t.shape != (channels,) or t.dtype != data.dtype:
                fail(f"per-channel parameters must be {data.dtype}[{channels}], got {t}")
        if "num_groups" in attrs and (attrs["num_groups"] <= 0 or channels % attrs["num_groups"]):
            fail(f"{channels} channels do not split into {attrs['num_groups']} groups")
        return data
    return infer


def channel_view(b, param, rank: int, axis: int):
    """Reshape a per-channel (C,) tensor to broadcast along `axis` of a rank-`rank` tensor."""
    return b.reshape(param, shape=list(shapes.channel_view(param.shape[0], rank, axis)))


NCHW_EX = f32(2, 4, 3, 3)
C4 = f32(4)


@composite("nn.batch_norm", "data, gamma, beta, moving_mean, moving_var",
           _per_channel_infer("axis"), "opaque", 1,
           [((NCHW_EX, C4, C4, C4, C4), {}), ((f32(3, 4), C4, C4, C4, C4), {"axis": -1})],
           {"axis": ("int", 1), "epsilon": ("float", 1e-5)}, tolerance=3e-4,
           layout_rule=layout_rules.batch_norm)
def batch_norm(b, x, gamma, beta, mean, var, axis, epsilon):
    """inference: `(x - mean) / sqrt(var + epsilon) * gamma + beta` per channel along
    `axis`"""
    scale = b.multiply(gamma, b.rsqrt(b.add(var, epsilon)))
    shift = b.subtract(beta, b.multiply(mean, scale))
    return b.add(b.multiply(x, channel_view(b, scale, x.rank, axis)),
                 channel_view(b, shift, x.rank, axis))


def _scale_shift(b, y, gamma, beta):
    return b.add(b.multiply(y, channel_view(b, gamma, y.rank, 1)),
                 channel_view(b, beta, y.rank, 1))


@composite("nn.group_norm", "data, gamma, beta", _per_channel_infer(None), "opaque", 1,
           [((NCHW_EX, C4, C4), {"num_groups": 2})],
           {"num_groups": ("int", 1), "epsilon": ("float", 1e-5)}, tolerance=3e-4)
def group_norm(b, x, gamma, beta, num_groups, epsilon):
    """data `(N, C, ...)`: normalise each group of `C / num_groups` channels with all spatial
    dims; gamma and beta per channel `(C,)`"""
    grouped = b.reshape(x, shape=[x.shape[0], num_groups, -1])
    y = b.reshape(normalize(b, grouped, [2], epsilon), shape=list(x.shape))
    return _scale_shift(b, y, gamma, beta)


@composite("nn.instance_norm", "data, gamma, beta", _per_channel_infer(None), "opaque", 1,
           [((NCHW_EX, C4, C4), {})], {"epsilon": ("float", 1e-5)}, tolerance=3e-4)
def instance_norm(b, x, gamma, beta, epsilon):
    """data `(N, C, ...)`: normalise the spatial dims of each (n, c); gamma and beta `(C,)`
    """
    y = normalize(b, x, list(range(2, x.rank)), epsilon)
    return _scale_shift(b, y, gamma, beta)
