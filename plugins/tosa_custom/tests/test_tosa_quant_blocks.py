"""Quantized blocks as an integer-only NPU takes them from tosa_custom (TOSA 1.0 pro_int):
a residual block of int8 convolutions, a residual add and a max pool emits for pro_int
alone (no float operator), stays NHWC from its input to its output (two TRANSPOSEs), and
runs on the TOSA reference model within one step of cpu_ref; a quantize at a float -> int
boundary is one CAST, bit-exact with cpu_ref."""
from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import legato
from legato import GraphBuilder
from legato_tosa_custom import backend

RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def f32(value):
    return np.asarray(value, np.float32)


def operators(text: str) -> collections.Counter:
    return collections.Counter(re.findall(r'"(tosa\.\w+)"\(', text))


def qconv(g, rng, x, scale, zero, out_channels, kernel, out_scale, out_zero, groups=1):
    """qnn.conv2d of x (NCHW) with random int8 per-channel weights, 'same' padding."""
    channels = x.shape[1]
    w = rng.integers(-127, 128, (out_channels, channels // groups, kernel, kernel))
    pad = kernel // 2
    return g.call("qnn.conv2d", x, g.const(f32(scale)), g.const(np.asarray(zero, x.dtype)),
                  g.const(w.astype(np.int8)),
                  g.const(f32(rng.uniform(0.002, 0.006, out_channels))),
                  g.const(np.zeros(out_channels, np.int8)), g.const(f32(out_scale)),
                  g.const(np.asarray(out_zero, x.dtype)),
                  g.const(rng.integers(-500, 500, out_channels).astype(np.int32)),
                  padding=[pad] * 4, groups=groups)


def residual_block(dtype: str):
    """int8/uint8 NCHW in and out, as a model without its float boundaries
    (benchmarks/tosa_int.py --int-io): conv, depthwise conv, residual add, max pool,
    1x1 conv."""
    rng = np.random.default_rng(4)
    low = RANGES[dtype][0]
    g = GraphBuilder()
    x = g.input("x", (2, 8, 10, 10), dtype)
    # scales as calibration gives them: no simple ratios, whose exact ties RESCALE rounds
    # up and cpu_ref's float32 arithmetic either way
    c1 = qconv(g, rng, x, 0.0493, low + 120, 8, 3, 0.2113, low + 110)
    c2 = qconv(g, rng, c1, 0.2113, low + 110, 8, 3, 0.1487, low + 130, groups=8)
    s = g.call("qnn.add", c1, g.const(f32(0.2113)), g.const(np.asarray(low + 110, dtype)), c2,
               g.const(f32(0.1487)), g.const(np.asarray(low + 130, dtype)),
               g.const(f32(0.3071)), g.const(np.asarray(low + 100, dtype)))
    p = g.call("nn.max_pool2d", s, pool_size=[2, 2], strides=[2, 2])
    y = qconv(g, rng, p, 0.3071, low + 100, 4, 1, 0.2467, low + 128)
    return g.build(y), rng.integers(low, low + 256, (2, 8, 10, 10)).astype(dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_a_quantized_residual_block_is_integer_only_and_nhwc_throughout(tools, dtype):
    """Every operator integer (pro_int alone validates, and no f32 type is printed), the
    convolutions int8, the residual add RESCALE / ADD / RESCALE in int32, and one
    TRANSPOSE in and one out: the layout pass carries NHWC through qnn.conv2d, qnn.add and
    the pool (it wrapped each convolution in a pair before, 8 here)."""
    module, data = residual_block(dtype)
    text = str(legato.compile(module, backend("pro_int")).artifact)
    ops = operators(text)
    assert "f32" not in text, ops
    assert ops["tosa.transpose"] <= 2, ops
    assert ops["tosa.conv2d"] == 2 and ops["tosa.depthwise_conv2d"] == 1, ops
    assert ops["tosa.add"] == 1 and ops["tosa.max_pool2d"] == 1, ops
    (got,) = tools.run_reference(text, [data], validate=True)
    want = np.asarray(legato.compile(module, "cpu_ref")(data))
    assert got.dtype == want.dtype and got.shape == want.shape
    off = np.abs(got.astype(np.int64) - want.astype(np.int64))
    # RESCALE rounds the exact product half up, cpu_ref a float32 product half to even:
    # they differ on about 1 element in 10**5 per layer (measured here: none)
    assert off.max() <= 1 and (off > 0).mean() < 0.005, (off.max(), (off > 0).mean())


def test_qnn_add_rounds_the_exact_sum(tools):
    """qnn.add as TFLite's legalization computes it (each input RESCALEd to int32 at 2**20
    steps of twice the larger input scale, ADD, RESCALE to the output) over every pair of
    int8 inputs: within one step of cpu_ref, and equal to the exact sum rounded wherever
    cpu_ref is not. cpu_ref reproduces onnxruntime's QLinearAdd in float32 (ratios
    `scale / out_scale` and a fused multiply-add, each rounded to float32): it is off the
    exact sum by up to about 2e-5 of a step, so it differs where the exact sum lies that
    close to a half (measured on the 52 adds of ResNet-50 and MobileNetV2: 10 of 3.4
    million input pairs)."""
    g = GraphBuilder()
    a, x = g.input("a", (256, 256), "int8"), g.input("b", (256, 256), "int8")
    scales, zeros = (0.15009598, 0.14598107, 0.09763936), (-1, 4, -128)
    y = g.call("qnn.add", a, g.const(f32(scales[0])), g.const(np.int8(zeros[0])), x,
               g.const(f32(scales[1])), g.const(np.int8(zeros[1])), g.const(f32(scales[2])),
               g.const(np.int8(zeros[2])))
    module = g.build(y)
    values = np.arange(-128, 128).astype(np.int8)
    pairs = list(np.meshgrid(values, values, indexing="ij"))
    text = str(legato.compile(module, backend("pro_int")).artifact)
    assert "f32" not in text and operators(text)["tosa.add"] == 1
    (got,) = tools.run_reference(text, pairs, validate=True)
    want = np.asarray(legato.compile(module, "cpu_ref")(*pairs)).astype(np.int64)
    s = np.asarray(scales, np.float64)
    exact = ((pairs[0] - zeros[0]) * s[0] + (pairs[1] - zeros[1]) * s[1]) / s[2] + zeros[2]
    nearest = np.clip(np.floor(exact + 0.5), -128, 127)
    differ = got != want
    assert np.abs(got - want).max() <= 1
    assert (got[differ] == nearest[differ]).all()
    assert differ.sum() <= 3, differ.sum()


@pytest.mark.parametrize("dtype, zero, scale", [
    ("int8", -3, 0.5), ("int8", 0, 0.25), ("uint8", 130, 0.25),
    ("int8", 5, [0.5, 0.25, 1.0, 2.0])])
def test_a_quantize_is_one_cast_bit_exact(tools, dtype, zero, scale):
    """QuantizeLinear at a float -> int boundary: MUL by 1 / scale, CLAMP to the range the
    zero point leaves, one CAST (TOSA rounds ties to even, as numpy's rint), a RESCALE by 1
    adding the zero point (none for int8 with zero point 0); no FLOOR/SELECT emulation of
    the rounding. Ties (quarters and halves), values past the range and past int32's are
    bit-exact with cpu_ref; per-axis scales along axis 1."""
    s = f32(scale)
    g = GraphBuilder()
    x = g.input("x", (3, 4, 8), "float32")
    z = np.full(s.shape, zero, dtype) if s.ndim else np.asarray(zero, dtype)
    q = g.call("qnn.quantize", x, g.const(s), g.const(z), dtype=dtype, axis=1)
    module = g.build(q)
    text = str(legato.compile(module, "tosa_custom_int").artifact)
    ops = operators(text)
    assert ops["tosa.cast"] == 1 and ops["tosa.clamp"] == 1, ops
    assert not {"tosa.floor", "tosa.ceil", "tosa.select"} & set(ops), ops
    values = (np.random.default_rng(0).integers(-700, 700, (3, 4, 8)) / 4).astype(np.float32)
    values[0, 0, :6] = [1e30, -1e30, 3e9, -3e9, 0.5, -0.5]
    (got,) = tools.run_reference(text, [values], validate=True)
    want = np.asarray(legato.compile(module, "cpu_ref")(values))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_round_is_a_cast_to_int32_and_back(tools):
    """round (DynamicQuantizeLinear's, which onnxruntime's quantize_dynamic writes as
    primitives) is CAST to int32 and back where |x| < 2**23, x itself beyond (integers
    already), at infinities and NaN: no FLOOR emulation; equal to numpy's rint."""
    values = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.49999976, -7.5, 2.0 ** 23 + 1, 3e9,
                       -3e38, np.inf, -np.inf, np.nan, 1234.5678], np.float32)
    g = GraphBuilder()
    module = g.build(g.round(g.input("x", values.shape, "float32")))
    text = str(legato.compile(module, "tosa_custom_int").artifact)
    ops = operators(text)
    assert ops["tosa.cast"] == 2 and "tosa.floor" not in ops, ops
    (got,) = tools.run_reference(text, [values], validate=True)
    np.testing.assert_array_equal(got, np.rint(values))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_the_float_output_stage_adds_by_a_table_of_cpu_refs_sums(tools, dtype):
    """backend(output_stage='float') takes onnxruntime's arithmetic for qnn.add too: one
    GATHER of its 65,536 sums, indexed by the input pair, equal to cpu_ref on every pair,
    also where scales in a simple ratio (0.2 and 0.15 into 0.3) make exact ties that the
    RESCALE form rounds up (thousands of pairs apart), and broadcast with b one value per
    row (onnxruntime folds such an operand first)."""
    low = RANGES[dtype][0]
    values = np.arange(low, low + 256).astype(dtype)
    cases = [((256, 256), (256, 256), list(np.meshgrid(values, values, indexing="ij"))),
             ((256, 8), (256, 1), [np.resize(values, (256, 8)), values.reshape(256, 1)])]
    float_stage = backend("pro_fp+pro_int", output_stage="float")
    for a_shape, b_shape, inputs in cases:
        g = GraphBuilder()
        a, x = g.input("a", a_shape, dtype), g.input("b", b_shape, dtype)
        y = g.call("qnn.add", a, g.const(f32(0.2)), g.const(np.asarray(low + 110, dtype)), x,
                   g.const(f32(0.15)), g.const(np.asarray(low + 130, dtype)),
                   g.const(f32(0.3)), g.const(np.asarray(low + 100, dtype)))
        module = g.build(y)
        want = np.asarray(legato.compile(module, "cpu_ref")(*inputs))
        text = str(legato.compile(module, float_stage).artifact)
        assert operators(text)["tosa.gather"] == 1
        (got,) = tools.run_reference(text, inputs, validate=True)
        np.testing.assert_array_equal(got, want)
        if a_shape == b_shape:
            rescaled = str(legato.compile(module, backend("pro_int")).artifact)
            (other,) = tools.run_reference(rescaled, inputs)
            assert (other != want).sum() > 1000
