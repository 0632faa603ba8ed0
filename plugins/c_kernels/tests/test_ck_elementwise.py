
import math

import numpy as np
import pytest

from legato.ir.errors import LegatoError

from ck_util import SIZES, assert_close, f32

from legato_c_kernels import kernels as K


_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu(x):
    # 0.5 x (1 + erf(x / sqrt 2)) written with erfc: no cancellation for x << 0
    return 0.5 * x * _erfc(-x / math.sqrt(2))


def _gelu_tanh(x):
    # 0.5 x (1 + tanh(z)) == x * sigmoid(2 z), the form without cancellation
    z = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    return x / (1 + np.exp(-2 * z))


UNARY = {
    "negative": (K.negative, np.negative, (-5, 5)),
    "abs": (K.abs_, np.abs, (-5, 5)),
    "exp": (K.exp, np.exp, (-80, 80)),
    "log": (K.log, np.log, (1e-30, 1e30)),
    "sqrt": (K.sqrt, np.sqrt, (0, 1e6)),
    "rsqrt": (K.rsqrt, lambda x: 1 / np.sqrt(x), (1e-6, 1e6)),
    "tanh": (K.tanh, np.tanh, (-12, 12)),
    "sigmoid": (K.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-80, 80)),
    "erf": (K.erf, _erf, (-5, 5)),
    "nn.relu": (K.nn_relu, lambda x: np.maximum(x, 0), (-5, 5)),
    "nn.gelu": (K.nn_gelu, _gelu, (-12, 12)),
    "nn.silu": (K.nn_silu, lambda x: x / (1 + np.exp(-x)), (-80, 80)),
}


def _samples(rng, low, high, shape):
    if low > 0 and high / low > 1e3:  # log-uniform for wide positive ranges
        return np.exp(rng.uniform(np.log(low), np.log(high), size=shape)).astype(np.float32)
    return rng.uniform(low, high, size=shape).astype(np.float32)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_accuracy(rng, name):
    kernel, ref, (low, high) = UNARY[name]
    for n in SIZES + (100_000,):
        x = _samples(rng, low, high, (n,))
        # erf-based tails (|x| > 4) lose a few ulp to the rounding of x*x
        rtol = 1e-5 if name in ("erf", "nn.gelu") else 2e-6
        assert_close(kernel(x), ref(x.astype(np.float64)), rtol=rtol, atol=1e-30)


def test_gelu_tanh(rng):
    x = f32(rng, 4, 129, low=-12, high=12)
    assert_close(K.nn_gelu(x, approximate="tanh"), _gelu_tanh(x.astype(np.float64)), rtol=1e-5,
                 atol=1e-30)
    with pytest.raises(LegatoError, match="approximate"):
        K.nn_gelu(x, approximate="fast")


def test_unary_small_and_special_values():
    x = np.array([0.0, -0.0, 1e-45, 1e-40, 1e-38, np.inf, -np.inf, np.nan, 1.0, -1.0,
                  88.7, -103.0, 89.5, -110.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(K.exp(x), np.exp(x64).astype(np.float32), rtol=2e-6)
        np.testing.assert_allclose(K.log(x), np.log(x64).astype(np.float32), rtol=2e-6)
        np.testing.assert_allclose(K.tanh(x), np.tanh(x64), rtol=2e-6)
        np.testing.assert_allclose(K.erf(x), _erf(x64), rtol=2e-6, atol=1e-45)
        # subnormal results are only good to a subnormal ulp (1.4e-45)
        np.testing.assert_allclose(K.sigmoid(x), 1 / (1 + np.exp(-x64)), rtol=2e-6, atol=1.5e-45)
        np.testing.assert_allclose(K.nn_relu(x), np.maximum(x, 0), rtol=0)
        np.testing.assert_allclose(K.sqrt(x), np.sqrt(x), rtol=1e-7)
    assert np.isnan(K.log(np.array([-1.0], np.float32)))[0]


def test_unary_shapes_noncontiguous_and_out(rng):
    x = f32(rng, 17, 6)[:, ::2].T  # non-contiguous
    assert_close(K.exp(x), np.exp(x.astype(np.float64)))
    assert K.exp(np.float32(1.0)).shape == ()
    assert K.exp(np.zeros((0, 3), np.float32)).shape == (0, 3)
    y = f32(rng, 3, 4)
    ref = np.tanh(y.astype(np.float64))
    assert K.tanh(y, out=y) is y  # in place
    assert_close(y, ref)
    with pytest.raises(LegatoError, match="exp.*float32"):
        K.exp(np.ones(3))
    with pytest.raises(LegatoError, match="out"):
        K.exp(y, out=np.empty((4, 3), np.float32))


BINARY = {
    "add": (K.add, np.add),
    "subtract": (K.subtract, np.subtract),
    "multiply": (K.multiply, np.multiply),
    "divide": (K.divide, np.divide),
    "maximum": (K.maximum, np.maximum),
    "minimum": (K.minimum, np.minimum),
    "power": (K.power, np.power),
}

BROADCASTS = [
    ((129,), (129,)), ((17, 3), (17, 3)), ((), ()), ((17, 129), ()), ((), (3, 17)),
    ((17, 129), (129,)), ((17, 129), (17, 1)), ((1, 129), (17, 1)), ((3, 1, 17), (1, 129, 1)),
    ((2, 3, 1, 5, 1, 3), (3, 4, 1, 1, 3)), ((1,), (3, 17)), ((17, 1, 3), (17, 129, 3)),
]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary_broadcast(rng, name, sa, sb):
    kernel, ref = BINARY[name]
    a = f32(rng, *sa, low=0.5, high=2.0) if name == "power" else f32(rng, *sa)
    b = f32(rng, *sb)
    if name == "divide":
        b = np.where(np.abs(b) < 0.05, np.float32(0.5), b).astype(np.float32)
    assert_close(kernel(a, b), ref(a.astype(np.float64), b.astype(np.float64)), rtol=2e-6)


def test_binary_noncontiguous_and_aliasing(rng):
    a = f32(rng, 20, 30)[::2, ::-3]
    b = f32(rng, 30, 20).T[::2, 5:15]
    assert_close(K.add(a, b), a.astype(np.float64) + b)
    c = np.broadcast_to(f32(rng, 1, 10), (10, 10))
    assert_close(K.multiply(a, c), a.astype(np.float64) * c)
    x = f32(rng, 5, 7)
    ref = x.astype(np.float64) * 2 + 0
    assert K.add(x, x, out=x) is x
    assert_close(x, ref)
    y = f32(rng, 4, 4)
    ref = y.astype(np.float64) - y[0]
    K.subtract(y, y[0], out=y)  # y[0] overlaps out: copied first
    assert_close(y, ref)


def test_binary_nan_propagation():
    a = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    b = np.array([1.0, np.nan, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(K.maximum(a, b), np.maximum(a, b))
    np.testing.assert_array_equal(K.minimum(a, b), np.minimum(a, b))


def test_binary_errors(rng):
    with pytest.raises(LegatoError, match="add.*broadcast"):
        K.add(f32(rng, 3, 4), f32(rng, 5))
    with pytest.raises(LegatoError, match="multiply.*float32"):
        K.multiply(f32(rng, 3), np.ones(3, np.float16))
    with pytest.raises(LegatoError, match="rank 9"):
        K.add(np.ones((1,) * 9, np.float32), np.ones((1,), np.float32))
    with pytest.raises(LegatoError, match="ndarray"):
        K.add(f32(rng, 3), 1.0)
