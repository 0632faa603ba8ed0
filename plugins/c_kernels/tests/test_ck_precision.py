"""float32 accuracy of the C kernels against float64, over the whole float range: the
bounds documented per op in plugins/c_kernels/README.md."""
import math

import numpy as np
import pytest

import legato
from legato_c_kernels import kernels as K

_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_erf = np.vectorize(math.erf, otypes=[np.float64])
TINY = np.finfo(np.float32).tiny


def _sigmoid(v):
    e = np.exp(-np.abs(v))
    return np.where(v >= 0, 1 / (1 + e), e / (1 + e))


def _ulps(got, want):
    """|got - want| in steps of float32 at want (the step below |want|, so that values
    just under 1 count in 2^-24); subnormal results count in the subnormal step."""
    w32 = want.astype(np.float32)
    step = np.spacing(np.nextafter(np.abs(w32), np.float32(0))).astype(np.float64)
    step = np.maximum(step, float(np.spacing(np.float32(0))))
    err = np.abs(got.astype(np.float64) - want) / step
    return np.where(got == w32, 0.0, err)


GRID = np.unique(np.concatenate([np.linspace(-100, 100, 40001, dtype=np.float32),
                                 np.linspace(-20, 20, 40001, dtype=np.float32)]))

# op: (kernel, float64 reference, input range, max ulp for normal results)
BOUNDS = {
    "sigmoid": (K.sigmoid, _sigmoid, (-100, 100), 3),
    "tanh": (K.tanh, np.tanh, (-100, 100), 2),
    "erf": (K.erf, _erf, (-100, 100), 3),
    "exp": (K.exp, np.exp, (-87, 88), 2),
    "nn.silu": (K.nn_silu, lambda v: v * _sigmoid(v), (-87, 100), 4),
    "nn.gelu": (K.nn_gelu, lambda v: 0.5 * v * _erfc(-v / math.sqrt(2)), (-12.9, 100), 8),
}


@pytest.mark.parametrize("op", sorted(BOUNDS))
def test_unary_ops_stay_within_their_documented_ulp(op):
    kernel, reference, (lo, hi), bound = BOUNDS[op]
    x = GRID[(GRID >= lo) & (GRID <= hi)]
    want = reference(x.astype(np.float64))
    err = _ulps(kernel(x), want)
    normal = np.abs(want) >= TINY
    assert err[normal].max() <= bound, x[normal][np.argmax(err[normal])]
    assert err[~normal].max(initial=0) <= 64  # subnormal results: absolute error < 1e-43


def test_sigmoid_is_correctly_rounded_just_below_one():
    """Where float32 still has values between sigmoid(x) and 1 (x up to ~17.3) the C
    sigmoid must not round to 1.0 early."""
    x = np.linspace(10, 20, 20001, dtype=np.float32)
    want = _sigmoid(x.astype(np.float64))
    got = K.sigmoid(x)
    assert np.all(np.abs(got - want) <= 2.0 ** -25 * 1.001)
    assert got[x < 17.0].max() < 1.0


def _norm_ref(x, gamma, beta, centered, eps):
    x = x.astype(np.float64)
    d = x - x.mean(axis=-1, keepdims=True) if centered else x
    y = d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + eps)
    return y * gamma + (beta if beta is not None else 0)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1.0, 1e19, 1e20, 1e30, 3e37])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_norms_hold_at_any_scale(rng, scale, eps):
    """Squares of |x| beyond ~1.8e19 overflow a float, below ~1e-19 they underflow:
    neither may show in the result."""
    unit = rng.uniform(-1, 1, (3, 257))
    x = (unit * scale).astype(np.float32)
    gamma = rng.uniform(0.5, 2, 257).astype(np.float32)
    beta = rng.uniform(-1, 1, 257).astype(np.float32)
    atol = 1e-6 if eps == 0 or scale >= 1e-3 else 1e-5  # tiny rows: eps dominates
    np.testing.assert_allclose(K.nn_layer_norm(x, gamma, beta, epsilon=eps),
                               _norm_ref(x, gamma, beta, True, eps), rtol=1e-4, atol=atol)
    np.testing.assert_allclose(K.nn_rms_norm(x, gamma, epsilon=eps),
                               _norm_ref(x, gamma, None, False, eps), rtol=1e-4, atol=atol)
    shifted = (unit * scale / 100 + scale).astype(np.float32)  # mean 100x the spread
    np.testing.assert_allclose(K.nn_layer_norm(shifted, epsilon=eps),
                               _norm_ref(shifted, 1, None, True, eps), rtol=1e-3, atol=1e-4)


def test_layer_norm_of_huge_values_matches_the_reference_end_to_end():
    b = legato.GraphBuilder()
    x = b.input("x", (4, 64))
    mod = b.build(b.call("nn.layer_norm", x, None, None),
                  b.call("nn.rms_norm", x, None, axes=[0]))
    data = (np.random.default_rng(3).standard_normal((4, 64)) * 1e25).astype(np.float32)
    for got, want in zip(legato.compile(mod, "c_kernels")(data), legato.reference(mod)(data)):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
