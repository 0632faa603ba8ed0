"""The two GEMM orientations of a packed nn.conv2d weight: pixels as rows (small maps,
weight packed as the right operand) and filters as rows (large maps, packed as the left
operand), chosen per call by the output size."""
import numpy as np
import pytest

from ck_util import assert_close, f32
from test_ck_conv_pool import conv_ref

from legato_c_kernels import kernels as K
from legato_c_kernels._lib import lib
from legato_c_kernels.kernels import conv_pool

PAD1 = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)


@pytest.fixture(autouse=True)
def gemm_only(monkeypatch):
    """The GEMM paths, also where the direct conv (test_ck_conv_direct.py) would run."""
    monkeypatch.setattr(conv_pool, "DIRECT_MIN_PIXELS", 10**9)


def _conv(x, packed, w, b, activation="none", **attrs):
    got = K.nn_conv2d(x, packed, b, activation=activation, **attrs)
    ref = conv_ref(x, w, b, attrs["strides"], attrs["padding"], attrs["dilation"], 1)
    return got, np.maximum(ref, 0) if activation == "relu" else ref


@pytest.mark.parametrize("threads", ["1", "2"])
def test_one_weight_serves_both_orientations(rng, monkeypatch, threads):
    """The same packed weight on a 2x2 map (pixels as rows) and a 16x16 map (filters as
    rows): each orientation packs once, both agree with the reference."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    w, b = f32(rng, 20, 7, 3, 3), f32(rng, 20)
    packed = K.pack_conv_weight(w, groups=1)
    assert packed._as_a is None and packed._as_b is None  # packed when first used
    for size in (2, 16, 2, 16):
        x = f32(rng, 2, 7, size, size)
        got, ref = _conv(x, packed, w, b, "relu", **PAD1)
        assert_close(got, ref, atol=1e-5)
    assert packed._as_a is not None and packed._as_b is not None


@pytest.mark.parametrize("size, by_pixels", [(2, True), (8, True), (9, False), (33, False)])
def test_orientation_follows_the_output_size(rng, size, by_pixels):
    w = f32(rng, 24, 5, 3, 3)
    x = f32(rng, 1, 5, size, size)
    _, call = conv_pool._plan_conv2d(x, K.pack_conv_weight(w), None, **PAD1)
    want = lib.lgk_conv2d_nchw_prepacked if by_pixels else lib.lgk_conv2d_nchw_packed_a
    assert call.fn == want


@pytest.mark.parametrize("case", [
    # (x shape, O, kernel, strides, padding, dilation)
    ((1, 3, 64, 64), 32, 7, (2, 2), (3, 3, 3, 3), (1, 1)),  # resnet-style stem
    ((1, 3, 33, 31), 8, 4, (4, 4), (0, 1, 2, 0), (1, 1)),   # patchify, odd sizes
    ((2, 9, 12, 20), 17, 3, (2, 1), (1, 0, 2, 1), (2, 3)),  # mixed strides and dilations
    ((1, 6, 5, 5), 11, 5, (1, 1), (4, 4, 4, 4), (1, 1)),    # padding as large as the kernel
    ((1, 16, 16, 16), 40, 1, (1, 1), (0, 0, 0, 0), (1, 1)), # pointwise
    ((1, 16, 16, 16), 40, 1, (2, 2), (0, 0, 0, 0), (1, 1)), # 1x1 stride 2
    ((1, 352, 8, 8), 16, 3, (1, 1), (1, 1, 1, 1), (1, 1)),  # pixel rows in two bands
    ((1, 352, 8, 8), 8, 3, (1, 1), (1, 1, 1, 1), (1, 1)),   # filter rows in two bands
], ids=str)
def test_packed_conv_geometries(rng, case):
    shape, o, k, strides, padding, dilation = case
    x, w, b = f32(rng, *shape), f32(rng, o, shape[1], k, k), f32(rng, o)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=1)
    got, ref = _conv(x, K.pack_conv_weight(w), w, b, **attrs)
    assert_close(got, ref, atol=1e-4)


def test_left_operand_is_packed_again_for_another_kernel_family(rng):
    """A weight packed under one GEMM family still works after another is selected."""
    w, x = f32(rng, 12, 4, 3, 3), f32(rng, 1, 4, 12, 12)
    packed = K.pack_conv_weight(w)
    first, ref = _conv(x, packed, w, None, **PAD1)
    assert_close(first, ref, atol=1e-5)
    isa = lib.lgk_gemm_isa()
    try:
        assert lib.lgk_gemm_force_isa(lib.LGK_ISA_GENERIC) == lib.LGK_OK
        again, _ = _conv(x, packed, w, None, **PAD1)
        small, small_ref = _conv(x[:, :, :2, :2], packed, w, None, **PAD1)
    finally:
        lib.lgk_gemm_force_isa(lib.LGK_ISA_AUTO)
    assert lib.lgk_gemm_isa() == isa
    assert_close(again, ref, atol=1e-5)
    assert_close(small, small_ref, atol=1e-5)


def test_max_pool_vector_rows(rng):
    """Stride-2 3x3 max pooling over rows of 16 and 17 outputs, NaN kept."""
    x = f32(rng, 2, 3, 32, 34)
    x[0, 1, 5, 7] = np.nan
    got = K.nn_max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.full(got.shape, -np.inf, np.float32)
    for i in range(3):
        for j in range(3):
            ref = np.fmax(ref, xp[:, :, i:i + 32:2, j:j + 34:2])
    want_nan = np.zeros(got.shape, bool)
    want_nan[0, 1, 2:4, 3:5] = True  # the windows over input (5, 7)
    assert (np.isnan(got) == want_nan).all()
    assert_close(got[~want_nan], ref[~want_nan], atol=0)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("h, w", [(7, 23), (4, 41), (14, 14), (5, 37), (12, 14), (3, 61),
                                  (9, 21), (6, 33)], ids=str)
def test_pointwise_filter_rows_narrow_last_sliver(rng, monkeypatch, threads, h, w):
    """1x1 convs with filters as rows whose pixel count leaves 1 .. 8 and 17 .. 24 columns in
    the last 32-wide sliver (161, 164, 196, 185, 168, 183, 189 and 198 pixels), 29 filters
    (not a multiple of the 12-row tile), K in one block and in two, a residual and relu
    or relu6 after it."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    for c_in, act in ((40, "relu"), (1100, "clip:min=0.0,max=6.0")):
        x, wt, b = f32(rng, 1, c_in, h, w), f32(rng, 29, c_in, 1, 1), f32(rng, 29)
        res = 4 * f32(rng, 1, 29, h, w)
        attrs = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
        packed = K.pack_conv_weight(wt)
        _, call = conv_pool._plan_conv2d(x, packed, b, **attrs)
        assert call.fn == lib.lgk_conv2d_nchw_packed_a
        got = K.nn_conv2d(x, packed, b, activation=act, residual=res, **attrs)
        ref = conv_ref(x, wt, b, attrs["strides"], attrs["padding"], attrs["dilation"], 1) + res
        ref = np.maximum(ref, 0) if act == "relu" else np.clip(ref, 0, 6)
        assert_close(got, ref, atol=1e-4)
