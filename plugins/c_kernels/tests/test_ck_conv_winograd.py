"""The Winograd F(2x2, 3x3) nn.conv2d (csrc/conv_winograd.c): which convs take it, its
results against float64 loops under every GEMM family, its error against the direct sum's,
and a weight packed once per family."""
import numpy as np
import pytest

from ck_util import assert_close, f32, two_conv_onnx
from test_ck_conv_pool import conv_ref

from legato_c_kernels import kernels as K
from legato_c_kernels._lib import lib
from legato_c_kernels.kernels import conv_pool

ISAS = [isa for isa in (lib.LGK_ISA_AVX512, lib.LGK_ISA_AVX2, lib.LGK_ISA_GENERIC)
        if lib.lgk_gemm_force_isa(isa) == lib.LGK_OK]
lib.lgk_gemm_force_isa(lib.LGK_ISA_AUTO)


@pytest.fixture
def isa(request):
    assert lib.lgk_gemm_force_isa(request.param) == lib.LGK_OK
    yield request.param
    lib.lgk_gemm_force_isa(lib.LGK_ISA_AUTO)


def _plan(x, w, **attrs):
    attrs = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), **attrs}
    return conv_pool._plan_conv2d(x, K.pack_conv_weight(w), None, **attrs)[1]


@pytest.mark.parametrize("c, o, size, attrs, winograd", [
    (64, 64, 56, {}, True),                         # ResNet-50's 3x3 convs
    (256, 256, 14, {}, True),
    (512, 512, 7, {}, True),
    (128, 128, 10, {}, True),                       # 100 pixels x 128 channels: enough
    (128, 128, 8, {}, False),                       # 64 x 128: the direct conv is faster
    (64, 64, 14, {}, False),
    (512, 512, 6, {}, False),                       # 6x6: too few tiles
    (16, 16, 56, {}, False),                        # few channels
    (64, 16, 56, {}, False),                        # few filters
    (64, 64, 56, {"strides": (2, 2)}, False),
    (64, 64, 56, {"dilation": (2, 2), "padding": (2, 2, 2, 2)}, False),
], ids=str)
def test_the_kernel_follows_the_geometry(rng, c, o, size, attrs, winograd):
    call = _plan(f32(rng, 1, c, size, size), f32(rng, o, c, 3, 3), **attrs)
    assert (call.fn == lib.lgk_conv2d_winograd) == winograd


def test_other_kernel_sizes_do_not_take_it(rng):
    for k in (1, 5):
        call = _plan(f32(rng, 1, 32, 40, 40), f32(rng, 32, 32, k, k), padding=(k // 2,) * 4)
        assert call.fn != lib.lgk_conv2d_winograd


@pytest.mark.parametrize("case", [
    # (x shape, O, padding)
    ((1, 32, 20, 20), 32, (1, 1, 1, 1)),
    ((2, 40, 25, 23), 37, (1, 1, 1, 1)),     # odd output sizes: last tiles half outside
    ((1, 33, 23, 22), 35, (2, 0, 1, 2)),     # asymmetric pads
    ((1, 48, 22, 24), 32, (0, 0, 0, 0)),     # no padding: 20x22 out
    ((1, 32, 98, 96), 32, (1, 1, 1, 1)),     # several bands of tile rows
], ids=str)
@pytest.mark.parametrize("activation", ["none", "relu", "clip:min=0.0,max=6.0", "silu"])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_winograd_convs_match_the_reference(rng, monkeypatch, case, activation, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    shape, o, padding = case
    x, w, b = f32(rng, *shape), f32(rng, o, shape[1], 3, 3), f32(rng, o)
    packed = K.pack_conv_weight(w)
    got = K.nn_conv2d(x, packed, b, padding=padding, activation=activation)
    assert packed._winograd is not None
    ref = conv_ref(x, w, b, (1, 1), padding, (1, 1), 1)
    ref = {"none": ref, "relu": np.maximum(ref, 0), "clip:min=0.0,max=6.0": np.clip(ref, 0, 6),
           "silu": ref / (1 + np.exp(-ref))}[activation]
    assert_close(got, ref, atol=1e-4)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_every_gemm_family_and_a_weight_packed_again_for_it(rng, isa):
    x, w, b = f32(rng, 1, 32, 20, 20), f32(rng, 48, 32, 3, 3), f32(rng, 48)
    packed = K.pack_conv_weight(w)
    lib.lgk_gemm_force_isa(lib.LGK_ISA_GENERIC if isa != lib.LGK_ISA_GENERIC else ISAS[0])
    K.nn_conv2d(x, packed, b, padding=(1, 1, 1, 1))  # packed under another family first
    lib.lgk_gemm_force_isa(isa)
    got = K.nn_conv2d(x, packed, b, padding=(1, 1, 1, 1))
    assert packed._winograd[0] == isa
    assert_close(got, conv_ref(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1), atol=1e-4)


def test_its_error_stays_near_the_direct_sums(rng, monkeypatch):
    """F(2x2, 3x3)'s transforms only add, halve and subtract: against float64, its largest
    error is within a few times that of the direct conv (He-scaled weights, ReLU inputs,
    as in a CNN), far below F(4x4, 3x3)'s ~20-40x."""
    c = 128
    x = np.maximum(f32(rng, 1, c, 28, 28), 0)
    w = (f32(rng, c, c, 3, 3) * np.sqrt(6 / (9 * c))).astype(np.float32)
    ref = conv_ref(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    wino = K.nn_conv2d(x, K.pack_conv_weight(w), padding=(1, 1, 1, 1))
    monkeypatch.setattr(conv_pool, "WINOGRAD_MIN_PIXELS", 1 << 62)
    direct = K.nn_conv2d(x, K.pack_conv_weight(w), padding=(1, 1, 1, 1))
    err_wino, err_direct = np.abs(wino - ref).max(), np.abs(direct - ref).max()
    assert 0 < err_wino < 4 * err_direct
    assert err_wino < 2e-6 * np.abs(ref).max()


def test_a_vgg_block_matches_onnxruntime(rng, monkeypatch):
    """Two 3x3 convs with ReLU through the ONNX importer on c_kernels, against
    onnxruntime's own (direct) convs."""
    ort = pytest.importorskip("onnxruntime")
    import legato
    from legato.frontends import onnx as onnx_frontend
    model, x = two_conv_onnx(rng, 30, (1, 1))
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    packs = []
    pack = conv_pool.PackedConvWeight.packed_winograd
    monkeypatch.setattr(conv_pool.PackedConvWeight, "packed_winograd",
                        lambda self, op: packs.append(self.shape) or pack(self, op))
    compiled = legato.compile(onnx_frontend.load(model), backend="c_kernels")
    got = compiled(x)
    assert sorted(packs) == [(48, 32, 3, 3), (64, 48, 3, 3)]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
