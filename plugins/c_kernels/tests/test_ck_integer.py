"""Integer arithmetic and casts in c_kernels (kernels/elementwise.py): exact, with numpy's
wrap-around, as the reference kernels; prepared calls follow their buffers; a planned
model runs them natively, and a float-to-integer cast (saturating) on the fallback."""
import numpy as np
import pytest

import legato
from legato.ir.errors import LegatoError
from legato.testing import samples
from legato_c_kernels import kernels as K
from legato_c_kernels.kernels import casts, elementwise

INTEGER_OPS = sorted(elementwise.INTEGER_UFUNCS)


def _reference(op):
    return legato.context().backend("cpu_ref").kernel(op)


def _integer_samples(op):
    cases = [s for s in samples(op, count=40)
             if all(str(x.dtype) in elementwise.INTEGER_DTYPES for x in s.inputs)]
    assert cases, op
    return cases


@pytest.mark.parametrize("op", INTEGER_OPS)
def test_integer_ops_match_the_reference_through_kernel_and_bind(op):
    kernel, ref = K.KERNELS[op], _reference(op)
    for sample in _integer_samples(op):
        inputs = [np.copy(x) for x in sample.inputs]
        want = ref(*inputs)
        got = kernel(*inputs)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        out = np.empty(want.shape, want.dtype)
        run = kernel.bind(*inputs, out=out)
        for x in inputs:  # new values in the same buffers
            x[...] = np.flip(x.copy())
        run()
        np.testing.assert_array_equal(out, ref(*inputs))


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_integer_arithmetic_wraps_around(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max, 7], dtype)
    b = np.array([1, 1, 2, 3], dtype)
    wrapped = [info.min, info.min + 1, info.min + 1, 10] if info.min < 0 else [0, 1, 1, 10]
    np.testing.assert_array_equal(K.add(a, b), np.array(wrapped, dtype))
    assert K.multiply(a, b).dtype == dtype
    assert K.subtract(np.array([info.min], dtype), np.array([1], dtype))[0] == info.max


def test_integer_scalars_broadcast_into_a_bound_result():
    a, s = np.arange(16, dtype=np.int64).reshape(1, 16), np.array(3, np.int64)
    out = np.zeros((1, 16), np.int64)
    K.multiply.bind(a, s, out=out)()
    np.testing.assert_array_equal(out, a * 3)


def test_mixed_or_wrong_operands_are_refused():
    with pytest.raises(LegatoError, match="one dtype"):
        K.add(np.ones(3, np.int64), np.ones(3, np.int32))
    with pytest.raises(LegatoError, match="out must be"):
        K.add(np.ones(3, np.int64), np.ones(3, np.int64), out=np.empty(3, np.int32))
    with pytest.raises(LegatoError, match="float32"):
        K.exp(np.ones(3, np.int64))  # no integer form: the float kernel says what it takes


def test_casts_match_the_reference():
    ref = _reference("cast")
    ran = 0
    for sample in samples("cast", count=60):
        (x,), dtype = sample.inputs, sample.attrs["dtype"]
        if casts._cast_refusal(str(x.dtype), dtype) is not None:
            with pytest.raises(LegatoError, match="cast"):
                K.cast(x, dtype=dtype)
            continue
        want = ref(x, dtype=dtype)
        got = K.cast(x, dtype=dtype)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        out = np.empty(want.shape, want.dtype)
        K.cast.bind(x, out=out, dtype=dtype)()
        np.testing.assert_array_equal(out, want)
        ran += 1
    assert ran >= 10


def test_casts_wrap_and_map_to_bool_as_numpy():
    big = np.array([2 ** 31 + 5, -1, 0, 3], np.int64)
    np.testing.assert_array_equal(K.cast(big, dtype="int32"), big.astype(np.int32))
    np.testing.assert_array_equal(K.cast(big, dtype="bool"), [True, True, False, True])
    np.testing.assert_array_equal(K.cast(np.array([True, False]), dtype="int64"), [1, 0])
    nan = np.array([np.nan, 0.0, -0.5], np.float32)
    np.testing.assert_array_equal(K.cast(nan, dtype="bool"), [True, False, True])


def test_a_planned_model_runs_integer_steps_natively_and_saturating_casts_on_the_fallback():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 8))
    ids = b.input("ids", (2, 8), "int64")
    mask = b.call("cast", b.call("less", ids, b.const(np.array(5, np.int64))), dtype="int32")
    positions = b.call("add", b.call("multiply", b.call("cast", mask, dtype="int64"), ids),
                       b.const(np.array(2, np.int64)))
    big = b.call("cast", b.call("multiply", x, 1e10), dtype="int64")  # saturates
    mod = b.build(b.call("add", positions, big))
    c = legato.compile(mod, "c_kernels")
    assert c.report.ops("fallback") == {"cast": 1}
    x_in = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    ids_in = np.arange(16, dtype=np.int64).reshape(2, 8) - 4
    got = c(x_in, ids_in)
    want = legato.reference(mod)(x_in, ids_in)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_isnan_is_one_kernel_step_and_matches_numpy():
    x = np.array([[0.0, np.nan, -np.inf], [np.inf, -0.0, np.nan]], np.float32)
    np.testing.assert_array_equal(K.isnan(x), np.isnan(x))
    out = np.zeros(x.shape, bool)
    run = K.isnan.bind(x, out=out)
    x[0, 0] = np.nan  # the prepared call reads the buffer's current values
    run()
    np.testing.assert_array_equal(out, np.isnan(x))
    with pytest.raises(LegatoError, match="isnan"):
        K.isnan(np.ones(3, np.int64))
    b = legato.GraphBuilder()
    a = b.input("a", (2, 3))
    mod = b.build(b.call("where", b.call("isnan", a), 0.0, a))
    c = legato.compile(mod, "c_kernels")
    assert [call.op for call in c.module.main.calls] == ["isnan", "where"]
    np.testing.assert_array_equal(c(x), np.where(np.isnan(x), 0.0, x))


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_integer_sums_match_the_reference_and_run_natively(dtype):
    """Integer sums (counts of masks in index arithmetic) wrap as the reference's cast back
    does; a planned model runs them as c_kernels steps, not on the fallback."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 127, (4, 5, 6)).astype(dtype) * np.array(3, dtype)  # some wrap
    ref = _reference("sum")
    for axes, keepdims in ((None, False), ([-1], False), ([0, 2], True), ([], False)):
        want = ref(x, axes=axes, keepdims=keepdims)
        got = K.KERNELS["sum"](x, axes=axes, keepdims=keepdims)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        out = np.zeros(want.shape, want.dtype)
        run = K.KERNELS["sum"].bind(x, out=out, axes=axes, keepdims=keepdims)
        x += 1  # a prepared call reads the buffer as it is when it runs
        run()
        assert np.array_equal(out, ref(x, axes=axes, keepdims=keepdims))
    b = legato.GraphBuilder()
    v = b.input("v", x.shape, dtype)
    module = b.build(b.call("sum", v, axes=[1]))
    compiled = legato.compile(module, "c_kernels")
    steps = compiled._runner.prototype.steps
    assert [s.call.op for s in steps] == ["sum"] and steps[0].touches[0].role == 0
    assert np.array_equal(compiled(x), legato.reference(module)(x))
