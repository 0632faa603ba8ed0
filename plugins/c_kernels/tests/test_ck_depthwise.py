"""Depthwise nn.conv2d (groups == channels) through the Python kernel: the shapes of
the zoo's depthwise convs and the geometry edges, with fused activations, at one and
two threads, against a float64 reference (conv_ref of test_ck_conv_pool)."""
import numpy as np
import pytest

from ck_util import assert_close, f32
from test_ck_conv_pool import conv_ref

from legato_c_kernels import kernels as K

RELU6 = "clip:min=0.0,max=6.0"

# (N, C, H, W), multiplier, (kh, kw), strides, padding (t, l, b, r), dilation, activation
CASES = [
    ((1, 336, 2, 2), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), RELU6),   # small map, many bands
    ((1, 48, 32, 32), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), RELU6),  # stride 2
    ((1, 16, 32, 32), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), RELU6),  # whole-vector rows
    ((1, 32, 16, 16), 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1), "none"),  # convnext 7x7
    ((1, 32, 32, 32), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), "nn.silu"),
    ((1, 192, 4, 4), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "relu"),
    ((2, 37, 7, 5), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), RELU6),     # band tail
    ((1, 9, 9, 8), 2, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "none"),     # multiplier 2
    ((1, 18, 11, 12), 1, (3, 3), (3, 3), (1, 2, 0, 3), (2, 2), "none"),  # stride 3, dilation
    ((1, 17, 1, 1), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "none"),    # 1x1 map
    ((1, 17, 2, 3), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "none"),    # kernel > input
    ((0, 16, 5, 5), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "none"),    # no images
    ((1, 3, 20, 33), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), RELU6),    # few filters: planes
    # stride 2 over rows of whole vectors: planes split in even and odd columns
    ((1, 48, 32, 32), 1, (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), RELU6),  # end-only padding
    ((1, 32, 32, 32), 1, (5, 5), (2, 2), (1, 1, 2, 2), (1, 1), "nn.silu"),  # efficientnet
    ((2, 17, 31, 31), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "relu"),  # odd width
    ((1, 16, 12, 32), 1, (3, 3), (1, 2), (1, 2, 1, 2), (2, 2), "none"),  # dilation 2
    ((1, 64, 16, 16), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "none"),  # 4 bands, 2 threads
    ((1, 48, 16, 16), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), RELU6),   # 3 bands: rows split
]

ACT = {"none": lambda y: y, "relu": lambda y: np.maximum(y, 0),
       RELU6: lambda y: np.clip(y, 0, 6), "nn.silu": lambda y: y / (1 + np.exp(-y))}


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_depthwise_conv2d(rng, monkeypatch, case, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    shape, mult, kernel, strides, padding, dilation, act = case
    c = shape[1]
    x, w, b = f32(rng, *shape), f32(rng, c * mult, 1, *kernel), f32(rng, c * mult)
    x *= 4  # values past relu6's upper bound too
    got = K.nn_conv2d(x, w, b, strides=strides, padding=padding, dilation=dilation, groups=c,
                      activation=act)
    assert_close(got, ACT[act](conv_ref(x, w, b, strides, padding, dilation, c)))


def test_depthwise_keeps_nan(rng):
    x, w = f32(rng, 1, 32, 6, 6), f32(rng, 32, 1, 3, 3)
    x[0, 5, 2, 3] = np.nan
    got = K.nn_conv2d(x, w, None, padding=(1, 1, 1, 1), groups=32, activation=RELU6)
    assert np.isnan(got[0, 5, 1:4, 2:5]).all()
    assert not np.isnan(np.delete(got, 5, axis=1)).any()
