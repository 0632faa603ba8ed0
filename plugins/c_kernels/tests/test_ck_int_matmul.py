"""int32 matmul on c_kernels: on the int8 GEMM where every row of A and column of B fits
bytes (less a zero point of its own), numpy's integer matmul otherwise; always numpy's
integers."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir.errors import ExecutionError
from legato_c_kernels.kernels import int_matmul as im
from legato_c_kernels.kernels import matmul


@pytest.fixture
def gemm_taken(monkeypatch):
    """How many int32 matmuls the int8 GEMM computed (not numpy)."""
    taken = []
    original = im._int_call

    def spy(*args):
        call = original(*args)
        taken.append(call is not None)
        return call
    monkeypatch.setattr(im, "_int_call", spy)
    return taken


def shifted(rng, dtype, shape, zero_shape):
    """int32 `cast(x) - zero_point` of random int8/uint8 x, as integer programs compute."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(np.int32)
    return x - rng.integers(info.min, info.max + 1, zero_shape).astype(np.int32)


CASES = {
    "u8 minus zp @ s8 minus per-column zp": (np.uint8, (70, 96), np.int8, (96, 50), (50,)),
    "s8 @ s8, batch dims of a folded": (np.int8, (2, 9, 33), np.int8, (33, 17), ()),
    "one row": (np.uint8, (1, 300), np.int8, (300, 64), ()),
    "1-D a": (np.uint8, (40,), np.uint8, (40, 5), ()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_int32_matmul_of_byte_values_runs_on_the_int8_gemm(name, gemm_taken):
    a_dtype, a_shape, b_dtype, b_shape, zero_shape = CASES[name]
    rng = np.random.default_rng(len(name))
    a, b = shifted(rng, a_dtype, a_shape, ()), shifted(rng, b_dtype, b_shape, zero_shape)
    np.testing.assert_array_equal(matmul(a, b), np.matmul(a, b))
    packed = im.pack_int_weight(b)
    assert packed is not None
    np.testing.assert_array_equal(matmul(a, packed), np.matmul(a, b))
    assert gemm_taken == [True, True]


def test_wide_values_and_batched_b_go_to_numpy(gemm_taken):
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, (8, 16)).astype(np.int32)  # a row spans ~2000 values
    b = rng.integers(-100, 100, (16, 4)).astype(np.int32)
    np.testing.assert_array_equal(matmul(a, b), a @ b)
    big = np.full((3, 70000), 255, np.int32)  # K = 70000: the sums wrap, as numpy's do
    ones = np.full((70000, 2), 255, np.int32)
    np.testing.assert_array_equal(matmul(big, ones), big @ ones)
    batched = rng.integers(-5, 5, (2, 16, 3)).astype(np.int32)
    np.testing.assert_array_equal(matmul(a, batched), a @ batched)
    assert gemm_taken == [False, True]  # the batched B never tries the GEMM
    assert im.pack_int_weight(a) is None


def test_int32_bias_and_refusals():
    rng = np.random.default_rng(2)
    a, b = shifted(rng, np.uint8, (5, 12), ()), shifted(rng, np.int8, (12, 7), (7,))
    bias = rng.integers(-9999, 9999, 7).astype(np.int32)
    np.testing.assert_array_equal(im.int_matmul(a, b, bias=bias), a @ b + bias)
    with pytest.raises(ExecutionError, match="matmul: inner dimensions differ"):
        matmul(a, b[:5])
    with pytest.raises(ExecutionError, match="b must be an int32 ndarray like a"):
        matmul(a, b.astype(np.int64))
    with pytest.raises(ExecutionError, match="activation 'relu' is not applied"):
        im.int_matmul(a, b, activation="relu")


def test_integer_program_matmul_is_kept_on_c_kernels(gemm_taken):
    """cast(uint8) - zero_point @ a constant int32 weight: legal on c_kernels, the weight
    packed once for the int8 GEMM, the result numpy's."""
    rng = np.random.default_rng(3)
    w = shifted(rng, np.int8, (64, 48), (48,))
    b = legato.GraphBuilder()
    x = b.input("x", (10, 64), "uint8")
    shifted_x = b.call("subtract", b.call("cast", x, dtype="int32"),
                       b.const(np.array(128, np.int32)))
    mod = b.build(b.call("matmul", shifted_x, b.const(w)))
    compiled = legato.compile(mod, "c_kernels")
    assert "matmul" in {call.op for call in compiled.module.main.calls}
    data = rng.integers(0, 256, (10, 64)).astype(np.uint8)
    np.testing.assert_array_equal(compiled(data), (data.astype(np.int32) - 128) @ w)
    assert gemm_taken == [True]
