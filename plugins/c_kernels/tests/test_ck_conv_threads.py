"""nn.conv2d of one image split over two threads (LEGATO_NUM_THREADS=2): the zoo's conv
shapes, large enough to be split, through every weight form (plain OIHW, packed as the
GEMM's right operand for pixels as rows, as its left operand for filters as rows), give
the one-thread results within float32 rounding of the reference; a model whose convs split
runs on 2 threads as on 1."""
import numpy as np
import pytest

import legato
from ck_util import assert_close, f32
from legato.frontends.examples import cnn, random_inputs
from test_ck_conv_pool import conv_ref

from legato_c_kernels import kernels as K

# (x shape, O, kernel, stride, pad): above 2 MFLOP each, so 2 threads split them
CASES = [
    ((1, 3, 64, 64), 32, 7, 2, 3),      # stem: output rows split (filters as rows)
    ((1, 256, 2, 2), 256, 3, 1, 1),     # 2x2 map: filters split (weights streamed)
    ((1, 128, 4, 4), 256, 3, 2, 1),     # strided, 2x2 output
    ((1, 64, 8, 8), 64, 3, 1, 1),       # 64 pixels, small weights: pixels split
    ((1, 64, 8, 8), 32, 3, 1, 1),       # one sliver of filters: pixels split
    ((1, 32, 16, 16), 32, 3, 1, 1),     # 16x16: output rows
    ((1, 16, 16, 16), 640, 1, 1, 0),    # 1x1, many filters: filters split
    ((1, 112, 2, 2), 1280, 1, 1, 0),    # 1x1 on a 2x2 map
    ((1, 32, 32, 32), 64, 4, 4, 0),     # patchify (unpadded: panels from the input)
    ((1, 352, 8, 8), 16, 3, 1, 1),      # pixel rows in two bands
]


def _attrs(stride, pad, groups=1):
    return dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_two_thread_convs_match_the_reference(rng, monkeypatch, case):
    shape, o, k, stride, pad = case
    x, w, b = f32(rng, *shape), f32(rng, o, shape[1], k, k), f32(rng, o)
    attrs = _attrs(stride, pad)
    ref = np.maximum(conv_ref(x, w, b, attrs["strides"], attrs["padding"], (1, 1), 1), 0)
    results = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
        packed = K.pack_conv_weight(w)
        for form, weight in (("plain", w), ("packed", packed)):
            got = K.nn_conv2d(x, weight, b, activation="relu", **attrs)
            assert_close(got, ref, atol=1e-4)
            results[threads, form] = got
    # the split changes which thread computes a value, not the value's sum order
    np.testing.assert_array_equal(results["2", "plain"], results["1", "plain"])
    np.testing.assert_array_equal(results["2", "packed"], results["1", "packed"])


def test_grouped_conv_splits_by_group(rng, monkeypatch):
    monkeypatch.setenv("LEGATO_NUM_THREADS", "2")
    x, w, b = f32(rng, 1, 64, 16, 16), f32(rng, 64, 32, 3, 3), f32(rng, 64)
    attrs = _attrs(1, 1, groups=2)
    got = K.nn_conv2d(x, w, b, **attrs)
    assert_close(got, conv_ref(x, w, b, attrs["strides"], attrs["padding"], (1, 1), 2),
                 atol=1e-4)


def test_cnn_on_two_threads_matches_one(monkeypatch):
    mod = cnn(batch=1, size=96)  # its first conv (4 MFLOP) splits
    inputs = random_inputs(mod, 3)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
        results.append(legato.runtime.interpreter.as_tuple(legato.compile(mod, "c_kernels")(*inputs)))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["max", "avg"])
def test_two_thread_pooling_matches_one(rng, monkeypatch, op):
    """A pooling with enough windows (32 planes of 16 x 16, 3 x 3) splits its planes."""
    x = f32(rng, 1, 32, 32, 32)
    pool = K.nn_max_pool2d if op == "max" else K.nn_avg_pool2d
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
        results.append(pool(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1)))
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)),
                constant_values=-np.inf if op == "max" else 0.0)
    windows = [xp[:, :, i:i + 32:2, j:j + 32:2] for i in range(3) for j in range(3)]
    if op == "max":
        ref = np.max(windows, axis=0)
    else:  # divisor: the window's cells inside the input
        ones = np.pad(np.ones((32, 32)), 1)
        count = sum(ones[i:i + 32:2, j:j + 32:2] for i in range(3) for j in range(3))
        ref = np.sum(windows, axis=0) / count
    assert_close(results[0], ref)
    np.testing.assert_array_equal(results[1], results[0])
