"""The VNNI conv GEMM with its epilogue in registers (csrc/qconv_vnni.c: constant weights
packed once, B packed with its pixel sums, 8 x 48 tiles requantized from registers)
against onnxruntime's QLinearConv, bit for bit: 1x1 convs read in place, im2col blocks,
filter and pixel counts off the tile's, tap counts off multiples of 4 and past one packed
panel, per-filter and shared weight zero points. Skipped where the CPU has no VNNI: the
other families run the int8 GEMM (tests/test_ck_qnn.py)."""
from __future__ import annotations

import numpy as np
import pytest

from legato_c_kernels._lib import lib
from legato_c_kernels.kernels import qnn

from test_ck_qnn import rand_q, run_ort, scale

CASES = [  # data shape, weight shape, strides, pads
    ((1, 16, 112, 112), (96, 16, 1, 1), (1, 1), (0, 0, 0, 0)),  # MobileNetV2's widest 1x1
    ((1, 320, 7, 7), (1280, 320, 1, 1), (1, 1), (0, 0, 0, 0)),
    ((2, 5, 7, 9), (13, 5, 1, 1), (1, 1), (0, 0, 0, 0)),        # 63 pixels, 13 filters
    ((1, 3, 33, 33), (10, 3, 3, 3), (2, 2), (1, 1, 1, 1)),      # 27 taps
    ((1, 600, 9, 9), (4, 600, 3, 3), (1, 1), (1, 1, 1, 1)),     # 5400 taps: 2 panels
    ((1, 64, 28, 28), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1)),    # ResNet-50's 3x3
    ((1, 6, 10, 10), (9, 6, 1, 1), (2, 2), (0, 0, 0, 0)),       # strided 1x1
    ((1, 256, 14, 14), (8, 256, 3, 3), (1, 1), (1, 1, 1, 1)),   # blocks of 96, 96 and 4
    ((1, 512, 7, 7), (16, 512, 3, 3), (1, 1), (1, 1, 1, 1)),    # one block of 49
]


@pytest.fixture
def vnni():
    if lib.lgk_qgemm_force_isa(lib.LGK_QISA_AVX512_VNNI) != 0:
        pytest.skip("no AVX-512 VNNI on this CPU")
    yield
    lib.lgk_qgemm_force_isa(lib.LGK_QISA_AUTO)


@pytest.mark.parametrize("x_dtype, w_dtype, per_filter_zero", [
    (np.uint8, np.int8, False), (np.int8, np.int8, False), (np.int8, np.int8, True),
    (np.uint8, np.uint8, True)])
@pytest.mark.parametrize("x_shape, w_shape, strides, pads", CASES)
def test_packed_conv_matches_onnxruntime(vnni, x_dtype, w_dtype, per_filter_zero, x_shape,
                                         w_shape, strides, pads):
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    o = w_shape[0]
    w = rand_q(rng, w_dtype, w_shape)
    center = 0 if w_dtype == np.int8 else 128  # zero points near the weights' center
    w_zero = (center + rng.integers(-3, 4, o) * per_filter_zero).astype(w_dtype)
    x_scale, w_scale = scale(rng), scale(rng, o, 1e-4, 2e-3)
    taps = np.prod(w_shape[1:])  # sums spread over ~100 output steps
    y_scale = np.float32(x_scale * w_scale.mean() * 5500 * np.sqrt(taps) / 40)
    inputs = dict(x=rand_q(rng, x_dtype, x_shape), x_scale=np.array(x_scale),
                  x_zero_point=np.array(rand_q(rng, x_dtype, ())), w=w, w_scale=w_scale,
                  w_zero_point=w_zero, y_scale=np.array(y_scale),
                  y_zero_point=np.array(x_dtype(9)),
                  B=rng.integers(-30000, 30000, o).astype(np.int32))
    want = run_ort("QLinearConv", inputs, x_dtype, strides=list(strides), pads=list(pads))
    args = list(inputs.values())
    args[3] = qnn.pack_qconv_weight(w)
    got = qnn.qnn_conv2d(*args, strides=list(strides), padding=list(pads))
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 20
