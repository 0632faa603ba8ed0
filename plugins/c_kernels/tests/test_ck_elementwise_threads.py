"""Unary and binary float kernels of >= 32 Ki elements split over the threads that
LEGATO_NUM_THREADS names (the prepared call carries the count); each element's result is
the one-thread result bit for bit."""

import math

import numpy as np
import pytest

from ck_util import assert_close, f32

from legato_c_kernels.kernels.elementwise import (BINARY_CODES, UNARY_CODES, _plan_binary,
                                                  _plan_unary)


def _on_threads(monkeypatch, plan):
    """plan() run under LEGATO_NUM_THREADS=1 and =2: the two results."""
    got = []
    for threads in (1, 2):
        monkeypatch.setenv("LEGATO_NUM_THREADS", str(threads))
        out, call = plan()
        assert call.args[-1] == threads
        call.run()
        got.append(out)
    return got


@pytest.mark.parametrize("op", ["nn.gelu:approximate=none", "nn.gelu:approximate=tanh", "exp"])
def test_unary_on_two_threads_equals_one_thread(rng, monkeypatch, op):
    x = f32(rng, 1500, 37, low=-6, high=6)  # slices cut the 37-long rows in the middle
    one, two = _on_threads(monkeypatch, lambda: _plan_unary(op, UNARY_CODES[op], x, None, False))
    np.testing.assert_array_equal(two, one)
    x64 = x.astype(np.float64)
    ref = {"exp": np.exp(x64),
           "nn.gelu:approximate=none": 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / 2 ** 0.5)),
           "nn.gelu:approximate=tanh":
               0.5 * x64 * (1 + np.tanh(0.7978845608028654 * (x64 + 0.044715 * x64 ** 3)))}[op]
    assert_close(two, ref, rtol=1e-5)


@pytest.mark.parametrize("op", ["add", "multiply", "power"])
@pytest.mark.parametrize("b_shape", [(1500, 37), (37,), (1500, 1), ()])
def test_binary_on_two_threads_equals_one_thread(rng, monkeypatch, op, b_shape):
    """Same shape (one flat line), a broadcast row, a broadcast column and a scalar."""
    a = f32(rng, 1500, 37, low=0.5, high=2)
    b = f32(rng, *b_shape, low=-2, high=2)
    one, two = _on_threads(monkeypatch,
                           lambda: _plan_binary(op, BINARY_CODES[op], a, b, None, False))
    np.testing.assert_array_equal(two, one)
    fn = {"add": np.add, "multiply": np.multiply, "power": np.power}[op]
    assert_close(two, fn(a.astype(np.float64), np.asarray(b, np.float64)), rtol=1e-5)


def test_binary_of_a_transposed_operand_on_two_threads(rng, monkeypatch):
    a = f32(rng, 1500, 37)
    b = f32(rng, 37, 1500).T  # strided: the lines of the output read b across rows
    one, two = _on_threads(monkeypatch, lambda: _plan_binary("add", BINARY_CODES["add"], a, b,
                                                             None, False))
    np.testing.assert_array_equal(two, one)
    assert_close(two, a.astype(np.float64) + b)
