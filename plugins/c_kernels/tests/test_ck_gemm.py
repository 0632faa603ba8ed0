
import itertools

import numpy as np
import pytest

from legato.ir.errors import LegatoError

from ck_util import ACTS, SIZES, assert_close, f32, gemm_close, mm_ref

from legato_c_kernels import kernels as K
from legato_c_kernels._lib import ffi, lib


def test_matmul_sizes_all_isas(rng, isa):
    for m, n, k in itertools.product(SIZES, repeat=3):
        a, b = f32(rng, m, k), f32(rng, k, n)
        gemm_close(K.matmul(a, b), a, b)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_matmul_large_threads(rng, monkeypatch, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    # the first three are big enough (> 48 MFLOP) to run on 2 threads, split by N or M
    for m, n, k in [(300, 257, 400), (200, 1000, 170), (1000, 140, 250), (520, 530, 17)]:
        a, b = f32(rng, m, k), f32(rng, k, n)
        gemm_close(K.matmul(a, b), a, b)


def test_threads_deterministic(rng, monkeypatch):
    a, b = f32(rng, 300, 290), f32(rng, 290, 400)  # 70 MFLOP: threaded
    monkeypatch.setenv("LEGATO_NUM_THREADS", "1")
    one = K.matmul(a, b)
    monkeypatch.setenv("LEGATO_NUM_THREADS", "2")
    np.testing.assert_array_equal(K.matmul(a, b), one)


def test_bad_thread_env(rng, monkeypatch):
    monkeypatch.setenv("LEGATO_NUM_THREADS", "lots")
    with pytest.raises(LegatoError, match="LEGATO_NUM_THREADS"):
        K.matmul(f32(rng, 2, 2), f32(rng, 2, 2))


@pytest.mark.parametrize("sa,sb", [
    ((4, 5), (5,)), ((5,), (5, 3)), ((5,), (5,)), ((2, 3, 4, 5), (5, 6)),
    ((2, 1, 4, 5), (3, 5, 6)), ((5,), (2, 5, 3)), ((2, 4, 5), (5,)), ((1, 4, 5), (7, 5, 2)),
    ((3, 1, 4, 17), (1, 2, 17, 3)),
])
def test_matmul_promotion_and_broadcast(rng, sa, sb):
    a, b = f32(rng, *sa), f32(rng, *sb)
    got = K.matmul(a, b)
    ref = mm_ref(a, b)
    assert got.shape == ref.shape
    assert_close(got, ref, atol=1e-5)


def test_matmul_noncontiguous(rng):
    a = f32(rng, 40, 60)[::2, ::3]  # (20, 20), odd strides
    b = f32(rng, 30, 20).T           # transposed view (20, 30)
    gemm_close(K.matmul(a, b), a, b)
    c = f32(rng, 20, 17)[::-1]       # negative stride: copied
    gemm_close(K.matmul(a, c), a, c)
    bb = np.broadcast_to(f32(rng, 1, 17), (20, 17))  # zero stride
    gemm_close(K.matmul(a, bb), a, bb)
    batched = f32(rng, 3, 20, 40)[:, :, ::2]
    assert_close(K.matmul(batched, c), mm_ref(batched, c), atol=1e-5)


def test_matmul_empty_and_k0(rng):
    assert K.matmul(f32(rng, 0, 3), f32(rng, 3, 4)).shape == (0, 4)
    z = K.matmul(np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32))
    np.testing.assert_array_equal(z, np.zeros((3, 4), np.float32))
    assert K.matmul(f32(rng, 0, 2, 3), f32(rng, 3, 4)).shape == (0, 2, 4)


def test_matmul_out_buffer(rng):
    a, b = f32(rng, 17, 9), f32(rng, 9, 5)
    out = np.full((17, 5), np.nan, np.float32)
    assert K.matmul(a, b, out=out) is out
    gemm_close(out, a, b)
    # out aliasing an input is detected and handled
    sq = f32(rng, 6, 6)
    ref = mm_ref(sq, sq)
    assert_close(K.matmul(sq, sq, out=sq), ref, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 3), (17, 129), (2, 5, 17), (129,)])
def test_linear(rng, shape):
    n_in, n_out = shape[-1], 33
    x, w, bias = f32(rng, *shape), f32(rng, n_out, n_in), f32(rng, n_out)
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    assert_close(K.nn_linear(x, w, bias), ref, atol=1e-5)
    assert_close(K.nn_linear(x, w, None), ref - bias, atol=1e-5)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_fused_linear_activation(rng, isa, act):
    x, w, bias = f32(rng, 37, 129, low=-3, high=3), f32(rng, 45, 129), f32(rng, 45)
    pre = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    assert_close(K.fused_linear(x, w, bias, activation=act), ACTS[act](pre), atol=1e-4)


def test_matmul_errors(rng):
    a = f32(rng, 3, 4)
    with pytest.raises(LegatoError, match="matmul.*inner"):
        K.matmul(a, f32(rng, 5, 2))
    with pytest.raises(LegatoError, match="float32"):
        K.matmul(a.astype(np.float64), f32(rng, 4, 2))
    with pytest.raises(LegatoError, match="float32"):
        K.matmul(a.astype(np.int32), f32(rng, 4, 2))
    with pytest.raises(LegatoError, match="ndarray"):
        K.matmul([[1.0]], f32(rng, 1, 1))
    with pytest.raises(LegatoError, match="broadcast"):
        K.matmul(f32(rng, 2, 3, 4), f32(rng, 3, 4, 2))
    with pytest.raises(LegatoError, match="at least one dimension"):
        K.matmul(np.float32(2.0), a)
    with pytest.raises(LegatoError, match="out"):
        K.matmul(a, f32(rng, 4, 2), out=np.empty((3, 3), np.float32))
    with pytest.raises(LegatoError, match="out"):
        K.matmul(a, f32(rng, 4, 2), out=np.empty((3, 4), np.float32)[:, :2])


def test_linear_errors(rng):
    x, w = f32(rng, 3, 4), f32(rng, 5, 4)
    with pytest.raises(LegatoError, match="nn.linear.*features"):
        K.nn_linear(x, f32(rng, 5, 3))
    with pytest.raises(LegatoError, match="nn.linear.*bias"):
        K.nn_linear(x, w, f32(rng, 4))
    with pytest.raises(LegatoError, match="nn.linear"):
        K.nn_linear(x, f32(rng, 5, 4, 1))
    with pytest.raises(LegatoError, match="activation"):
        K.fused_linear(x, w, activation="swish")


def test_c_gemm_rejects_bad_arguments():
    """The C layer checks sizes itself, independently of the Python checks."""
    buf = ffi.new("float[]", 16)
    null = ffi.NULL
    ok = lib.lgk_sgemm(2, 2, 2, buf, 4, 2, 1, buf, 4, 2, 1, buf, 4, 2, null, 0, 0, 0, 1)
    assert ok == lib.LGK_OK
    assert lib.lgk_sgemm(-1, 2, 2, buf, 4, 2, 1, buf, 4, 2, 1, buf, 4, 2, null, 0, 0, 0, 1) == lib.LGK_ERR_SHAPE
    assert lib.lgk_sgemm(2, 2, 2, null, 4, 2, 1, buf, 4, 2, 1, buf, 4, 2, null, 0, 0, 0, 1) == lib.LGK_ERR_NULL
    assert lib.lgk_sgemm(2, 2, 2, buf, 3, 2, 1, buf, 4, 2, 1, buf, 4, 2, null, 0, 0, 0, 1) == lib.LGK_ERR_SHAPE
    assert lib.lgk_sgemm(2, 2, 2, buf, 4, 2, 1, buf, 4, 2, 1, buf, 4, 2, null, 0, 0, 9, 1) == lib.LGK_ERR_ARG
    assert lib.lgk_sgemm(2, 2, 2, buf, 4, 2, 1, buf, 4, 2, 1, buf, 4, 2, null, 0, 1, 0, 1) == lib.LGK_ERR_NULL
    big = 1 << 40
    assert lib.lgk_sgemm(big, big, big, buf, 16, 1, 1, buf, 16, 1, 1, buf, 16, big, null, 0, 0, 0, 1) \
        == lib.LGK_ERR_OVERFLOW


def test_concurrent_callers(rng, monkeypatch):
    """cffi releases the GIL, so kernels run truly concurrently: the shared
    scratch pool and the ISA selection must be thread-safe."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("LEGATO_NUM_THREADS", "2")
    pairs = [(f32(rng, 150 + 40 * (i % 3), 300), f32(rng, 300, 290 - i)) for i in range(8)]

    def work(pair):
        a, b = pair
        return [K.matmul(a, b) for _ in range(5)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, pairs))
    for (a, b), outs in zip(pairs, results):
        for got in outs:
            gemm_close(got, a, b)
    K.release_scratch()


def test_batched_matmul_with_empty_inner_dim_on_strided_views():
    """K == 0 with broadcast batch dims: zeros, whatever strides the empty operands have
    (a planned buffer's view keeps its parent's, which no offset may step into)."""
    a = np.zeros((1, 2, 0), np.float32)
    for b in (np.zeros((5, 1, 0, 3), np.float32), np.zeros((5, 1, 1, 3), np.float32)[:, :, :0]):
        out = np.full((5, 1, 2, 3), 7.0, np.float32)
        K.matmul.bind(a, b, out=out)()
        assert np.array_equal(out, np.zeros((5, 1, 2, 3)))
        assert np.array_equal(K.matmul(b.transpose(0, 1, 3, 2), a.transpose(0, 2, 1)),
                              np.zeros((5, 1, 3, 2)))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_few_column_matvecs(rng, monkeypatch, isa, threads):
    """N <= 4 streams A with dot products (mixture-of-experts mat-vecs): every edge
    around it, B's columns contiguous or strided, A gathered per expert, batch 0."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    experts = f32(rng, 4, 256, 64)
    pick = np.array([3, 0, 1, 3, 2, 2, 0, 1] * 4)
    a, b = experts[pick], f32(rng, 32, 64, 1)
    gemm_close(K.matmul(a, b), a, b)
    gemm_close(K.matmul(experts[None], b[:4]), experts[None], b[:4])  # a broadcast
    for m, n, k in itertools.product((1, 9, 700), (1, 2, 3, 4, 5), (1, 32, 131)):
        a, b = f32(rng, m, k), f32(rng, k, n)
        gemm_close(K.matmul(a, b), a, b)
        gemm_close(K.matmul(a, b.T.copy().T), a, b)  # columns contiguous
        gemm_close(K.matmul(a[None].repeat(3, 0), b[None]), a[None].repeat(3, 0), b[None])
    a, b = f32(rng, 0, 5, 8), f32(rng, 0, 8, 1)
    assert K.matmul(a, b).shape == (0, 5, 1)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_transposed_a_packs_like_rows(rng, monkeypatch, isa, threads):
    """An A whose columns are contiguous (a 1x1 conv's input read with its pixels as rows)
    is packed by vector copies of each k step: the same products, bit for bit, as the
    same A with its rows 2 apart (packed element by element), for every edge tile's row
    count and a K of two blocks."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    for m, n, k in itertools.product((1, 5, 12, 13, 23, 49, 61), (7, 32, 45), (3, 1300)):
        a = f32(rng, k, m).T  # rows m, columns contiguous down each column
        spread = np.zeros((k, 2 * m), np.float32)
        spread[:, ::2] = a.T
        a_rows_apart = spread[:, ::2].T
        b = f32(rng, k, n)
        got = K.matmul(a, b)
        assert np.array_equal(got, K.matmul(a_rows_apart, b)), (m, n, k)
        gemm_close(got, a, b)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_far_c_prefetch_leaves_every_product_unchanged(rng, monkeypatch, isa, threads):
    """A C of 1M floats or more (attention's scores) has its micro-tiles prefetch the lines
    they store next at depths up to 64 as well: the same products, bit for bit, as the
    same rows computed in halves below that size, with and without an epilogue."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    for m, n, k in ((1100, 1000, 64), (1030, 1025, 40)):
        a, b = f32(rng, m, k), f32(rng, k, n)
        bias = f32(rng, n)
        whole = K.matmul(a, b)
        halves = np.concatenate([K.matmul(a[:m // 2], b), K.matmul(a[m // 2:], b)])
        assert np.array_equal(whole, halves), (m, n, k)
        gemm_close(whole, a, b)
        act = K.fused_matmul(a, b, bias=bias, activation="relu")
        act_halves = np.concatenate([K.fused_matmul(a[:m // 2], b, bias=bias, activation="relu"),
                                     K.fused_matmul(a[m // 2:], b, bias=bias, activation="relu")])
        assert np.array_equal(act, act_halves)
        assert np.allclose(act, np.maximum(whole + bias, 0), atol=1e-5)
