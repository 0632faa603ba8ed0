"""The int8 depthwise conv (csrc/qdwconv.c: pair rows, tap pairs on vpdpwssd / vpmaddwd,
the requantizing epilogue in registers) against onnxruntime's QLinearConv, bit for bit,
under every int8 family this CPU runs: MobileNetV2's shapes, row widths around each
vector width, strides 1-3 on either axis, dilations, even and odd filter heights, and the
largest shifted values (+-255 on both operands)."""
from __future__ import annotations

import numpy as np
import pytest

from legato_c_kernels.kernels import qnn

from test_ck_qnn import family, rand_q, run_ort, scale  # noqa: F401 - family is a fixture

CASES = [  # data shape, kernel, strides, pads (t, l, b, r), dilations
    ((1, 16, 56, 56), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),    # MobileNetV2, 144 ch there
    ((1, 8, 112, 112), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1)),   # its stride-2 convs, TF pads
    ((2, 24, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # 7-wide: a vector a row
    ((1, 5, 6, 17), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 5, 6, 49), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 5, 6, 97), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 4, 9, 33), (3, 3), (1, 2), (1, 0, 1, 2), (1, 1)),
    ((1, 4, 11, 15), (3, 3), (2, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 10, 12), (2, 2), (1, 1), (0, 0, 1, 1), (1, 1)),     # even height: pairs only
    ((1, 3, 10, 12), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 3, 15, 21), (5, 5), (1, 1), (4, 4, 4, 4), (2, 2)),
    ((1, 3, 15, 21), (3, 5), (2, 2), (2, 1, 0, 3), (3, 2)),
    ((1, 3, 16, 40), (3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),     # stride 3
    ((1, 3, 12, 12), (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
]


def _inputs(rng, x_dtype, w_dtype, x_shape, kernel):
    c = x_shape[1]
    per_channel = w_dtype == np.int8
    return dict(x=rand_q(rng, x_dtype, x_shape), x_scale=np.array(scale(rng)),
                x_zero_point=np.array(rand_q(rng, x_dtype, ())),
                w=rand_q(rng, w_dtype, (c, 1, *kernel)),
                w_scale=scale(rng, c) if per_channel else np.array(scale(rng)),
                w_zero_point=rand_q(rng, w_dtype, (c,)) if per_channel else
                np.array(rand_q(rng, w_dtype, ())),
                y_scale=np.array(np.float32(0.4)), y_zero_point=np.array(x_dtype(5)),
                B=rng.integers(-3000, 3000, c).astype(np.int32))


def _both(inputs, strides, pads, dilations, relu=False):
    """(c_kernels, onnxruntime) outputs of one depthwise QLinearConv."""
    c = inputs["x"].shape[1]
    want = run_ort("QLinearConv", inputs, inputs["x"].dtype, group=c, strides=list(strides),
                   pads=list(pads), dilations=list(dilations))
    got = qnn.qnn_conv2d(*inputs.values(), strides=list(strides), padding=list(pads),
                         dilation=list(dilations), groups=c, relu=relu)
    return got, want


@pytest.mark.parametrize("x_dtype, w_dtype", [(np.uint8, np.int8), (np.int8, np.int8),
                                              (np.uint8, np.uint8)])
@pytest.mark.parametrize("x_shape, kernel, strides, pads, dilations", CASES)
def test_depthwise_matches_onnxruntime(family, x_dtype, w_dtype, x_shape, kernel, strides, pads,
                                       dilations):
    rng = np.random.default_rng(sum(x_shape) + 7 * sum(kernel) + strides[0])
    inputs = _inputs(rng, x_dtype, w_dtype, x_shape, kernel)
    got, want = _both(inputs, strides, pads, dilations)
    np.testing.assert_array_equal(got, want)


def test_depthwise_relu_clamps_at_the_output_zero_point(family):
    rng = np.random.default_rng(3)
    inputs = _inputs(rng, np.int8, np.int8, (1, 6, 9, 30), (3, 3))
    got, want = _both(inputs, (1, 1), (1, 1, 1, 1), (1, 1), relu=True)
    np.testing.assert_array_equal(got, np.maximum(want, inputs["y_zero_point"]))


@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8])
def test_depthwise_largest_shifted_values(family, x_dtype):
    """x and w 255 away from their zero points: each int32 lane of a tap pair sums
    2 * 65025, a 3x3 window 9 * 65025."""
    c, lo = 4, np.iinfo(x_dtype).min
    inputs = _inputs(np.random.default_rng(0), x_dtype, np.int8, (1, c, 6, 20), (3, 3))
    inputs["x"][:] = lo
    inputs["x_zero_point"] = np.array(x_dtype(lo + 255))
    inputs["w"][:] = -128
    inputs["w_zero_point"] = np.full(c, 127, np.int8)
    inputs["w_scale"] = np.linspace(1e-5, 4e-3, c).astype(np.float32)
    inputs["y_scale"] = np.array(np.float32(1.0))
    got, want = _both(inputs, (1, 1), (1, 1, 1, 1), (1, 1))
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 2  # both rounded values and saturated ones
