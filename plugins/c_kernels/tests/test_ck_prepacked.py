# Prepacked right operands: pack_weight() and PackedWeight in matmul / nn.linear.

import copy
import itertools
import pickle

import numpy as np
import pytest

from legato.ir.errors import LegatoError

from ck_util import ACTS, SIZES, assert_close, available_isas, f32, gemm_close, mm_ref

from legato_c_kernels import kernels as K
from legato_c_kernels._lib import ffi, lib
from legato_c_kernels.kernels.gemm import _aligned_empty


def test_pack_both_orientations_all_sizes(rng, isa):
    for m, n, k in itertools.product(SIZES, repeat=3):
        a, b = f32(rng, m, k), f32(rng, k, n)
        packed = K.pack_weight(b)
        assert (packed.k, packed.n, packed.isa, packed.transposed) == (k, n, isa, False)
        gemm_close(K.matmul(a, packed), a, b)
        w = np.ascontiguousarray(b.T)  # an nn.linear weight (out, in)
        packed_t = K.pack_weight(w, transposed=True)
        assert packed_t.shape == (k, n) and packed_t.transposed
        gemm_close(K.nn_linear(a, packed_t), a, b)


def test_packed_matches_unpacked_bitwise(rng):
    """K in one block either way: same micro-kernel, same summation order."""
    a, w = f32(rng, 70, 200), f32(rng, 129, 200)
    np.testing.assert_array_equal(K.nn_linear(a, K.pack_weight(w, transposed=True)),
                                  K.nn_linear(a, w))


@pytest.mark.parametrize("k", [300, 769, 1600])
def test_packed_deeper_blocks_match_unpacked(rng, k):
    """A packed weight may run in deeper K blocks than a weight packed per call (the
    sums then differ in order only)."""
    a, w = f32(rng, 70, k), f32(rng, 129, k)
    assert_close(K.nn_linear(a, K.pack_weight(w, transposed=True)), K.nn_linear(a, w),
                 atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("act", sorted(ACTS))
def test_fused_epilogues(rng, isa, act):
    x, w, bias = f32(rng, 37, 129, low=-3, high=3), f32(rng, 45, 129), f32(rng, 45)
    pre = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    packed = K.pack_weight(w, transposed=True)
    assert_close(K.fused_linear(x, packed, bias, activation=act), ACTS[act](pre), atol=1e-4)
    packed_b = K.pack_weight(np.ascontiguousarray(w.T))
    assert_close(K.fused_matmul(x, packed_b, bias=bias, activation=act), ACTS[act](pre), atol=1e-4)


@pytest.mark.parametrize("shape", [(3,), (1, 3), (2, 5, 3), (2, 1, 4, 3), (0, 3), (4, 0, 3)])
def test_leading_dims_fold_into_m(rng, shape):
    a, b = f32(rng, *shape), f32(rng, 3, 17)
    got = K.matmul(a, K.pack_weight(b))
    ref = mm_ref(a, b)
    assert got.shape == ref.shape
    if ref.size:
        assert_close(got, ref, atol=1e-5)


def test_strided_sources_and_inputs(rng):
    base = f32(rng, 40, 60)
    b = base[::2, 1::3]  # (20, 20) odd strides, packed without a copy
    w_view = f32(rng, 17, 50)[:, ::2]  # (17, 25) nn.linear weight, non-contiguous
    a = f32(rng, 30, 50)[::3, ::2]  # (10, 25)
    gemm_close(K.matmul(a[:, :20], K.pack_weight(b)), a[:, :20], b)
    gemm_close(K.nn_linear(a, K.pack_weight(w_view, transposed=True)), a, w_view.T)
    neg = f32(rng, 20, 9)[::-1]  # negative strides: copied before packing
    gemm_close(K.matmul(a[:, :20], K.pack_weight(neg)), a[:, :20], neg)


def test_k0_and_large_threaded(rng, monkeypatch):
    empty = K.pack_weight(np.zeros((0, 4), np.float32))
    bias = f32(rng, 4)
    got = K.fused_matmul(np.zeros((3, 0), np.float32), empty, bias=bias, activation="relu")
    np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(bias, 0), (3, 4)))
    monkeypatch.setenv("LEGATO_NUM_THREADS", "2")
    for m, k, n in [(64, 784, 300), (700, 300, 64)]:  # split N, split M
        a, b = f32(rng, m, k), f32(rng, k, n)
        gemm_close(K.matmul(a, K.pack_weight(b)), a, b)


def test_out_buffer_and_reuse(rng):
    w, bias = f32(rng, 33, 17), f32(rng, 33)
    packed = K.pack_weight(w, transposed=True)
    out = np.full((5, 33), np.nan, np.float32)
    for _ in range(3):
        x = f32(rng, 5, 17)
        assert K.nn_linear(x, packed, bias, out=out) is out
        assert_close(out, x.astype(np.float64) @ w.T + bias, atol=1e-5)
    with pytest.raises(LegatoError, match="out"):
        K.nn_linear(f32(rng, 5, 17), packed, out=np.empty((5, 32), np.float32))


def test_packed_data_is_aligned_readonly_and_survives_copies(rng):
    a, b = f32(rng, 6, 9), f32(rng, 9, 7)
    packed = K.pack_weight(b)
    assert packed.data.ctypes.data % 64 == 0 and not packed.data.flags.writeable
    assert packed.data.size == lib.lgk_sgemm_packed_b_size(9, 7)
    for clone in (copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        gemm_close(K.matmul(a, clone), a, b)  # realigned on use if the copy moved it
        assert clone.data.ctypes.data % 64 == 0
    assert "k=9, n=7" in repr(packed)


def test_isa_mismatch_is_refused(rng):
    isas = available_isas()
    if len(isas) < 2:
        pytest.skip("needs two GEMM kernel families")
    packed = K.pack_weight(f32(rng, 9, 7))
    other = next(i for i in isas if i != packed.isa)
    assert lib.lgk_gemm_force_isa(other) == lib.LGK_OK
    try:
        with pytest.raises(LegatoError, match="pack it again"):
            K.matmul(f32(rng, 2, 9), packed)
        # the C layer refuses it on its own too (header check)
        data = packed.data
        c = np.empty((2, 7), np.float32)
        a = f32(rng, 2, 9)
        status = lib.lgk_sgemm_prepacked(2, 7, 9, ffi.from_buffer("float[]", a), a.size, 9, 1,
                                         ffi.from_buffer("float[]", data), data.size,
                                         ffi.from_buffer("float[]", c), c.size, 7, ffi.NULL,
                                         0, 0, 0, 1)
        assert status == lib.LGK_ERR_ARG
    finally:
        lib.lgk_gemm_force_isa(lib.LGK_ISA_AUTO)


def test_errors(rng):
    b = f32(rng, 4, 6)
    packed, packed_t = K.pack_weight(b), K.pack_weight(b, transposed=True)  # (4, 6) and (6, 4)
    with pytest.raises(LegatoError, match="pack_weight.*2-D"):
        K.pack_weight(f32(rng, 2, 3, 4))
    with pytest.raises(LegatoError, match="pack_weight.*float32"):
        K.pack_weight(b.astype(np.float64))
    with pytest.raises(LegatoError, match="pack_weight.*ndarray"):
        K.pack_weight([[1.0]])
    with pytest.raises(LegatoError, match="transposed must be a bool"):
        K.pack_weight(b, transposed="yes")
    with pytest.raises(LegatoError, match="matmul.*inner"):
        K.matmul(f32(rng, 3, 5), packed)
    with pytest.raises(LegatoError, match="at least one dimension"):
        K.matmul(np.float32(1.0), packed)
    with pytest.raises(LegatoError, match="bias"):
        K.fused_matmul(f32(rng, 3, 4), packed, bias=f32(rng, 5))
    with pytest.raises(LegatoError, match="activation"):
        K.fused_matmul(f32(rng, 3, 4), packed, activation="swish")
    with pytest.raises(LegatoError, match="float32"):
        K.matmul(f32(rng, 3, 4).astype(np.float64), packed)
    with pytest.raises(LegatoError, match=r"nn\.linear.*transposed=True"):
        K.nn_linear(f32(rng, 3, 4), packed)
    with pytest.raises(LegatoError, match=r"nn\.linear.*features"):
        K.nn_linear(f32(rng, 3, 4), packed_t)
    with pytest.raises(LegatoError, match=r"nn\.linear.*bias"):
        K.nn_linear(f32(rng, 3, 6), packed_t, f32(rng, 5))
    fake = K.PackedWeight(np.zeros(3, np.float64), 4, 6, lib.lgk_gemm_isa(), False)
    with pytest.raises(LegatoError, match="pack_weight"):
        K.matmul(f32(rng, 3, 4), fake)
    # a buffer of floats that was never packed: the C header check refuses it
    unpacked = K.PackedWeight(np.zeros(packed.data.size, np.float32), 4, 6, lib.lgk_gemm_isa(), False)
    with pytest.raises(LegatoError, match="LGK_ERR_ARG"):
        K.matmul(f32(rng, 3, 4), unpacked)


def test_c_prepacked_rejects_bad_arguments():
    """Argument checks of the C layer itself, independent of the Python ones."""
    null = ffi.NULL
    assert lib.lgk_sgemm_packed_b_size(-1, 2) == -lib.LGK_ERR_SHAPE
    assert lib.lgk_sgemm_packed_b_size(1 << 40, 1 << 40) == -lib.LGK_ERR_OVERFLOW
    size = lib.lgk_sgemm_packed_b_size(2, 2)
    b, a, c = ffi.new("float[]", 4), ffi.new("float[]", 4), ffi.new("float[]", 4)
    packed = _aligned_empty(size)
    pk = ffi.from_buffer("float[]", packed)
    assert lib.lgk_sgemm_pack_b(2, 2, b, 4, 2, 1, pk, size) == lib.LGK_OK
    assert lib.lgk_sgemm_pack_b(2, 2, b, 3, 2, 1, pk, size) == lib.LGK_ERR_SHAPE
    assert lib.lgk_sgemm_pack_b(2, 2, b, 4, 2, 1, pk, size - 1) == lib.LGK_ERR_SHAPE
    assert lib.lgk_sgemm_pack_b(2, 2, null, 4, 2, 1, pk, size) == lib.LGK_ERR_NULL

    def run(m, n, k, buf=pk, length=size):
        return lib.lgk_sgemm_prepacked(m, n, k, a, 4, k, 1, buf, length, c, 4, n, null, 0, 0, 0, 1)

    assert run(2, 2, 2) == lib.LGK_OK
    assert run(2, 2, 2, length=size - 1) == lib.LGK_ERR_SHAPE
    assert run(2, 2, 2, buf=null) == lib.LGK_ERR_NULL
    assert run(2, 1, 2) == lib.LGK_ERR_ARG  # packed for N = 2
    assert run(2, 2, 1) == lib.LGK_ERR_ARG  # packed for K = 2
    assert run(-1, 2, 2) == lib.LGK_ERR_SHAPE
