"""The direct channel-blocked nn.conv2d (csrc/conv_direct.c): which convs take it, and its
results against float64 loops and onnxruntime."""
import numpy as np
import pytest

from ck_util import assert_close, f32, two_conv_onnx
from test_ck_conv_pool import conv_ref

from legato_c_kernels import kernels as K
from legato_c_kernels._lib import lib
from legato_c_kernels.kernels import conv_pool

DIRECT = (lib.lgk_conv2d_direct_available() == 1
          and lib.lgk_gemm_isa() == lib.LGK_ISA_AVX512)


@pytest.fixture(autouse=True)
def _direct_not_winograd(monkeypatch):
    """The 3x3 stride-1 convs of these tests take Winograd F(2x2, 3x3) by default
    (test_ck_conv_winograd.py); here they stay on the direct kernel under test."""
    monkeypatch.setattr(conv_pool, "WINOGRAD_MIN_PIXELS", 1 << 62)


def _attrs(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)):
    return dict(strides=strides, padding=padding, dilation=dilation, groups=1)


@pytest.mark.parametrize("c, o, k, size, direct", [
    (64, 64, 3, 56, True),    # ResNet-50's 3x3 convs
    (512, 512, 3, 7, True),
    (16, 40, 3, 6, True),     # 6x6 out: the smallest map that takes it
    (256, 256, 3, 4, False),  # 4x4: pixels as the GEMM's rows stay faster
    (64, 64, 1, 56, False),   # 1x1: a plain GEMM
    (3, 64, 7, 64, True),     # an RGB stem: 3 planes, not padded to 16 channels
    (24, 48, 3, 28, False),   # 24 to 32: a third more work
    (40, 48, 3, 28, True),    # 40 to 48
], ids=str)
def test_the_kernel_follows_the_geometry(rng, c, o, k, size, direct):
    w, x = f32(rng, o, c, k, k), f32(rng, 1, c, size, size)
    _, call = conv_pool._plan_conv2d(x, K.pack_conv_weight(w), None,
                                     **_attrs(padding=(k // 2,) * 4))
    assert (call.fn == lib.lgk_conv2d_direct) == (direct and DIRECT)


@pytest.mark.parametrize("case", [
    # (x shape, O, kernel, strides, padding, dilation)
    ((1, 64, 20, 20), 64, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 40, 15, 29), 40, 3, (2, 2), (0, 0, 1, 1), (1, 1)),   # TF-style stride-2 padding
    ((1, 48, 17, 13), 50, 3, (1, 1), (2, 2, 2, 2), (2, 2)),   # dilation, filters past 48
    ((1, 32, 16, 16), 16, 5, (3, 1), (2, 0, 1, 2), (1, 1)),   # stride 3, 5x5, asymmetric
    ((1, 128, 8, 8), 96, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 40, 40), 64, 7, (2, 2), (3, 3, 3, 3), (1, 1)),    # stems: channels as planes
    ((2, 5, 12, 9), 20, 3, (1, 2), (1, 0, 1, 1), (1, 1)),
    # planes with output rows of 16 pixels or more: output pixels in the vector lanes
    ((1, 3, 45, 67), 38, 3, (2, 2), (1, 1, 1, 1), (1, 1)),    # 34 wide, 38 filters
    ((2, 1, 20, 33), 7, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 10, 229), 20, 3, (2, 2), (0, 0, 1, 1), (1, 1)),   # 114 wide: 2 tiles a row
    ((1, 2, 11, 100), 9, 5, (1, 3), (2, 1, 0, 2), (2, 1)),    # stride 3, dilated rows
], ids=str)
@pytest.mark.parametrize("activation", ["none", "relu", "clip:min=0.0,max=6.0", "silu"])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_direct_convs_match_the_reference(rng, monkeypatch, case, activation, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    shape, o, k, strides, padding, dilation = case
    x, w, b = f32(rng, *shape), f32(rng, o, shape[1], k, k), f32(rng, o)
    attrs = _attrs(strides, padding, dilation)
    packed = K.pack_conv_weight(w)
    got = K.nn_conv2d(x, packed, b, activation=activation, **attrs)
    ref = conv_ref(x, w, b, strides, padding, dilation, 1)
    ref = {"none": ref, "relu": np.maximum(ref, 0), "clip:min=0.0,max=6.0": np.clip(ref, 0, 6),
           "silu": ref / (1 + np.exp(-ref))}[activation]
    assert_close(got, ref, atol=1e-4)
    assert (packed._direct is not None) == DIRECT


def test_a_resnet_block_matches_onnxruntime(rng):
    """Conv 3x3 + Relu, stride-2 Conv 3x3, through the ONNX importer and c_kernels."""
    ort = pytest.importorskip("onnxruntime")
    import legato
    from legato.frontends import onnx as onnx_frontend
    model, x = two_conv_onnx(rng, 30, (2, 2))
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.asarray(legato.compile(onnx_frontend.load(model), "c_kernels")(x))
    assert_close(got, want, atol=1e-4 * float(np.abs(want).max()))
