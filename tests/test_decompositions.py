"""Every decomposition against its op's reference kernel.

For each composite op (level > 0) a one-call module is built on random inputs and run three
ways:

* expected: ``legato.reference(mod)`` runs the op itself with cpu_ref's direct numpy kernel;
* actual: ``legato.compile(mod, backend="cpu_ref")`` legalizes (cpu_ref declares only level-0
  ops legal, so every composite op is decomposed, recursively) and runs the primitives;
* partial lowering: ``legato.legalize(mod, max_level=L)`` (no backend) leaves only ops of
  level <= L, and running that module with the reference kernels gives the same result.

The cases are parametrized over attribute variants, broadcasting, odd and size-1 dims and
negative axes; hypothesis sweeps random shapes and axes for the reduction-style composites.
``test_every_composite_op_has_cases`` fails when an op with a decomposition has no case.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import legato

# --- harness ------------------------------------------------------------------------------


class Const:
    """Marks an input that is built into the module with ``b.const`` instead of fed."""

    def __init__(self, array):
        self.array = np.asarray(array)


@dataclass
class Case:
    id: str
    op: str
    make: Callable[[np.random.Generator], list]  # arrays, Const(...) or None per input
    attrs: dict = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-5
    # Quantized outputs only: how far (in integer steps) an element may be off, and how many
    # elements may be off at all. 0 means bit-exact.
    max_int_diff: int = 0
    max_off_fraction: float = 0.0
    # A known discrepancy (the reason says which side is wrong): xfail(strict=True).
    xfail: str | None = None


def build(op: str, arrays, attrs):
    """A module with one call of `op`; returns (module, fed input arrays)."""
    b = legato.GraphBuilder()
    values, feeds = [], []
    for index, item in enumerate(arrays):
        if item is None:
            values.append(None)
        elif isinstance(item, Const):
            values.append(b.const(item.array))
        else:
            item = np.array(item, order="C")  # (ascontiguousarray would make 0-d 1-d)
            values.append(b.input(f"in{index}", item.shape, item.dtype.name))
            feeds.append(item)
    return b.build(b.call(op, *values, **attrs)), feeds


def main_calls(module):
    return module.functions["main"].calls


def levels(module) -> dict[str, int]:
    return {call.op: legato.get_op(call.op).level for call in main_calls(module)}


def assert_matches(actual, expected, rtol=1e-5, atol=1e-5, max_int_diff=0,
                   max_off_fraction=0.0, what=""):
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if expected.dtype.kind in "iub":
        diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
        off = np.count_nonzero(diff)
        assert diff.max(initial=0) <= max_int_diff, \
            f"{what}: off by up to {diff.max()} (allowed {max_int_diff})\n{actual}\n{expected}"
        assert off <= max_off_fraction * diff.size, \
            f"{what}: {off} of {diff.size} elements differ (allowed {max_off_fraction:.1%})"
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def check_case(case: Case, seed: int):
    """Full legalization and partial lowering to level 0 against the reference kernel."""
    mod, feeds = build(case.op, case.make(np.random.default_rng(seed)), case.attrs)
    assert levels(mod) == {case.op: legato.get_op(case.op).level}
    expected = legato.reference(mod)(*feeds)
    tol = dict(rtol=case.rtol, atol=case.atol, max_int_diff=case.max_int_diff,
               max_off_fraction=case.max_off_fraction)

    compiled = legato.compile(mod, backend="cpu_ref")
    surviving = {op: lvl for op, lvl in levels(compiled.module).items() if lvl > 0}
    assert not surviving, f"composite ops survived legalization for cpu_ref: {surviving}"
    assert case.op not in levels(compiled.module)
    assert_matches(compiled(*feeds), expected, what="compiled for cpu_ref", **tol)

    lowered = legato.legalize(mod, max_level=0).module
    assert set(levels(lowered).values()) <= {0}  # empty for identities (clip with no bounds)
    assert_matches(legato.reference(lowered)(*feeds), expected, what="max_level=0", **tol)
    return mod, feeds, expected, tol


# --- random data --------------------------------------------------------------------------

F32 = np.float32


def randn(rng, *shape, dtype=F32, scale=1.0, loc=0.0):
    return (rng.standard_normal(shape) * scale + loc).astype(dtype)


def positive(rng, *shape, dtype=F32, low=0.5, high=2.0):
    return rng.uniform(low, high, shape).astype(dtype)


def ints(rng, dtype, *shape, low=None, high=None):
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return rng.integers(low, high, shape, endpoint=True).astype(dtype)


def scalar(value, dtype=F32):
    return np.array(value, dtype=dtype)


# --- cases --------------------------------------------------------------------------------

CASES: list[Case] = []


def case(id, op, make, xfail=None, **kw):
    attrs = {k: kw.pop(k) for k in list(kw) if k not in
             ("rtol", "atol", "max_int_diff", "max_off_fraction")}
    CASES.append(Case(id, op, make, attrs, xfail=xfail, **kw))


def unary(*shape, **kw):
    return lambda rng: [randn(rng, *shape, **kw)]


# reductions
case("mean-all", "mean", unary(3, 5))
case("mean-neg-axis-keepdims", "mean", unary(2, 3, 5), axes=[-1], keepdims=True)
case("mean-two-axes", "mean", unary(2, 3, 4, 5), axes=[0, 2])
case("mean-neg-axes-keepdims", "mean", unary(2, 3, 4, 5), axes=[-3, -1], keepdims=True)
case("mean-size1-dims", "mean", unary(1, 7, 1), axes=[0, 2])
case("mean-rank1-17", "mean", unary(17), axes=[0])
case("mean-empty-axes-identity", "mean", unary(3, 5), axes=[])
case("mean-float64", "mean", unary(5, 7, dtype=np.float64), axes=[1], rtol=1e-12, atol=1e-12)
case("variance-all", "variance", unary(3, 5))
case("variance-unbiased-axis1", "variance", unary(3, 7, 2), axes=[1], unbiased=True)
case("variance-unbiased-neg-axes-keepdims", "variance", unary(2, 3, 5), axes=[-2, -1],
     keepdims=True, unbiased=True)
case("variance-rank1-17-unbiased", "variance", unary(17), unbiased=True)
case("variance-large-offset", "variance", unary(4, 6, loc=100.0), axes=[1], rtol=1e-4)
case("variance-size1-axis", "variance", unary(5, 1, 3), axes=[1])

# activations
case("relu", "nn.relu", unary(3, 5))
case("relu-rank4-odd", "nn.relu", unary(1, 3, 5, 7))
case("relu-float16", "nn.relu", unary(7, 5, dtype=np.float16), rtol=0, atol=0)
case("leaky_relu-default", "nn.leaky_relu", unary(3, 5))
case("leaky_relu-alpha0.2", "nn.leaky_relu", unary(2, 17), alpha=0.2)
case("leaky_relu-alpha-neg", "nn.leaky_relu", unary(7), alpha=-1.5)
case("clip-min-max", "clip", unary(3, 5, scale=2.0), min=-1.0, max=0.5)
case("clip-only-min", "clip", unary(3, 5), min=0.25)
case("clip-only-max", "clip", unary(1, 5, 3), max=-0.25)
case("clip-none", "clip", unary(3, 5))
case("clip-min-above-max", "clip", unary(3, 5), min=1.0, max=-1.0)
case("clip-int32", "clip", lambda rng: [ints(rng, np.int32, 4, 5, low=-20, high=20)],
     min=-5.0, max=7.0)
case("gelu-none", "nn.gelu", unary(3, 5, scale=3.0))
case("gelu-tanh", "nn.gelu", unary(3, 5, scale=3.0), approximate="tanh")
case("gelu-none-rank3", "nn.gelu", unary(2, 1, 7, scale=3.0), approximate="none")
case("gelu-tanh-float64", "nn.gelu", unary(4, 4, dtype=np.float64, scale=3.0),
     approximate="tanh", rtol=1e-12, atol=1e-12)
case("silu", "nn.silu", unary(2, 3, 7, scale=4.0))
case("silu-rank1", "nn.silu", unary(1))

# softmax family
case("softmax-last", "nn.softmax", unary(3, 5, 7))
case("softmax-axis0", "nn.softmax", unary(3, 5, 7), axis=0)
case("softmax-axis1", "nn.softmax", unary(3, 5, 7), axis=1)
case("softmax-neg2", "nn.softmax", unary(3, 5, 7), axis=-2)
case("softmax-size1-axis", "nn.softmax", unary(4, 1), axis=-1)
case("softmax-large-logits", "nn.softmax", unary(2, 17, scale=60.0))
case("softmax-float64", "nn.softmax", unary(3, 6, dtype=np.float64), axis=0,
     rtol=1e-12, atol=1e-12)
case("log_softmax-last", "nn.log_softmax", unary(3, 5, 7))
case("log_softmax-axis0", "nn.log_softmax", unary(3, 5, 7), axis=0)
case("log_softmax-neg2", "nn.log_softmax", unary(3, 5, 7), axis=-2)
case("log_softmax-large-logits", "nn.log_softmax", unary(2, 17, scale=60.0), rtol=1e-5,
     atol=1e-4)

# normalization


def layer_norm_inputs(shape, gamma=None, beta=None, const=False):
    def make(rng):
        x = randn(rng, *shape, scale=2.0, loc=0.5)
        g = None if gamma is None else randn(rng, *gamma)
        bt = None if beta is None else randn(rng, *beta)
        if const:
            g = None if g is None else Const(g)
            bt = None if bt is None else Const(bt)
        return [x, g, bt]
    return make


case("layer_norm-gamma-beta-broadcast", "nn.layer_norm",
     layer_norm_inputs((2, 3, 5), (5,), (5,)))
case("layer_norm-plain", "nn.layer_norm", layer_norm_inputs((3, 7)))
case("layer_norm-gamma-only", "nn.layer_norm", layer_norm_inputs((2, 5, 3), (3,)))
case("layer_norm-beta-only", "nn.layer_norm", layer_norm_inputs((2, 5, 3), None, (3,)))
case("layer_norm-axes-last2-gamma2d", "nn.layer_norm",
     layer_norm_inputs((2, 3, 5), (3, 5), (3, 5)), axes=[-2, -1])
case("layer_norm-axes-last2-gamma1d", "nn.layer_norm",
     layer_norm_inputs((2, 3, 5), (5,), (1, 5)), axes=[-2, -1])
case("layer_norm-pos-axes", "nn.layer_norm", layer_norm_inputs((2, 3, 4, 5)), axes=[1, 2])
case("layer_norm-rank1-epsilon", "nn.layer_norm", layer_norm_inputs((17,), (17,), (17,)),
     epsilon=1e-2)
case("layer_norm-const-params", "nn.layer_norm",
     layer_norm_inputs((4, 1, 7), (7,), (7,), const=True))
case("layer_norm-float64", "nn.layer_norm",
     lambda rng: [randn(rng, 3, 6, dtype=np.float64), randn(rng, 6, dtype=np.float64), None],
     rtol=1e-12, atol=1e-12)
case("rms_norm-gamma", "nn.rms_norm", lambda rng: [randn(rng, 2, 3, 5), randn(rng, 5)])
case("rms_norm-plain", "nn.rms_norm", lambda rng: [randn(rng, 3, 7), None])
case("rms_norm-axes-last2", "nn.rms_norm", lambda rng: [randn(rng, 2, 3, 5), randn(rng, 3, 5)],
     axes=[-2, -1])
case("rms_norm-axis0-epsilon", "nn.rms_norm", lambda rng: [randn(rng, 5, 3), None],
     axes=[0], epsilon=1e-1)


def batch_norm_inputs(shape, axis):
    def make(rng):
        c = shape[axis]
        return [randn(rng, *shape, scale=3.0, loc=1.0), randn(rng, c), randn(rng, c),
                randn(rng, c), positive(rng, c, low=0.1, high=4.0)]
    return make


case("batch_norm-rank2-axis1", "nn.batch_norm", batch_norm_inputs((5, 3), 1))
case("batch_norm-rank2-axis-neg1", "nn.batch_norm", batch_norm_inputs((5, 3), -1), axis=-1)
case("batch_norm-rank2-axis0", "nn.batch_norm", batch_norm_inputs((5, 3), 0), axis=0)
case("batch_norm-rank4-axis1", "nn.batch_norm", batch_norm_inputs((2, 3, 4, 5), 1))
case("batch_norm-rank4-axis-neg1", "nn.batch_norm", batch_norm_inputs((2, 4, 5, 3), -1),
     axis=-1)
case("batch_norm-rank3-epsilon", "nn.batch_norm", batch_norm_inputs((2, 7, 1), 1),
     epsilon=0.1)


def per_channel_norm_inputs(shape):
    def make(rng):
        c = shape[1]
        return [randn(rng, *shape, scale=2.0, loc=-1.0), randn(rng, c), randn(rng, c)]
    return make


case("group_norm-3-groups", "nn.group_norm", per_channel_norm_inputs((2, 6, 4, 5)),
     num_groups=3)
case("group_norm-1-group", "nn.group_norm", per_channel_norm_inputs((2, 6, 3, 3)))
case("group_norm-groups-eq-channels", "nn.group_norm", per_channel_norm_inputs((1, 4, 5, 3)),
     num_groups=4)
case("group_norm-rank3-epsilon", "nn.group_norm", per_channel_norm_inputs((3, 4, 7)),
     num_groups=2, epsilon=1e-3)
case("instance_norm-rank4", "nn.instance_norm", per_channel_norm_inputs((2, 3, 4, 5)))
case("instance_norm-rank3", "nn.instance_norm", per_channel_norm_inputs((2, 5, 7)))
case("instance_norm-single", "nn.instance_norm", per_channel_norm_inputs((1, 1, 5, 5)),
     epsilon=1e-3)

# linear
case("linear-2d-bias", "nn.linear",
     lambda rng: [randn(rng, 3, 5), randn(rng, 4, 5), randn(rng, 4)])
case("linear-1d-no-bias", "nn.linear", lambda rng: [randn(rng, 5), randn(rng, 7, 5), None])
case("linear-1d-bias", "nn.linear",
     lambda rng: [randn(rng, 5), randn(rng, 7, 5), randn(rng, 7)])
case("linear-3d-bias", "nn.linear",
     lambda rng: [randn(rng, 2, 3, 17), randn(rng, 5, 17), randn(rng, 5)])
case("linear-3d-no-bias", "nn.linear",
     lambda rng: [randn(rng, 2, 1, 7), randn(rng, 1, 7), None])
case("linear-scalar-bias", "nn.linear",
     lambda rng: [randn(rng, 3, 5), randn(rng, 4, 5), scalar(0.75)])
case("linear-const-weight", "nn.linear",
     lambda rng: [randn(rng, 4, 6), Const(randn(rng, 3, 6)), Const(randn(rng, 3))])

# shape helpers
case("squeeze-all", "squeeze", unary(1, 3, 1, 5))
case("squeeze-axis0", "squeeze", unary(1, 3, 1, 5), axes=[0])
case("squeeze-neg-axis", "squeeze", unary(3, 5, 1), axes=[-1])
case("squeeze-two-axes", "squeeze", unary(1, 3, 1, 1), axes=[0, -2])
case("squeeze-to-scalar", "squeeze", unary(1, 1))
case("squeeze-nothing", "squeeze", unary(3, 5))
case("expand_dims-front", "expand_dims", unary(3, 5), axes=[0])
case("expand_dims-neg1", "expand_dims", unary(3, 5), axes=[-1])
case("expand_dims-neg2", "expand_dims", unary(3, 5), axes=[-2])
case("expand_dims-two-neg", "expand_dims", unary(3, 5), axes=[0, -1])
case("expand_dims-interleaved", "expand_dims", unary(3, 5), axes=[1, 3])
case("expand_dims-scalar", "expand_dims", lambda rng: [randn(rng)], axes=[0, -1])

case("flatten-default", "flatten", unary(2, 3, 4))
case("flatten-axis0", "flatten", unary(2, 3, 4), axis=0)
case("flatten-axis2", "flatten", unary(2, 3, 4), axis=2)
case("flatten-axis-rank", "flatten", unary(2, 3, 4), axis=3)
case("flatten-rank1", "flatten", unary(5), axis=1)
case("flatten-axis-neg1", "flatten", unary(2, 3, 4), axis=-1)
case("flatten-axis-neg-rank", "flatten", unary(2, 3, 4), axis=-3)

# convolution


def conv_inputs(data, weight, kernel_layout, bias=False, dtype=F32):
    def make(rng):
        out_channels = weight[kernel_layout.index("O")]
        return [randn(rng, *data, dtype=dtype), randn(rng, *weight, dtype=dtype),
                randn(rng, out_channels, dtype=dtype) if bias else None]
    return make


def conv(id, data, wshape, kernel_layout="OIHW", bias=False, dtype=F32, **attrs):
    case(id, "nn.conv2d", conv_inputs(data, wshape, kernel_layout, bias, dtype),
         kernel_layout=kernel_layout, **attrs)


conv("conv-basic-bias", (1, 3, 7, 7), (4, 3, 3, 3), bias=True)
conv("conv-stride2-pad1", (2, 3, 7, 7), (4, 3, 3, 3), strides=[2, 2], padding=[1, 1, 1, 1])
conv("conv-groups2-bias", (2, 4, 5, 5), (6, 2, 3, 3), bias=True, groups=2)
conv("conv-depthwise", (1, 3, 6, 6), (3, 1, 3, 3), groups=3, padding=[1, 1, 1, 1])
conv("conv-dilation-asym-pad", (1, 2, 9, 8), (3, 2, 3, 2), dilation=[2, 1],
     padding=[1, 0, 2, 1], strides=[1, 2])
conv("conv-nhwc-hwio-dilation", (1, 5, 5, 4), (3, 3, 4, 6), "HWIO", data_layout="NHWC",
     dilation=[2, 2])
conv("conv-nhwc-ohwi-groups-bias", (2, 6, 5, 4), (6, 3, 3, 2), "OHWI", bias=True,
     data_layout="NHWC", groups=2, padding=[0, 1, 1, 0])
conv("conv-nhwc-oihw-stride", (1, 7, 6, 3), (5, 3, 2, 2), "OIHW", data_layout="NHWC",
     strides=[2, 3], bias=True)
conv("conv-nchw-hwio", (1, 3, 5, 5), (3, 3, 3, 2), "HWIO", padding=[2, 2, 2, 2])
conv("conv-nchw-ohwi-groups", (1, 4, 5, 7), (4, 1, 3, 2), "OHWI", groups=2, bias=True)
conv("conv-1x1", (2, 3, 5, 7), (4, 3, 1, 1), bias=True)
conv("conv-1x1-strided", (1, 3, 5, 7), (2, 3, 1, 1), strides=[2, 3])
conv("conv-kernel-covers-input", (1, 2, 3, 3), (2, 2, 3, 3), bias=True)
conv("conv-rect-kernel-asym", (1, 2, 7, 5), (3, 2, 1, 3), strides=[3, 2], padding=[0, 2, 1, 0])
conv("conv-size1-spatial", (3, 5, 1, 1), (7, 5, 1, 1), padding=[1, 0, 0, 1], bias=True)
conv("conv-stride-skips-tail", (1, 1, 8, 8), (1, 1, 2, 2), strides=[3, 3], dilation=[2, 1])
conv("conv-float64", (1, 2, 5, 5), (3, 2, 3, 3), dtype=np.float64, bias=True,
     padding=[1, 1, 1, 1], rtol=1e-12, atol=1e-12)

# pooling


def pool(id, op, shape, **attrs):
    case(id, op, lambda rng: [randn(rng, *shape, scale=2.0)], **attrs)


for _op, _tag in (("nn.max_pool2d", "max"), ("nn.avg_pool2d", "avg")):
    pool(f"{_tag}pool-default-strides", _op, (1, 2, 6, 6), pool_size=[2, 2])
    pool(f"{_tag}pool-odd-default-strides", _op, (2, 3, 7, 5), pool_size=[2, 2])
    pool(f"{_tag}pool-ceil", _op, (2, 3, 7, 7), pool_size=[3, 3], strides=[2, 2],
         ceil_mode=True)
    pool(f"{_tag}pool-ceil-default-strides", _op, (1, 2, 5, 5), pool_size=[2, 2],
         ceil_mode=True)
    pool(f"{_tag}pool-pad", _op, (1, 2, 5, 5), pool_size=[3, 3], strides=[1, 1],
         padding=[1, 1, 1, 1])
    pool(f"{_tag}pool-nhwc-ceil-asym-pad", _op, (1, 5, 5, 2), pool_size=[2, 2], strides=[2, 2],
         ceil_mode=True, padding=[1, 0, 0, 1], data_layout="NHWC")
    pool(f"{_tag}pool-nhwc", _op, (2, 6, 4, 3), pool_size=[3, 2], strides=[1, 2],
         data_layout="NHWC")
    pool(f"{_tag}pool-dilation", _op, (1, 2, 7, 7), pool_size=[2, 2], strides=[1, 1],
         dilation=[2, 2])
    pool(f"{_tag}pool-dilation-ceil-pad", _op, (1, 1, 8, 9), pool_size=[2, 3],
         strides=[2, 2], dilation=[2, 1], padding=[1, 1, 0, 1], ceil_mode=True)
    pool(f"{_tag}pool-rect-ceil", _op, (1, 3, 5, 7), pool_size=[1, 3], strides=[2, 1],
         ceil_mode=True)
    pool(f"{_tag}pool-global", _op, (2, 3, 5, 5), pool_size=[5, 5])
    pool(f"{_tag}pool-size1", _op, (1, 1, 1, 1), pool_size=[1, 1])
case("maxpool-int32-no-pad", "nn.max_pool2d",
     lambda rng: [ints(rng, np.int32, 2, 4, 4, 3, low=-1000, high=1000)], pool_size=[2, 3],
     strides=[1, 1], data_layout="NHWC")
for _inc in (False, True):
    pool(f"avgpool-pad-count_include_pad={_inc}", "nn.avg_pool2d", (1, 2, 5, 5),
         pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], count_include_pad=_inc)
    pool(f"avgpool-ceil-pad-count_include_pad={_inc}", "nn.avg_pool2d", (1, 2, 6, 7),
         pool_size=[3, 3], strides=[2, 2], padding=[1, 0, 1, 1], ceil_mode=True,
         count_include_pad=_inc)
    pool(f"avgpool-nhwc-dil-pad-count_include_pad={_inc}", "nn.avg_pool2d", (1, 7, 6, 2),
         pool_size=[2, 2], strides=[2, 1], padding=[0, 1, 1, 0], dilation=[2, 2],
         ceil_mode=True, data_layout="NHWC", count_include_pad=_inc)

# quantization


def quantize_inputs(shape, dtype, qshape=(), axis=1, spread=3.0, scale=(0.02, 0.1)):
    def make(rng):
        x = randn(rng, *shape, scale=spread)
        s = positive(rng, *qshape, low=scale[0], high=scale[1])
        info = np.iinfo(dtype)
        zp = ints(rng, dtype, *qshape, low=max(info.min, -20) if info.min else 100,
                  high=20 if info.min else 156)
        return [x, s, zp]
    return make


case("quantize-int8-per-tensor", "qnn.quantize", quantize_inputs((3, 5), np.int8))
case("quantize-uint8-per-tensor", "qnn.quantize", quantize_inputs((3, 5), np.uint8),
     dtype="uint8")
case("quantize-int8-per-axis1", "qnn.quantize", quantize_inputs((2, 3, 4), np.int8, (3,)))
case("quantize-uint8-per-axis0", "qnn.quantize", quantize_inputs((5, 3), np.uint8, (5,)),
     axis=0, dtype="uint8")
case("quantize-int8-per-axis-neg1", "qnn.quantize", quantize_inputs((2, 3, 4), np.int8, (4,)),
     axis=-1)
case("quantize-int8-saturates", "qnn.quantize",
     quantize_inputs((4, 17), np.int8, spread=30.0, scale=(0.05, 0.06)))
case("quantize-uint8-saturates-per-axis", "qnn.quantize",
     quantize_inputs((3, 7), np.uint8, (7,), spread=30.0, scale=(0.05, 0.06)), axis=1,
     dtype="uint8")
case("quantize-scale-shape1", "qnn.quantize", quantize_inputs((2, 5), np.int8, (1,)))
case("quantize-rank1-per-axis", "qnn.quantize", quantize_inputs((7,), np.uint8, (7,)), axis=0,
     dtype="uint8")
# x / 0.5 lands exactly on .5 ties: ONNX rounds half to even.
case("quantize-half-even-ties", "qnn.quantize",
     lambda rng: [np.arange(-12, 13, dtype=F32) * F32(0.5) + F32(0.25), scalar(0.5),
                  scalar(3, np.int8)])


def dequantize_inputs(shape, dtype, qshape=(), zp_dtype=None):
    def make(rng):
        x = ints(rng, dtype, *shape, low=-1000 if dtype == np.int32 else None,
                 high=1000 if dtype == np.int32 else None)
        s = positive(rng, *qshape, low=0.01, high=0.2)
        return [x, s, ints(rng, zp_dtype or dtype, *qshape, low=0 if dtype == np.uint8 else -9,
                           high=200 if dtype == np.uint8 else 9)]
    return make


case("dequantize-int8-per-tensor", "qnn.dequantize", dequantize_inputs((3, 5), np.int8))
case("dequantize-uint8-per-axis1", "qnn.dequantize", dequantize_inputs((2, 3, 4), np.uint8, (3,)))
case("dequantize-int8-per-axis0", "qnn.dequantize", dequantize_inputs((5, 3), np.int8, (5,)),
     axis=0)
case("dequantize-int8-per-axis0-square", "qnn.dequantize",  # zp must not go on the last dim
     dequantize_inputs((3, 3), np.int8, (3,)), axis=0)
case("dequantize-uint8-per-axis-neg1", "qnn.dequantize",
     dequantize_inputs((2, 3, 7), np.uint8, (7,)), axis=-1)
case("dequantize-int32", "qnn.dequantize", dequantize_inputs((4, 6), np.int32))
case("dequantize-extremes", "qnn.dequantize",
     lambda rng: [np.array([[-128, -1, 0, 1, 127]], np.int8), scalar(0.125),
                  scalar(-128, np.int8)])
case("dequantize-float64-scale", "qnn.dequantize",
     lambda rng: [ints(rng, np.uint8, 3, 4), positive(rng, 4, dtype=np.float64),
                  ints(rng, np.uint8, 4)], axis=1, rtol=1e-12, atol=1e-12)

# attention


def attention_inputs(b, h, sq, sk, d, dv=None, mask=None, dtype=F32):
    """mask: None, ("bool", shape) or ("float", shape) or ("float-inf", shape)."""
    def make(rng):
        q, k = randn(rng, b, h, sq, d, dtype=dtype), randn(rng, b, h, sk, d, dtype=dtype)
        v = randn(rng, b, h, sk, dv or d, dtype=dtype)
        if mask is None:
            return [q, k, v, None]
        kind, shape = mask
        if kind == "bool":
            m = rng.random(shape) < 0.6
            m[..., 0] = True  # every query row keeps at least key 0 (else softmax is 0/0)
        else:
            m = randn(rng, *shape, dtype=dtype)
            if kind == "float-inf":
                m[..., 1:] = np.where(rng.random(shape)[..., 1:] < 0.4, -np.inf, m[..., 1:])
            elif kind == "float-big":
                m = np.where(rng.random(shape) < 0.3, dtype(-1e9), m).astype(dtype)
        return [q, k, v, m]
    return make


case("attention-plain", "nn.attention", attention_inputs(2, 3, 5, 5, 8))
case("attention-kv-longer-dv", "nn.attention", attention_inputs(2, 2, 5, 7, 8, dv=6))
case("attention-kv-shorter", "nn.attention", attention_inputs(1, 2, 6, 3, 4))
case("attention-bool-mask-2d", "nn.attention",
     attention_inputs(2, 3, 5, 7, 4, mask=("bool", (5, 7))))
case("attention-bool-mask-bcast", "nn.attention",
     attention_inputs(2, 3, 5, 7, 4, mask=("bool", (2, 1, 1, 7))))
case("attention-bool-mask-full", "nn.attention",
     attention_inputs(2, 3, 4, 4, 4, mask=("bool", (2, 3, 4, 4))))
case("attention-float-mask", "nn.attention",
     attention_inputs(2, 3, 5, 7, 4, mask=("float", (1, 1, 5, 7))))
case("attention-float-mask-big-neg", "nn.attention",
     attention_inputs(2, 3, 5, 7, 4, mask=("float-big", (2, 3, 5, 7))))
case("attention-float-mask-inf", "nn.attention",
     attention_inputs(1, 2, 5, 6, 4, mask=("float-inf", (5, 6))))
case("attention-float-mask-1d", "nn.attention",
     attention_inputs(1, 2, 3, 6, 4, mask=("float", (6,))))
case("attention-causal", "nn.attention", attention_inputs(2, 2, 5, 5, 8), causal=True)
case("attention-causal-kv-longer", "nn.attention", attention_inputs(1, 3, 4, 7, 8),
     causal=True)
case("attention-causal-kv-shorter", "nn.attention", attention_inputs(1, 1, 5, 3, 4),
     causal=True)
case("attention-causal-bool-mask", "nn.attention",
     attention_inputs(2, 2, 5, 5, 4, mask=("bool", (2, 1, 5, 5))), causal=True)
case("attention-scale", "nn.attention", attention_inputs(1, 2, 5, 5, 8), scale=0.3)
case("attention-scale-float-mask-causal", "nn.attention",
     attention_inputs(2, 1, 4, 6, 3, mask=("float", (2, 1, 4, 6))), scale=1.7, causal=True)
case("attention-seq1", "nn.attention", attention_inputs(1, 1, 1, 1, 1))
case("attention-float64", "nn.attention",
     attention_inputs(1, 2, 3, 5, 4, mask=("float", (3, 5)), dtype=np.float64), causal=True,
     rtol=1e-12, atol=1e-12)

# quantized convolution

POW2_SCALES = dict(x_scale=0.0625, w_scale=(0.03125, 0.0078125), y_scale=0.5)


def qconv_inputs(data, weight, *, xdt=np.uint8, wdt=np.int8, ydt=np.uint8, per_channel=True,
                 bias=True, kernel_layout="OIHW", pow2=False, wzp_nonzero=False):
    """Random QLinearConv operands. pow2: every scale a power of two, so the float
    decomposition is exact and must match the integer reference bit for bit."""
    def make(rng):
        o = weight[kernel_layout.index("O")]
        x = ints(rng, xdt, *data)
        w = ints(rng, wdt, *weight, low=0 if wdt == np.uint8 else -100,
                 high=200 if wdt == np.uint8 else 100)
        xzp = ints(rng, xdt, low=100 if xdt == np.uint8 else -10,
                   high=150 if xdt == np.uint8 else 10)
        wshape = (o,) if per_channel else ()
        if wdt == np.uint8 or wzp_nonzero:
            wzp = ints(rng, wdt, *wshape, low=90 if wdt == np.uint8 else -5,
                       high=110 if wdt == np.uint8 else 5)
        else:
            wzp = np.zeros(wshape, wdt)  # symmetric weights, as per-channel ONNX models have
        if pow2:
            xs = scalar(POW2_SCALES["x_scale"])
            ws = (np.array([POW2_SCALES["w_scale"][i % 2] for i in range(o)], F32)
                  if per_channel else scalar(POW2_SCALES["w_scale"][0]))
        else:
            xs = positive(rng, low=0.01, high=0.05)
            ws = positive(rng, *wshape, low=0.002, high=0.01)
        # size the output scale so the result spans the output range without saturating much
        taps = math.prod(weight) // o
        spread = float(xs * np.max(ws)) * math.sqrt(taps) * 60.0 * 80.0
        ys = scalar(2.0 ** round(math.log2(spread / 60.0))) if pow2 else \
            scalar(spread / 60.0 * rng.uniform(0.8, 1.2))
        yzp = scalar(128 if ydt == np.uint8 else -3, ydt)
        b = (ints(rng, np.int32, o, low=-5000, high=5000) if bias else None)
        return [x, xs, xzp, w, ws, wzp, ys, yzp, b]
    return make


# With arbitrary scales the decomposition dequantizes to float32, convolves in float32 and
# requantizes with y / y_scale, while the reference accumulates exactly in int64 and rounds
# acc * (x_scale * w_scale / y_scale) in float64. The float32 rounding error (~1e-7 relative)
# can move a value that is within that distance of a .5 rounding boundary to the other side,
# so such an element may be off by exactly 1 step. That is rare: 400 seeds of these cases
# (174k outputs) showed none, so at most 1% of the elements may be off, by at most 1.
# The pow2 cases make every float operation exact and demand bit-exact equality.
QCONV_TIES = dict(max_int_diff=1, max_off_fraction=0.01)

case("qconv-pow2-per-channel-bias-pad", "qnn.conv2d",
     qconv_inputs((1, 2, 6, 6), (4, 2, 3, 3), pow2=True), padding=[1, 1, 1, 1])
case("qconv-pow2-int8-per-tensor-stride", "qnn.conv2d",
     qconv_inputs((2, 3, 7, 7), (4, 3, 3, 3), xdt=np.int8, ydt=np.int8, per_channel=False,
                  bias=False, pow2=True), strides=[2, 2])
case("qconv-pow2-nhwc-hwio", "qnn.conv2d",
     qconv_inputs((1, 5, 6, 4), (3, 3, 4, 6), kernel_layout="HWIO", pow2=True),
     data_layout="NHWC", kernel_layout="HWIO", padding=[1, 0, 1, 2])
case("qconv-pow2-groups-uint8-weight", "qnn.conv2d",
     qconv_inputs((1, 4, 5, 5), (6, 2, 3, 3), wdt=np.uint8, pow2=True), groups=2)
case("qconv-pow2-groups-uint8-weight-per-tensor", "qnn.conv2d",
     qconv_inputs((1, 4, 5, 5), (6, 2, 3, 3), wdt=np.uint8, per_channel=False, pow2=True),
     groups=2, padding=[2, 1, 0, 1])
case("qconv-pow2-ohwi-dilation-wzp", "qnn.conv2d",
     qconv_inputs((1, 7, 7, 2), (4, 2, 2, 2), kernel_layout="OHWI", ydt=np.int8, pow2=True,
                  wzp_nonzero=True),
     data_layout="NHWC", kernel_layout="OHWI", dilation=[2, 2], padding=[1, 1, 0, 0])
case("qconv-per-channel-bias", "qnn.conv2d",
     qconv_inputs((1, 3, 6, 6), (5, 3, 3, 3)), padding=[1, 1, 1, 1],
     **QCONV_TIES)
case("qconv-int8-per-tensor-no-bias", "qnn.conv2d",
     qconv_inputs((2, 2, 5, 5), (3, 2, 2, 2), xdt=np.int8, ydt=np.int8, per_channel=False,
                  bias=False), strides=[2, 1], **QCONV_TIES)
case("qconv-nhwc-hwio-groups", "qnn.conv2d",
     qconv_inputs((1, 5, 5, 4), (3, 3, 2, 4), kernel_layout="HWIO", wzp_nonzero=True),
     data_layout="NHWC", kernel_layout="HWIO", groups=2, padding=[1, 1, 1, 1], **QCONV_TIES)
case("qconv-depthwise-uint8-weight", "qnn.conv2d",
     qconv_inputs((1, 3, 5, 5), (3, 1, 3, 3), wdt=np.uint8), groups=3, strides=[2, 2],
     padding=[0, 1, 1, 0], **QCONV_TIES)  # O == W: zp (3,) must go on O
case("qconv-uint8-weight-per-tensor-bias", "qnn.conv2d",
     qconv_inputs((2, 3, 6, 5), (4, 3, 3, 2), wdt=np.uint8, per_channel=False),
     strides=[1, 2], padding=[1, 0, 1, 1], dilation=[1, 2], **QCONV_TIES)

# the quantized ops past qnn.conv2d (qnn.py, qnn_linear.py, qnn_elementwise.py): the kernels
# and decompositions both follow onnxruntime's float32 steps, so every case is bit-exact


def qparams(rng, dtype, *shape, scale=(0.01, 0.05)):
    """A float32 scale and a zero point of `dtype` (per tensor, or `shape` long)."""
    low, high = (100, 156) if dtype == np.uint8 else (-20, 20)
    return [positive(rng, *shape, low=scale[0], high=scale[1]), ints(rng, dtype, *shape,
                                                                     low=low, high=high)]


def qtensor(dtype, *shape, qshape=(), scale=(0.01, 0.05)):
    """A random int8/uint8 tensor and its quantization parameters."""
    return lambda rng: [ints(rng, dtype, *shape), *qparams(rng, dtype, *qshape, scale=scale)]


def qunary(dtype, shape, out_scale=(0.01, 0.05), out_dtype=None):
    """data, data_scale, data_zero_point, out_scale, out_zero_point."""
    return lambda rng: [*qtensor(dtype, *shape)(rng),
                        *qparams(rng, out_dtype or dtype, scale=out_scale)]


def qbinary(dtype, a_shape, b_shape, out_scale=(0.03, 0.08)):
    return lambda rng: [*qtensor(dtype, *a_shape)(rng), *qtensor(dtype, *b_shape)(rng),
                        *qparams(rng, dtype, scale=out_scale)]


def qproduct(adt, a_shape, bdt, b_shape, qshape=(), ydt=np.uint8, bias=None):
    """a, its qparams, b, its qparams (per tensor or qshape), out qparams sized so the
    products span the output range and saturate at the ends; an int32 bias of `bias` long."""
    def make(rng):
        a, b = qtensor(adt, *a_shape)(rng), qtensor(bdt, *b_shape, qshape=qshape)(rng)
        k = a_shape[-1]
        out = qparams(rng, ydt, scale=(0.03 * math.sqrt(k), 0.06 * math.sqrt(k)))
        extra = [] if bias is None else [None if bias == 0 else
                                          ints(rng, np.int32, bias, low=-3000, high=3000)]
        return [*a, *b, *out, *extra]
    return make


def requantize_ties(rng):
    """int32 accumulators at ratio 0.5: every odd value is a .5 tie, many saturate."""
    x = np.arange(-300, 300, 3, dtype=np.int32).reshape(4, 50)
    return [x, scalar(0.25), scalar(4, np.int32), scalar(0.5), scalar(-7, np.int8)]


case("requantize-int32-ties-saturate", "qnn.requantize", requantize_ties)
case("requantize-uint8-to-int8", "qnn.requantize",
     qunary(np.uint8, (3, 5), out_scale=(0.03, 0.06), out_dtype=np.int8))
case("requantize-int8-per-axis0-to-uint8", "qnn.requantize",
     lambda rng: [*qtensor(np.int8, 4, 3, qshape=(4,))(rng),
                  *qparams(rng, np.uint8, 4, scale=(0.01, 0.04))], axis=0, dtype="uint8")
case("requantize-int8-per-axis-neg1", "qnn.requantize",
     lambda rng: [*qtensor(np.int8, 2, 3, 5, qshape=(5,))(rng),
                  *qparams(rng, np.int8, 5, scale=(0.005, 0.1))], axis=-1)
case("qmatmul-uint8-int8", "qnn.matmul", qproduct(np.uint8, (3, 6), np.int8, (6, 4)))
case("qmatmul-int8-per-column-batched", "qnn.matmul",
     qproduct(np.int8, (2, 3, 5), np.int8, (5, 4), qshape=(4,), ydt=np.int8))
case("qmatmul-broadcast-batch-uint8", "qnn.matmul",
     qproduct(np.uint8, (2, 1, 3, 4), np.uint8, (3, 4, 2)))
case("qmatmul-vector", "qnn.matmul", qproduct(np.int8, (7,), np.int8, (7, 3), ydt=np.int8))
case("qlinear-uint8-per-channel-bias", "qnn.linear",
     qproduct(np.uint8, (4, 6), np.int8, (5, 6), qshape=(5,), bias=5))
case("qlinear-int8-per-tensor-no-bias-3d", "qnn.linear",
     qproduct(np.int8, (2, 3, 8), np.int8, (4, 8), ydt=np.int8, bias=0))
case("qadd-uint8-same-shape", "qnn.add", qbinary(np.uint8, (3, 7), (3, 7)))
case("qadd-int8-row-broadcast", "qnn.add", qbinary(np.int8, (4, 5), (5,), out_scale=(0.02, 0.04)))
case("qadd-int8-column-broadcast", "qnn.add", qbinary(np.int8, (4, 1), (4, 6)))
case("qadd-uint8-scalar-operand", "qnn.add", qbinary(np.uint8, (2, 3, 4), ()))
case("qadd-uint8-outer", "qnn.add", qbinary(np.uint8, (3, 1), (1, 5), out_scale=(0.01, 0.03)))
case("qmultiply-int8-same-shape", "qnn.multiply", qbinary(np.int8, (3, 7), (3, 7),
                                                          out_scale=(0.5, 1.0)))
case("qmultiply-uint8-broadcast", "qnn.multiply", qbinary(np.uint8, (2, 3, 4), (3, 1),
                                                          out_scale=(0.2, 0.5)))
case("qmultiply-int8-scalar-saturates", "qnn.multiply", qbinary(np.int8, (), (4, 5),
                                                                out_scale=(0.001, 0.002)))
case("qglobal-avg-pool-uint8", "qnn.global_avg_pool2d", qunary(np.uint8, (2, 3, 4, 5)))
case("qglobal-avg-pool-int8-nhwc", "qnn.global_avg_pool2d", qunary(np.int8, (1, 3, 3, 4)),
     data_layout="NHWC")
case("qavg-pool-uint8", "qnn.avg_pool2d", qunary(np.uint8, (1, 2, 6, 6)), pool_size=[2, 2])
case("qavg-pool-int8-nhwc-pad-include", "qnn.avg_pool2d", qunary(np.int8, (1, 5, 5, 3)),
     pool_size=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1], data_layout="NHWC",
     count_include_pad=True)
case("qavg-pool-uint8-pad-exclude-ceil", "qnn.avg_pool2d", qunary(np.uint8, (2, 3, 7, 6)),
     pool_size=[3, 2], strides=[2, 2], padding=[1, 0, 0, 1], ceil_mode=True)
case("qsigmoid-uint8", "qnn.sigmoid", qunary(np.uint8, (4, 9), out_scale=(1 / 256, 1 / 200)))
case("qsigmoid-int8-wide-input", "qnn.sigmoid",
     lambda rng: [ints(rng, np.int8, 3, 11), scalar(0.1), scalar(2, np.int8),
                  scalar(1 / 256), scalar(-128, np.int8)])
case("qleaky-relu-int8", "qnn.leaky_relu", qunary(np.int8, (3, 8)), alpha=0.1)
case("qleaky-relu-uint8-default-alpha", "qnn.leaky_relu", qunary(np.uint8, (5, 4),
                                                                  out_scale=(0.01, 0.03)))
case("qsoftmax-uint8", "qnn.softmax",  # 1 / out_scale not integral: its floor counts
     qunary(np.uint8, (3, 10), out_scale=(0.003, 0.005)))
case("qsoftmax-int8-axis1", "qnn.softmax",
     lambda rng: [*qtensor(np.int8, 2, 5, 3, scale=(0.05, 0.2))(rng), scalar(1 / 256),
                  scalar(-128, np.int8)], axis=1)
case("qsoftmax-int8-sharp", "qnn.softmax",  # a probability that rounds to 1 saturates
     lambda rng: [ints(rng, np.int8, 4, 6), scalar(0.08), scalar(0, np.int8),
                  scalar(1 / 256), scalar(-128, np.int8)], axis=-1)


# comparisons, predicates, signs and remainders (derived.py)


def pair(make_a, make_b):
    return lambda rng: [make_a(rng), make_b(rng)]


def with_specials(rng, *shape):
    x = randn(rng, *shape, scale=3.0)
    x.flat[::5] = np.nan
    x.flat[1::7] = np.inf
    x.flat[2::7] = -np.inf
    x.flat[3::11] = 0.0
    return x


def small_ints(dtype, *shape):
    return lambda rng: ints(rng, dtype, *shape, low=-6, high=6)


for _op in ("not_equal", "greater_equal", "less_equal"):
    case(f"{_op}-float-nan-broadcast", _op,
         pair(lambda rng: with_specials(rng, 3, 5), lambda rng: with_specials(rng, 5)))
    case(f"{_op}-int32", _op, pair(small_ints(np.int32, 4, 1), small_ints(np.int32, 1, 3)))
case("logical_xor-broadcast", "logical_xor",
     lambda rng: [rng.random((3, 4)) < 0.5, rng.random((4,)) < 0.5])
case("isnan-specials", "isnan", lambda rng: [with_specials(rng, 4, 6)])
case("isnan-int64", "isnan", lambda rng: [ints(rng, np.int64, 5)])
case("isinf-both", "isinf", lambda rng: [with_specials(rng, 4, 6)])
case("isinf-positive", "isinf", lambda rng: [with_specials(rng, 3, 7)], detect_negative=False)
case("isinf-negative", "isinf", lambda rng: [with_specials(rng, 3, 7)], detect_positive=False)
case("isinf-int32", "isinf", lambda rng: [ints(rng, np.int32, 5)])
case("sign-specials", "sign", lambda rng: [with_specials(rng, 4, 6)])
case("sign-int8", "sign", lambda rng: [ints(rng, np.int8, 9)])
case("sign-uint8", "sign", lambda rng: [ints(rng, np.uint8, 9)])
case("trunc", "trunc", lambda rng: [randn(rng, 4, 6, scale=4.0)])
case("expm1", "expm1", lambda rng: [randn(rng, 4, 6, scale=1e-3)])
case("expm1-wide", "expm1", unary(4, 6, scale=5.0), rtol=1e-5, atol=1e-6)
case("log1p", "log1p", lambda rng: [randn(rng, 4, 6, scale=1e-3)])
case("log2", "log2", lambda rng: [positive(rng, 4, 6, low=1e-3, high=1e3)])
case("log10", "log10", lambda rng: [positive(rng, 4, 6, low=1e-3, high=1e3)])
case("exp2", "exp2", unary(4, 6, scale=5.0), rtol=1e-5, atol=1e-6)
case("tan", "tan", unary(4, 6, scale=1.2))
case("sinh", "sinh", unary(4, 6, scale=5.0))
case("sinh-small-and-huge", "sinh", lambda rng: [np.array([1e-4, -1e-4, 89.0, -89.0], F32)])
case("cosh", "cosh", unary(4, 6, scale=5.0))
case("asinh", "asinh", unary(4, 6, scale=10.0))
case("acosh", "acosh", lambda rng: [positive(rng, 4, 6, low=1.0, high=50.0)])
case("atanh", "atanh", lambda rng: [positive(rng, 4, 6, low=-0.95, high=0.95)])
case("log1p-wide", "log1p", lambda rng: [positive(rng, 4, 6, low=-0.9, high=50.0)])
case("remainder-float-negative", "remainder",
     pair(lambda rng: randn(rng, 4, 6, scale=10.0), lambda rng: randn(rng, 6, scale=3.0)))
case("remainder-int32-negative", "remainder",
     pair(small_ints(np.int32, 5, 4), lambda rng: np.array([-3, 2, -1, 5], np.int32)))
case("remainder-int64-zero-divisor", "remainder",
     pair(small_ints(np.int64, 6), lambda rng: np.array([0, 3, -3, 0, 4, -4], np.int64)))
case("remainder-uint8", "remainder",
     pair(lambda rng: ints(rng, np.uint8, 6), lambda rng: ints(rng, np.uint8, 6, low=1)))

# grid sampling (conv.py): every mode and padding, points inside and outside the data
for _mode, _pad, _align in [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                            ("nearest", "border", False), ("bicubic", "reflection", False),
                            ("bicubic", "zeros", True)]:
    case(f"grid_sample-{_mode}-{_pad}-{'align' if _align else 'half'}", "nn.grid_sample",
         pair(lambda rng: randn(rng, 2, 3, 4, 5), lambda rng: randn(rng, 2, 3, 6, 2, scale=1.5)),
         mode=_mode, padding_mode=_pad, align_corners=_align)
case("grid_sample-3d-bilinear-border", "nn.grid_sample",
     pair(lambda rng: randn(rng, 1, 2, 3, 4, 5), lambda rng: randn(rng, 1, 2, 3, 4, 3, scale=1.5)),
     padding_mode="border")

# special functions (derived.py)
case("atan2-specials", "atan2",
     pair(lambda rng: with_specials(rng, 4, 6), lambda rng: with_specials(rng, 6)))
case("atan2-signed-zeros", "atan2", lambda rng: [np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0], F32),
                                                 np.array([0.0, 0.0, -0.0, -0.0, -0.0, -0.0], F32)])
case("erfc", "erfc", unary(4, 6, scale=3.0))
# the right tail relative to itself (erfc(9) = 4e-37): not 1 - erf(x), which is 0 there
case("erfc-tail-relative", "erfc", lambda rng: [positive(rng, 4, 6, low=2.0, high=9.0)],
     rtol=1e-5, atol=0.0)
case("erfc-specials", "erfc", lambda rng: [np.array([0.0, -1.0, 1.0, -9.0, 10.0, np.inf, -np.inf,
                                                     np.nan], F32)])
case("erfcx", "erfcx", unary(4, 6, scale=3.0))
case("erfcx-tail-relative", "erfcx", lambda rng: [positive(rng, 4, 6, low=2.0, high=1e4)],
     rtol=1e-5, atol=0.0)
case("erfcx-specials", "erfcx", lambda rng: [np.array([0.0, -1.0, 1.0, -9.0, 30.0, 1e30, np.inf,
                                                       -np.inf, np.nan], F32)])
case("lgamma", "lgamma", unary(4, 6, scale=6.0))
case("digamma", "digamma", unary(4, 6, scale=6.0))
case("digamma-poles-and-specials", "digamma", lambda rng: [np.array(
    [0.0, -1.0, -2.5, 1.0, 1.4616321, 1e-6, 30.5, 1e30, np.inf, -np.inf, np.nan], F32)])
case("lgamma-poles-and-specials", "lgamma", lambda rng: [np.array(
    [0.0, -1.0, -2.5, 1.0, 2.0, 1e-6, 30.5, 1e30, np.inf, -np.inf, np.nan], F32)])

# activations (activations.py)
case("elu", "nn.elu", unary(3, 5, scale=3.0))
case("elu-alpha", "nn.elu", unary(2, 7, scale=3.0), alpha=0.3)
case("selu", "nn.selu", unary(3, 5, scale=3.0))
case("selu-onnx-params", "nn.selu", unary(4, 4, scale=3.0), alpha=1.5, gamma=2.0)
case("celu", "nn.celu", unary(3, 5, scale=3.0))
case("celu-alpha2", "nn.celu", unary(3, 5, scale=3.0), alpha=2.0)
case("softplus", "nn.softplus", unary(3, 5, scale=10.0))
case("softplus-beta-threshold", "nn.softplus", unary(3, 5, scale=10.0), beta=2.0,
     threshold=5.0)
case("softsign", "nn.softsign", unary(3, 5, scale=5.0))
case("mish", "nn.mish", unary(3, 5, scale=5.0))
case("hardsigmoid", "nn.hardsigmoid", unary(3, 5, scale=4.0))
case("hardsigmoid-torch", "nn.hardsigmoid", unary(3, 5, scale=4.0), alpha=1 / 6)
case("hardswish", "nn.hardswish", unary(4, 6, scale=4.0))
case("thresholded_relu", "nn.thresholded_relu", unary(3, 5, scale=2.0))
case("thresholded_relu-negative", "nn.thresholded_relu", unary(3, 5), alpha=-0.5)
case("shrink-hard", "nn.shrink", unary(3, 5))
case("shrink-soft", "nn.shrink", unary(3, 5), lambd=0.3, bias=0.3)
case("prelu-channel", "nn.prelu", pair(lambda rng: randn(rng, 2, 3, 4),
                                       lambda rng: randn(rng, 3, 1)))
case("prelu-scalar-const", "nn.prelu", pair(lambda rng: randn(rng, 2, 5),
                                            lambda rng: Const(randn(rng, 1))))

# indexing, scans and selection (indexing.py)


def gather_inputs(data_shape, index_shape, axis, dtype=np.int64):
    def make(rng):
        dim = data_shape[axis]
        return [randn(rng, *data_shape),
                rng.integers(-dim, dim, index_shape).astype(dtype)]
    return make


case("gather_elements-axis1", "gather_elements", gather_inputs((3, 4), (3, 6), 1), axis=1)
case("gather_elements-axis0-smaller", "gather_elements", gather_inputs((5, 4, 3), (2, 3, 3), 0))
case("gather_elements-neg-axis-int32", "gather_elements",
     gather_inputs((2, 3, 4), (2, 2, 5), -1, np.int32), axis=-1)
case("cumsum-axis1", "cumsum", unary(3, 7), axis=1)
case("cumsum-exclusive-reverse", "cumsum", unary(9, 2), axis=0, exclusive=True, reverse=True)
case("cumsum-int64-reverse", "cumsum", lambda rng: [ints(rng, np.int64, 2, 17, low=-9,
                                                          high=9)], axis=-1, reverse=True)
case("cumsum-int8-wraps", "cumsum", lambda rng: [ints(rng, np.int8, 20)], exclusive=True)
case("cumsum-length1", "cumsum", unary(4, 1), axis=1, exclusive=True)
case("cumprod-axis1", "cumprod", unary(3, 7), axis=1)
case("cumprod-exclusive-reverse", "cumprod", unary(9, 2), axis=0, exclusive=True,
     reverse=True)
case("cumprod-int32", "cumprod", lambda rng: [ints(rng, np.int32, 2, 6, low=-3, high=3)],
     axis=-1)
case("trilu-upper", "trilu", unary(4, 6))
case("trilu-lower-k", "trilu", unary(2, 5, 3), upper=False, k=-1)
case("trilu-upper-k2-bool", "trilu", lambda rng: [rng.random((3, 5)) < 0.5], k=2)
case("tile", "tile", unary(2, 3), repeats=[2, 3])
case("tile-zero-int", "tile", lambda rng: [ints(rng, np.int32, 3, 1)], repeats=[1, 0])
case("argmin-float", "argmin", unary(4, 6), axis=1)
case("argmin-int8-extremes", "argmin",
     lambda rng: [np.array([[5, -128, 127, -128], [127, 0, 127, 3]], np.int8)],
     axis=-1, select_last_index=True)
case("argmin-uint8", "argmin", lambda rng: [ints(rng, np.uint8, 3, 5)], keepdims=False)
case("argmin-bool", "argmin", lambda rng: [np.array([True, False, False])],
     select_last_index=True)
case("dft-real", "signal.dft", unary(3, 16, 1))
case("dft-complex-axis0-padded", "signal.dft", unary(5, 3, 2), axis=0, length=8)
case("dft-inverse-ortho-truncated", "signal.dft", unary(2, 9, 4, 2), axis=1, inverse=True,
     length=6, norm="ortho")
case("dft-onesided-odd", "signal.dft", unary(2, 4, 15, 1), onesided=True)
case("dft-onesided-inverse-to-real", "signal.dft", unary(3, 7, 2), inverse=True,
     onesided=True, length=13)

# --- edge inputs: rejected up front by the inference, or handled alike by both sides ------
# (each was once accepted by the inference while the decomposition and kernel disagreed)

EDGE_REJECTED = [  # ONNX does not define these; the inference says so, naming the op
    Case("avgpool-int8", "nn.avg_pool2d", lambda rng: [ints(rng, np.int8, 1, 2, 4, 4)],
         dict(pool_size=[2, 2])),
    Case("quantize-float64-data-float32-scale", "qnn.quantize",
         lambda rng: [randn(rng, 3, 4, dtype=np.float64), scalar(0.05), scalar(2, np.int8)]),
    Case("quantize-float16-data-float32-scale", "qnn.quantize",
         lambda rng: [randn(rng, 3, 4, dtype=np.float16), scalar(0.05), scalar(2, np.int8)]),
    Case("attention-float64-mask-float32-q", "nn.attention",
         lambda rng: [randn(rng, 1, 2, 3, 4), randn(rng, 1, 2, 5, 4), randn(rng, 1, 2, 5, 4),
                      randn(rng, 3, 5, dtype=np.float64)]),
]
EDGE_AGREE = [  # integer pools pad with the dtype minimum; out-of-range clip bounds saturate
    Case("maxpool-int8-pad", "nn.max_pool2d", lambda rng: [ints(rng, np.int8, 1, 2, 5, 5)],
         dict(pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])),
    Case("maxpool-int8-ceil", "nn.max_pool2d", lambda rng: [ints(rng, np.int8, 1, 2, 5, 5)],
         dict(pool_size=[2, 2], ceil_mode=True)),
    Case("clip-uint8-negative-min", "clip", lambda rng: [ints(rng, np.uint8, 3, 5)],
         dict(min=-1.0, max=100.0)),
    Case("clip-int8-max-above-range", "clip", lambda rng: [ints(rng, np.int8, 3, 5)],
         dict(min=-10.0, max=300.0)),
    Case("quantize-rank1-one-element-scale", "qnn.quantize",
         lambda rng: [randn(rng, 7), np.array([0.05], F32), np.array([1], np.int8)]),
    Case("dequantize-rank1-one-element-scale", "qnn.dequantize",
         lambda rng: [ints(rng, np.int8, 7), np.array([0.05], F32), np.array([1], np.int8)]),
]
EDGE_CASES = EDGE_REJECTED + EDGE_AGREE

CASE_IDS = [c.id for c in CASES + EDGE_CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS), "duplicate case ids"


def params(cases):
    return [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)]
                         if c.xfail else []) for c in cases]


def seed_of(case: Case) -> int:
    return sum(map(ord, case.id))  # fixed per case, different between cases


# --- tests --------------------------------------------------------------------------------


def composite_ops() -> set[str]:
    """The core's composites (plugins test their own)."""
    from legato.ops import CORE_OPS
    return {name for name in CORE_OPS if legato.get_op(name).level > 0}


def test_every_composite_op_has_cases():
    ops = composite_ops()
    assert {"mean", "nn.softmax", "nn.attention", "qnn.conv2d"} <= ops
    assert {c.op for c in CASES} == ops


def test_level2_ops_have_cases():
    level2 = {n for n in composite_ops() if legato.get_op(n).level >= 2}
    assert {"nn.attention", "qnn.conv2d"} <= level2
    assert {c.op for c in CASES if legato.get_op(c.op).level >= 2} == level2


@pytest.mark.parametrize("case", params(CASES))
def test_decomposition_matches_reference(case):
    check_case(case, seed_of(case))


@pytest.mark.parametrize("case", params(CASES))
def test_op_at_or_below_max_level_is_kept(case):
    """max_level >= the op's level changes nothing, and the op's kernel produces exactly the
    inferred type (the executor checks every kernel result against the call's type)."""
    mod, feeds = build(case.op, case.make(np.random.default_rng(seed_of(case))), case.attrs)
    level = legato.get_op(case.op).level
    kept = legato.legalize(mod, max_level=level).module
    assert [c.op for c in main_calls(kept)] == [case.op]
    assert legato.structural_equal(kept, mod)
    out = legato.reference(kept)(*feeds)
    result = mod.functions["main"].results[0]
    assert (out.shape, out.dtype.name) == (result.shape, result.dtype)


@pytest.mark.parametrize("case", params([c for c in CASES
                                         if legato.get_op(c.op).level >= 2]))
def test_partial_lowering_to_level1(case):
    mod, feeds, expected, tol = check_case(case, seed_of(case))
    part = legato.legalize(mod, max_level=1).module
    found = levels(part)
    assert max(found.values()) <= 1, found
    assert case.op not in found
    assert 1 in found.values(), f"lowering {case.op} to level 1 kept no level-1 op: {found}"
    assert_matches(legato.reference(part)(*feeds), expected, what="max_level=1", **tol)
    # lowering the partially lowered module the rest of the way still agrees
    full = legato.legalize(part, max_level=0).module
    assert set(levels(full).values()) <= {0}
    assert_matches(legato.reference(full)(*feeds), expected, what="max_level=1 then 0", **tol)


@pytest.mark.parametrize("case", params(EDGE_REJECTED))
def test_edge_inputs_are_rejected_naming_the_op(case):
    with pytest.raises(legato.LegatoError, match=case.op.replace(".", r"\.")):
        build(case.op, case.make(np.random.default_rng(seed_of(case))), case.attrs)


@pytest.mark.parametrize("case", params(EDGE_AGREE))
def test_edge_inputs_agree(case):
    check_case(case, seed_of(case))


# --- property tests over random shapes and axes -------------------------------------------

# derandomized: make test runs the same examples every time (make fuzz explores)
HYPO = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@st.composite
def shapes_and_axes(draw, allow_none=True, allow_empty=False):
    """A shape (rank 1-4, dims 1-6) and a subset of its axes, each written positive or
    negative at random (None: every axis)."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    rank = len(shape)
    if allow_none and draw(st.booleans()):
        return shape, None
    chosen = draw(st.lists(st.integers(0, rank - 1), unique=True,
                           min_size=0 if allow_empty else 1, max_size=rank))
    axes = [a - rank if draw(st.booleans()) else a for a in chosen]
    return shape, axes


def check_random(op, arrays, attrs, rtol=1e-5, atol=1e-5):
    """One random call against the reference, within the op's documented error bound
    (relative to max(|reference|, 1); a float32 layer_norm of a nearly constant row loses
    digits to cancellation that the float64 reference keeps)."""
    from legato.ops.tolerance import error_bound
    atol = max(atol, error_bound(op) * max(1.0, *(float(np.max(np.abs(a), initial=0))
                                                   for a in arrays if a is not None)))
    case = Case(f"hypothesis-{op}", op, lambda rng: arrays, attrs, rtol=rtol, atol=atol)
    check_case(case, 0)


SEEDS = st.integers(0, 2**32 - 1)


@HYPO
@given(sa=shapes_and_axes(allow_empty=True), keepdims=st.booleans(), seed=SEEDS)
def test_mean_random(sa, keepdims, seed):
    shape, axes = sa
    x = randn(np.random.default_rng(seed), *shape, scale=3.0)
    check_random("mean", [x], {"axes": axes, "keepdims": keepdims})


@HYPO
@given(sa=shapes_and_axes(), keepdims=st.booleans(), unbiased=st.booleans(), seed=SEEDS)
def test_variance_random(sa, keepdims, unbiased, seed):
    shape, axes = sa
    count = math.prod(shape[a] for a in (range(len(shape)) if axes is None else axes))
    assume(not (unbiased and count == 1))  # N-1 = 0: undefined
    x = randn(np.random.default_rng(seed), *shape, scale=2.0, loc=1.0)
    check_random("variance", [x], {"axes": axes, "keepdims": keepdims, "unbiased": unbiased})


@HYPO
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data(),
       op=st.sampled_from(["nn.softmax", "nn.log_softmax"]), seed=SEEDS)
def test_softmax_random(shape, data, op, seed):
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1), label="axis")
    x = randn(np.random.default_rng(seed), *shape, scale=5.0)
    check_random(op, [x], {"axis": axis})


@HYPO
@given(sa=shapes_and_axes(allow_none=False), data=st.data(),
       op=st.sampled_from(["nn.layer_norm", "nn.rms_norm"]), seed=SEEDS)
def test_norms_random(sa, data, op, seed):
    shape, axes = sa
    rng = np.random.default_rng(seed)
    x = randn(rng, *shape, scale=2.0, loc=0.5)

    def param():
        """Absent, or a tensor broadcasting against the trailing dims of x."""
        if not data.draw(st.booleans()):
            return None
        k = data.draw(st.integers(0, len(shape)))
        tail = [1 if data.draw(st.booleans()) else d for d in shape[len(shape) - k:]]
        return randn(rng, *tail)

    params_ = [param()] if op == "nn.rms_norm" else [param(), param()]
    epsilon = data.draw(st.sampled_from([1e-5, 1e-3]))
    check_random(op, [x, *params_], {"axes": axes, "epsilon": epsilon})


@HYPO
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), seed=SEEDS,
       op_attrs=st.sampled_from([
           ("nn.relu", {}), ("nn.silu", {}), ("nn.leaky_relu", {"alpha": 0.1}),
           ("nn.gelu", {"approximate": "none"}), ("nn.gelu", {"approximate": "tanh"}),
           ("clip", {"min": -0.5}), ("clip", {"max": 0.5}), ("clip", {"min": -1, "max": 1.0})]))
def test_activations_random(shape, seed, op_attrs):
    op, attrs = op_attrs
    x = randn(np.random.default_rng(seed), *shape, scale=3.0)
    check_random(op, [x], attrs)
