"""The layout pass on quantized programs: what it knows of the qnn ops comes from their
definitions (a `data_layout` attribute: the op runs in the target layout; elementwise: the
perm is carried, one-value quantization parameters pass as they are, and an `axis`
attribute follows the perm), so consecutive quantized convolutions stay NHWC."""
from __future__ import annotations

import numpy as np

import legato


def f32(value):
    return np.asarray(value, np.float32)


def _qconv(g, rng, x, groups=1):
    channels = x.shape[1]
    w = rng.integers(-127, 128, (channels, channels // groups, 3, 3)).astype(np.int8)
    return g.call("qnn.conv2d", x, g.const(f32(0.05)), g.const(np.int8(3)), g.const(w),
                  g.const(f32(rng.uniform(0.002, 0.006, channels))),
                  g.const(np.zeros(channels, np.int8)), g.const(f32(0.21)), g.const(np.int8(-5)),
                  None, padding=[1, 1, 1, 1], groups=groups)


def quantized_program():
    """float in, quantize, two quantized convs, a residual qnn.add (scalar parameters), a
    global average pool, dequantize per channel (axis 1)."""
    rng = np.random.default_rng(2)
    g = legato.GraphBuilder()
    x = g.input("x", (1, 4, 6, 6))
    q = g.call("qnn.quantize", x, g.const(f32(0.05)), g.const(np.int8(3)), dtype="int8")
    c1 = _qconv(g, rng, q)
    c2 = _qconv(g, rng, c1, groups=4)
    s = g.call("qnn.add", c1, g.const(f32(0.21)), g.const(np.int8(-5)), c2,
               g.const(f32(0.21)), g.const(np.int8(-5)), g.const(f32(0.33)), g.const(np.int8(2)))
    p = g.call("qnn.global_avg_pool2d", s, g.const(f32(0.33)), g.const(np.int8(2)),
               g.const(f32(0.1)), g.const(np.int8(0)))
    y = g.call("qnn.dequantize", p, g.const(f32([0.1, 0.2, 0.1, 0.3])),
               g.const(np.int8([0, 1, 2, 3])), axis=1)
    return g.build(y), rng


def test_quantized_convolutions_stay_nhwc_between_one_transpose_in_and_one_out():
    module, rng = quantized_program()
    nhwc = legato.convert_layout(module, "NHWC")
    calls = nhwc.main.calls
    assert [c.attrs["data_layout"] for c in calls if "data_layout" in c.attrs] == ["NHWC"] * 3
    assert sum(c.op == "permute_dims" for c in calls) == 2, [c.op for c in calls]
    dequantize = next(c for c in calls if c.op == "qnn.dequantize")
    assert dequantize.attrs["axis"] == 3 and dequantize.inputs[1].shape == (4,)
    add = next(c for c in calls if c.op == "qnn.add")
    assert [v.shape for v in add.inputs[1:3]] == [(), ()]  # one value each, as written
    data = rng.standard_normal((1, 4, 6, 6)).astype(np.float32) * 4
    np.testing.assert_array_equal(legato.reference(nhwc)(data), legato.reference(module)(data))
    back = legato.convert_layout(nhwc, "NCHW")
    np.testing.assert_array_equal(legato.reference(back)(data), legato.reference(module)(data))
