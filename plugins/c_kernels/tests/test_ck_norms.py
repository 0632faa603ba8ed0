
import numpy as np
import pytest

from legato.ir.errors import LegatoError

from ck_util import SIZES, assert_close, f32

from legato_c_kernels import kernels as K


def softmax_ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_ref(x, axis):
    x = x.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("shape", [(129,), (3, 17), (17, 3, 129), (2, 3, 1, 17), (1,), (300, 5)])
def test_softmax_every_axis(rng, shape):
    x = f32(rng, *shape, low=-10, high=10)
    for axis in range(-len(shape), len(shape)):
        assert_close(K.nn_softmax(x, axis=axis), softmax_ref(x, axis), rtol=1e-5)
        assert_close(K.nn_log_softmax(x, axis=axis), log_softmax_ref(x, axis), rtol=1e-5,
                     atol=1e-5)


def test_softmax_extremes_inplace_noncontiguous(rng):
    x = np.array([[1000.0, 0.0, -1000.0], [-np.inf, 0.0, 1.0]], np.float32)
    assert_close(K.nn_softmax(x), softmax_ref(x, -1))
    big = f32(rng, 3, 40, low=-0.01, high=0.01) + np.float32(1000)  # large offset
    for axis in (0, 1):
        assert_close(K.nn_log_softmax(big, axis=axis), log_softmax_ref(big, axis), rtol=1e-5)
    y = f32(rng, 6, 40)[:, ::4]
    assert_close(K.nn_softmax(y, axis=0), softmax_ref(y, 0))
    z = f32(rng, 5, 6)
    ref = log_softmax_ref(z, -1)
    assert K.nn_log_softmax(z, out=z) is z
    assert_close(z, ref, atol=1e-6)
    with pytest.raises(LegatoError, match="nn.softmax.*axis"):
        K.nn_softmax(x, axis=2)


def layer_norm_ref(x, gamma, beta, axes, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return y * (1 if gamma is None else gamma) + (0 if beta is None else beta)


@pytest.mark.parametrize("n", SIZES)
def test_layer_norm_last_axis(rng, n):
    x = f32(rng, 5, n) * 3 + 7  # large mean: checks the two-pass variance
    g, b = f32(rng, n), f32(rng, n)
    for gamma, beta in [(g, b), (None, None), (g, None), (None, b)]:
        got = K.nn_layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5)
        assert_close(got, layer_norm_ref(x, gamma, beta, -1, 1e-5), atol=1e-4)


@pytest.mark.parametrize("shape,axes,gshape", [
    ((2, 3, 17), (1, 2), (3, 17)), ((2, 3, 17), (-2, -1), (17,)), ((2, 3, 17), (1,), (3, 1)),
    ((4, 5, 6), (0, 2), (6,)), ((4, 5, 6), (1,), (4, 5, 6)), ((4, 5, 6), (-1,), (5, 1)),
    ((3, 129), (0, 1), ()),
])
def test_layer_norm_axes_and_broadcast_gamma(rng, shape, axes, gshape):
    x, g, b = f32(rng, *shape), f32(rng, *gshape), f32(rng, *gshape)
    got = K.nn_layer_norm(x, g, b, axes=tuple(axes), epsilon=1e-3)
    assert_close(got, layer_norm_ref(x, g, b, tuple(axes), 1e-3), atol=1e-4)
    got = K.nn_rms_norm(x, g, axes=list(axes), epsilon=1e-3)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=tuple(axes), keepdims=True) + 1e-3) * g
    assert_close(got, ref, atol=1e-4)


def test_norm_inplace_noncontiguous_and_errors(rng):
    x = f32(rng, 8, 34)[:, ::2]
    assert_close(K.nn_rms_norm(x, None), x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5),
                 atol=1e-5)
    y = f32(rng, 4, 17)
    ref = layer_norm_ref(y, None, None, -1, 1e-5)
    K.nn_layer_norm(y, None, None, axes=[-1], epsilon=1e-5, out=y)
    assert_close(y, ref, atol=1e-4)
    with pytest.raises(LegatoError, match="gamma"):
        K.nn_layer_norm(y, f32(rng, 5), None)
    with pytest.raises(LegatoError, match="duplicate"):
        K.nn_layer_norm(y, None, None, axes=[1, -1])
    with pytest.raises(LegatoError, match="epsilon"):
        K.nn_layer_norm(y, None, None, epsilon="small")
    with pytest.raises(LegatoError, match="float32"):
        K.nn_rms_norm(y.astype(np.float64))


REDUCE = {"sum": (K.sum_, np.sum), "mean": (K.mean, np.mean), "max": (K.max_, np.max),
          "min": (K.min_, np.min)}


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("shape,axes", [
    ((129,), None), ((17, 129), (1,)), ((17, 129), (0,)), ((17, 129), (-1,)), ((3, 17, 129), (0, 2)),
    ((3, 17, 5), (1,)), ((3, 17, 5), (0, 1)), ((2, 3, 4, 5), (1, 3)), ((2, 3, 4, 5), (-4, -2, -1)),
    ((3, 4), ()), ((1, 3, 1), None), ((5, 4097), (1,)), ((5000, 3), (0,)), ((), None),
])
def test_reductions(rng, name, shape, axes):
    kernel, ref = REDUCE[name]
    x = f32(rng, *shape) + 0.5
    for keepdims in (False, True):
        got = kernel(x, axes=axes, keepdims=keepdims)
        expect = ref(x.astype(np.float64), axis=axes, keepdims=keepdims)
        assert_close(got, expect, rtol=1e-5, atol=1e-5)


def test_reductions_special(rng):
    x = f32(rng, 4, 6)
    x[1, 2] = np.nan
    np.testing.assert_array_equal(np.isnan(K.max_(x, axes=[1])), np.isnan(np.max(x, axis=1)))
    assert np.isnan(K.min_(x))
    assert K.sum_(np.zeros((0, 3), np.float32), axes=[0]).tolist() == [0, 0, 0]
    assert np.isnan(K.mean(np.zeros((0,), np.float32)))
    with pytest.raises(LegatoError, match="max.*zero-size"):
        K.max_(np.zeros((0, 3), np.float32), axes=[0])
    with pytest.raises(LegatoError, match="sum.*out of range"):
        K.sum_(x, axes=[2])
    assert_close(K.sum_(x[:, ::2], axes=[0]), np.sum(x[:, ::2].astype(np.float64), axis=0))


@pytest.mark.parametrize("shape,axes", [
    ((3, 17), None), ((129, 17), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 2, 1)),
    ((5, 1, 3, 2, 4, 3), (5, 3, 1, 0, 4, 2)), ((7,), None), ((), None), ((4, 3), (-1, -2)),
    ((65, 33, 2), (1, 0, 2)), ((2, 65, 33), (0, 2, 1)),
])
def test_permute_dims(rng, shape, axes):
    x = f32(rng, *shape)
    got = K.permute_dims(x, axes=axes)
    np.testing.assert_array_equal(got, np.transpose(x, axes))
    assert got.flags.c_contiguous
    nc = x[..., ::-1] if x.ndim else x
    np.testing.assert_array_equal(K.permute_dims(nc, axes=axes), np.transpose(nc, axes))


def test_permute_errors(rng):
    with pytest.raises(LegatoError, match="permutation"):
        K.permute_dims(f32(rng, 2, 3), axes=[0, 0])
    with pytest.raises(LegatoError, match="permute_dims"):
        K.permute_dims(f32(rng, 2, 3), axes=[0, 2])


@pytest.mark.parametrize("offset, spread", [(0.0, 1.0), (1e3, 1.0), (1e4, 1e-2)])
def test_layer_norm_single_pass_statistics_stay_accurate(offset, spread):
    """One-read mean/variance (shifted sums) must not lose a large mean's low bits."""
    x = np.random.default_rng(3).standard_normal((64, 768))
    x = (x * spread + offset).astype(np.float32)
    got = K.nn_layer_norm(x, None, None, axes=[-1], epsilon=1e-5)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
    assert np.max(np.abs(got - want)) < 2e-5


@pytest.mark.parametrize("row", [[1.0, np.nan, 2.0], [np.nan, 1.0], [3.0, 1.0, np.nan],
                                 [np.inf, 1.0], [-np.inf, 0.0], list(range(40)) + [np.nan]])
def test_softmax_rows_with_nan_or_inf_match_the_reference(row):
    """The softmax shift skips NaNs (a NaN still makes its whole row NaN via the sum)."""
    import legato
    x = np.array([row, row[::-1]], np.float32)
    for op, kernel in (("nn.softmax", K.nn_softmax), ("nn.log_softmax", K.nn_log_softmax)):
        want = legato.context().backend("cpu_ref").kernel(op)(x, axis=-1)
        np.testing.assert_allclose(kernel(x, axis=-1), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, axis", [((37, 1500), -1), ((3, 70, 600), 1), ((2, 5, 4000), -1)])
def test_softmax_on_two_threads_equals_one_thread(rng, monkeypatch, shape, axis):
    """Softmaxes of >= 32 Ki floats split their rows (or column tiles) over the threads that
    LEGATO_NUM_THREADS names, which the prepared call carries; every row's result is the
    one-thread result bit for bit."""
    from legato_c_kernels.kernels.norms import _plan_nn_softmax
    x = f32(rng, *shape, low=-10, high=10)
    got = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
        out, call = _plan_nn_softmax(x, axis=axis)
        assert call.args[-1] == int(threads)
        call.run()
        got[threads] = out
        assert_close(K.nn_log_softmax(x, axis=axis), log_softmax_ref(x, axis), rtol=1e-5,
                     atol=1e-5)
    np.testing.assert_array_equal(got["2"], got["1"])
    assert_close(got["2"], softmax_ref(x, axis), rtol=1e-5)


@pytest.mark.parametrize("rms", [False, True])
def test_layer_and_rms_norm_on_two_threads_equal_one_thread(rng, monkeypatch, rms):
    """Norms of >= 32 Ki floats split their rows over the threads that LEGATO_NUM_THREADS
    names (Whisper-tiny's 1500 x 384); every row's result is the one-thread result."""
    from legato_c_kernels.kernels.norms import _plan_layer_norm, _plan_rms_norm
    x, g, b = f32(rng, 1500, 384, low=-3, high=3), f32(rng, 384), f32(rng, 384)
    got = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
        out, call = _plan_rms_norm(x, g) if rms else _plan_layer_norm(x, g, b)
        assert call.args[-1] == int(threads)
        call.run()
        got[threads] = out
    np.testing.assert_array_equal(got["2"], got["1"])
    x64 = x.astype(np.float64)
    ref = (x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * g if rms
           else layer_norm_ref(x, g, b, -1, 1e-5))
    assert_close(got["2"], ref, atol=1e-4)
