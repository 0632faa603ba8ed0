# Bounded random-shape fuzzing of the kernels against numpy (fixed seed: reproducible).

import numpy as np
import pytest

from ck_util import assert_close

from legato_c_kernels import kernels as K


ITERATIONS = 300


def rand_shape(rng, max_rank=4, max_dim=9):
    return tuple(int(d) for d in rng.integers(1, max_dim + 1, size=rng.integers(0, max_rank + 1)))


def rand_array(rng, shape, low=-2.0, high=2.0):
    """A float32 array of `shape`, sometimes as a non-contiguous or reversed view."""
    kind = rng.integers(3)
    if kind == 1 and shape:  # strided view of a bigger array
        big = rng.uniform(low, high, size=shape[:-1] + (shape[-1] * 2,)).astype(np.float32)
        return big[..., ::2]
    x = rng.uniform(low, high, size=shape).astype(np.float32)
    if kind == 2 and len(shape) >= 2:  # transposed copy viewed back
        return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    return x


def broadcast_partner(rng, shape):
    """A shape that broadcasts with `shape`: drop leading dims, set some to 1."""
    keep = shape[rng.integers(0, len(shape) + 1):] if shape else ()
    return tuple(1 if rng.random() < 0.3 else d for d in keep)


BINARY = [(K.add, np.add), (K.subtract, np.subtract), (K.multiply, np.multiply),
          (K.maximum, np.maximum), (K.minimum, np.minimum)]
UNARY = [(K.exp, np.exp), (K.tanh, np.tanh), (K.negative, np.negative), (K.abs_, np.abs),
         (K.nn_relu, lambda x: np.maximum(x, 0))]
REDUCE = [(K.sum_, np.sum), (K.max_, np.max), (K.min_, np.min), (K.mean, np.mean)]


def fuzz_binary(rng):
    fn, ref = BINARY[rng.integers(len(BINARY))]
    sa = rand_shape(rng)
    a, b = rand_array(rng, sa), rand_array(rng, broadcast_partner(rng, sa))
    if rng.random() < 0.5:
        a, b = b, a
    assert_close(fn(a, b), ref(a.astype(np.float64), b.astype(np.float64)), rtol=1e-6)


def fuzz_unary(rng):
    fn, ref = UNARY[rng.integers(len(UNARY))]
    x = rand_array(rng, rand_shape(rng))
    assert_close(fn(x), ref(x.astype(np.float64)), rtol=2e-6)


def fuzz_matmul(rng):
    m, n, k = (int(v) for v in rng.integers(1, 70, size=3))
    batch_a = rand_shape(rng, 2, 3)
    batch_b = broadcast_partner(rng, batch_a)
    if rng.random() < 0.5:
        batch_a, batch_b = batch_b, batch_a
    a, b = rand_array(rng, batch_a + (m, k)), rand_array(rng, batch_b + (k, n))
    assert_close(K.matmul(a, b), np.matmul(a.astype(np.float64), b), atol=1e-4 * k)


def fuzz_reduce(rng):
    fn, ref = REDUCE[rng.integers(len(REDUCE))]
    x = rand_array(rng, rand_shape(rng))
    axes = None
    if x.ndim and rng.random() < 0.8:
        picked = rng.choice(x.ndim, size=rng.integers(0, x.ndim + 1), replace=False)
        axes = tuple(int(a) - x.ndim if rng.random() < 0.3 else int(a) for a in picked)
    keepdims = bool(rng.integers(2))
    expect = ref(x.astype(np.float64), axis=axes, keepdims=keepdims)
    assert_close(fn(x, axes=axes, keepdims=keepdims), expect, rtol=1e-5, atol=1e-5)


def fuzz_softmax_permute(rng):
    shape = rand_shape(rng)
    x = rand_array(rng, shape if shape else (3,), low=-8, high=8)
    axis = int(rng.integers(-x.ndim, x.ndim))
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    assert_close(K.nn_softmax(x, axis=axis), e / e.sum(axis=axis, keepdims=True), rtol=1e-5)
    perm = [int(p) for p in rng.permutation(x.ndim)]
    np.testing.assert_array_equal(K.permute_dims(x, axes=perm), np.transpose(x, perm))


FUZZERS = [fuzz_binary, fuzz_unary, fuzz_matmul, fuzz_reduce, fuzz_softmax_permute]


@pytest.mark.parametrize("fuzzer", FUZZERS, ids=lambda f: f.__name__)
def test_fuzz(fuzzer):
    rng = np.random.default_rng(1234)
    for i in range(ITERATIONS):
        try:
            fuzzer(rng)
        except AssertionError as exc:
            raise AssertionError(f"{fuzzer.__name__} iteration {i}: {exc}") from None
