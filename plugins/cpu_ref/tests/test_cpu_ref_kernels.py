"""Tests of the cpu_ref numpy reference kernels against hand-computed values and naive loops."""
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import legato
from legato.ir.errors import LegatoError
from legato.testing import Sample, samples
from legato.testing.samples import checked
from legato_cpu_ref.kernels import KERNELS

F32 = np.dtype(np.float32)


def run(op, *inputs, **attrs):
    return KERNELS[op](*inputs, **attrs)


def randn(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def a32(values):
    return np.array(values, dtype=np.float32)


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


# --- coverage and the output contract -----------------------------------------------------


def core_ops() -> set:
    """Every op of legato's own op set (plugins add theirs to the same registry)."""
    return {op.name for op in _registry().ops() if op.plugin is None}


def _registry():
    return legato.context().registry


def test_every_core_op_but_custom_has_a_kernel():
    ops = core_ops()
    assert {"add", "nn.conv2d", "qnn.conv2d", "custom"} <= ops
    assert set(KERNELS) == ops - {"custom"}


# calls a naive numpy kernel would answer with a view of (or the very) input
VIEW_PRONE = [
    Sample("sum", (randn(2, 3, 4),), {"axes": (), "keepdims": False}),
    Sample("reshape", (randn(2, 3, 4),), {"shape": (4, -1)}),
    Sample("permute_dims", (randn(2, 3, 4),), {"axes": None}),
    Sample("broadcast_to", (randn(3),), {"shape": (2, 3)}),
    Sample("concat", (randn(2, 3),), {"axis": 0}),
    Sample("split", (randn(2, 3, 4),), {"sections": (1, 2), "axis": 1}),
    Sample("strided_slice", (randn(2, 3, 4),), {"begin": (0,), "end": (2,), "axes": (0,)}),
    Sample("pad", (randn(2, 3),), {"pads": (0, 0, 0, 0)}),
    Sample("squeeze", (randn(1, 2, 1, 3),), {}),
    Sample("expand_dims", (randn(2, 3),), {"axes": (0,)}),
    Sample("flatten", (randn(2, 3, 4),), {"axis": 1}),
    Sample("nn.max_pool2d", (randn(2, 4, 3, 3),), {"pool_size": (1, 1)}),
    Sample("nn.avg_pool2d", (randn(2, 4, 3, 3),), {"pool_size": (1, 1)}),
    Sample("cast", (randn(2, 3),), {"dtype": "float32"}),
    Sample("clip", (randn(2, 3),), {}),
]


def kernel_samples():
    """(id, sample): legato.testing's samples of every op with a kernel, and VIEW_PRONE."""
    cases = [(f"{op}-{i}", s) for op in sorted(KERNELS) for i, s in enumerate(samples(op))]
    return cases + [(f"{s.op}-view", s) for s in VIEW_PRONE]


CASES = kernel_samples()


@pytest.mark.parametrize("sample", [s for _, s in CASES], ids=[i for i, _ in CASES])
def test_output_is_fresh_contiguous_and_typed(sample):
    """Every sample of every kernel: read-only inputs are left alone, results are owned
    C-contiguous arrays of the inferred dtype and shape, never an input's memory."""
    if not sample.outputs:  # a hand-written sample: fill in attributes and types
        sample = checked(sample, _registry())
    inputs = sample.read_only()
    with np.errstate(all="ignore"):
        result = run(sample.op, *inputs, **dict(sample.attrs))
    outputs = result if isinstance(result, tuple) else (result,)
    assert len(outputs) == len(sample.outputs)
    for out, want in zip(outputs, sample.outputs):
        assert type(out) is np.ndarray, sample.describe()
        assert (out.dtype.name, out.shape) == (want.dtype, want.shape), sample.describe()
        assert out.flags.c_contiguous and out.flags.owndata, sample.describe()
        for array in inputs:
            assert array is None or not np.shares_memory(out, array), sample.describe()


def test_samples_cover_every_kernel():
    assert {s.op for _, s in CASES} == set(KERNELS)


def test_split_returns_a_tuple():
    assert isinstance(run("split", np.arange(4), sections=2, axis=0), tuple)


# --- elementwise --------------------------------------------------------------------------


@pytest.mark.parametrize("op, a, b, expected", [
    ("add", [[1, 2, 3]], [[10], [20]], [[11, 12, 13], [21, 22, 23]]),
    ("subtract", [5, 1], [2, 4], [3, -3]),
    ("multiply", [1.5, -2], [2, 3], [3, -6]),
    ("divide", [1, -3], [4, 2], [0.25, -1.5]),
    ("power", [2, 9, 4], [3, 0.5, -1], [8, 3, 0.25]),
    ("maximum", [1, 5], [3, 2], [3, 5]),
    ("minimum", [1, 5], [3, 2], [1, 2]),
])
def test_binary_float(op, a, b, expected):
    out = run(op, a32(a), a32(b))
    assert out.dtype == F32
    close(out, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_divide_truncates_toward_zero(dtype):
    a = np.array([-7, 7, -7, 7, -6, 0, 1], dtype)
    b = np.array([2, -2, -2, 2, 3, -5, -2], dtype)
    out = run("divide", a, b)
    assert out.dtype == dtype
    assert out.tolist() == [-3, -3, 3, 3, -2, 0, 0]


@settings(max_examples=200, deadline=None)
@given(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1).filter(bool))
def test_integer_divide_matches_c(a, b):
    expected = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    if -2**31 <= expected < 2**31:
        assert run("divide", np.array([a], np.int32), np.array([b], np.int32))[0] == expected


def test_integer_arithmetic_stays_exact():
    big = np.array([2**62 + 1, -(2**62) - 3], np.int64)  # not representable in float64
    assert run("add", big, np.array([1, -1], np.int64)).tolist() == [2**62 + 2, -(2**62) - 4]
    assert run("divide", big, np.array([1, 1], np.int64)).tolist() == big.tolist()
    assert int(run("sum", big, axes=None, keepdims=False)) == -2


def test_power_keeps_the_dtype_of_a():
    out = run("power", np.array([2, 3, 5], np.int32), a32([2, 0.5, 1]))
    assert out.dtype == np.int32 and out.tolist() == [4, 1, 5]


def test_binary_float16_stays_float16():
    out = run("multiply", np.array([1.5, 2], np.float16), np.array([2, 0.5], np.float16))
    assert out.dtype == np.float16 and out.tolist() == [3, 1]


@pytest.mark.parametrize("op, expected", [
    ("equal", [[False, True, False], [True, False, False]]),
    ("less", [[True, False, False], [False, False, True]]),
    ("greater", [[False, False, True], [False, True, False]]),
])
def test_comparisons_broadcast_to_bool(op, expected):
    a = np.array([[1, 2, 3], [1, 5, 0]], np.int32)
    b = np.array([[2, 2, 1], [1, 2, 9]], np.int32)
    out = run(op, a, b)
    assert out.dtype == np.bool_ and out.tolist() == expected


def test_comparison_broadcasting_shape():
    assert run("less", a32([[1], [2]]), a32([0, 1.5, 3])).tolist() == [
        [False, True, True], [False, False, True]]


def test_logical_ops():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert run("logical_and", a, b).tolist() == [True, False, False, False]
    assert run("logical_or", a, b).tolist() == [True, True, True, False]
    assert run("logical_not", a).tolist() == [False, False, True, True]


def test_where_broadcasts_all_three():
    out = run("where", np.array([[True], [False]]), a32([1, 2, 3]), a32(-1))
    assert out.dtype == F32 and out.tolist() == [[1, 2, 3], [-1, -1, -1]]


@pytest.mark.parametrize("op, x, expected", [
    ("negative", [1, -2.5], [-1, 2.5]),
    ("abs", [-3, 2], [3, 2]),
    ("exp", [0, 1], [1, math.e]),
    ("log", [1, math.e], [0, 1]),
    ("sqrt", [4, 2.25], [2, 1.5]),
    ("rsqrt", [4, 0.25], [0.5, 2]),
    ("tanh", [0, 1], [0, math.tanh(1)]),
    ("sigmoid", [0, 2, -1000, 1000], [0.5, 1 / (1 + math.exp(-2)), 0, 1]),
    ("erf", [0, 0.5, -1, 3], [0, math.erf(0.5), math.erf(-1), math.erf(3)]),
    ("round", [0.5, 1.5, 2.5, -0.5, -1.5, 2.6, -2.4], [0, 2, 2, -0, -2, 3, -2]),
    ("floor", [-1.5, 1.5, 2], [-2, 1, 2]),
    ("ceil", [-1.5, 1.5, 2], [-1, 2, 2]),
    ("nn.relu", [-1, 0, 2.5], [0, 0, 2.5]),
    ("nn.silu", [0, 1, -2], [0, 1 / (1 + math.exp(-1)), -2 / (1 + math.exp(2))]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary(op, x, expected, dtype):
    with np.errstate(over="raise", invalid="raise"):
        out = run(op, np.array(x, dtype))
    assert out.dtype == dtype
    close(out, expected, tol=1e-6)


def test_unary_float16_stays_float16():
    out = run("exp", np.array([0, 1], np.float16))
    assert out.dtype == np.float16 and abs(float(out[1]) - math.e) < 2e-3


def test_cast():
    x = a32([-1.7, -0.5, 0.5, 1.7, 0])
    assert run("cast", x, dtype="int32").tolist() == [-1, 0, 0, 1, 0]
    assert run("cast", x, dtype="int32").dtype == np.int32
    assert run("cast", x, dtype="bool").tolist() == [True, True, True, True, False]
    assert run("cast", np.array([3, -1], np.int64), dtype="float16").dtype == np.float16
    with pytest.raises(LegatoError):
        run("cast", x, dtype="float8")


def test_leaky_relu_and_clip():
    x = a32([-2, 0, 3])
    close(run("nn.leaky_relu", x, alpha=0.1), [-0.2, 0, 3])
    assert run("clip", x, min=None, max=None).tolist() == [-2, 0, 3]
    assert run("clip", x, min=-1.0, max=None).tolist() == [-1, 0, 3]
    assert run("clip", x, min=None, max=1.0).tolist() == [-2, 0, 1]
    assert run("clip", x, min=-1.0, max=1.0).tolist() == [-1, 0, 1]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = [-3, -0.5, 0, 0.7, 2]
    if approximate == "none":
        expected = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    else:
        expected = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
                    for v in x]
    out = run("nn.gelu", a32(x), approximate=approximate)
    assert out.dtype == F32
    close(out, expected)


# --- reductions and softmax ---------------------------------------------------------------


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


@pytest.mark.parametrize("op, axes, keepdims, expected", [
    ("sum", None, False, 276),
    ("sum", [-1], False, [[6, 22, 38], [54, 70, 86]]),
    ("sum", [0, 2], True, [[[60], [92], [124]]]),
    ("max", [1], False, [[8, 9, 10, 11], [20, 21, 22, 23]]),
    ("min", [-3, -1], False, [0, 4, 8]),
    ("mean", None, False, 11.5),
    ("mean", [1], False, [[4, 5, 6, 7], [16, 17, 18, 19]]),
    ("variance", [0], False, np.full((3, 4), 36.0)),
])
def test_reductions(op, axes, keepdims, expected):
    out = run(op, X, axes=axes, keepdims=keepdims)
    assert out.dtype == F32
    close(out, expected)


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "variance"])
def test_empty_axes_is_the_identity(op):
    out = run(op, X, axes=[], keepdims=False)
    close(out, np.zeros_like(X) if op == "variance" else X)


def test_variance_matches_statistics():
    rows = randn(3, 5, dtype=np.float64)
    for unbiased, fn in ((False, statistics.pvariance), (True, statistics.variance)):
        out = run("variance", rows, axes=[1], keepdims=False, unbiased=unbiased)
        close(out, [fn(r) for r in rows.tolist()], tol=1e-12)


def test_integer_reductions_keep_their_dtype():
    x = np.array([[100, 100], [-7, 2]], np.int8)
    out = run("sum", x, axes=[1], keepdims=False)
    assert out.dtype == np.int8 and out.tolist() == [-56, -5]  # int8 wrap-around
    assert run("max", x, axes=None, keepdims=False).dtype == np.int8


@pytest.mark.parametrize("axes", [[0, 0], [3], [-4]])
def test_bad_reduction_axes(axes):
    with pytest.raises(LegatoError):
        run("sum", X, axes=axes, keepdims=False)


@pytest.mark.parametrize("axis, keepdims, last, expected", [
    (1, True, False, [[1], [0]]),
    (1, False, True, [2, 1]),
    (-2, False, False, [1, 0, 0]),
    (0, True, True, [[1, 0, 0]]),
])
def test_argmax(axis, keepdims, last, expected):
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    out = run("argmax", x, axis=axis, keepdims=keepdims, select_last_index=last)
    assert out.dtype == np.int64 and out.tolist() == expected


@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family(op, axis):
    x = randn(3, 4, 2, dtype=np.float32) * 5
    e = np.exp(x.astype(np.float64))
    soft = e / e.sum(axis=axis, keepdims=True)
    out = run(op, x, axis=axis)
    assert out.dtype == F32
    close(out, soft if op == "nn.softmax" else np.log(soft))


def test_softmax_is_stable_for_large_inputs():
    with np.errstate(over="raise", invalid="raise"):
        close(run("nn.softmax", a32([1000, 1000, -1000]), axis=-1), [0.5, 0.5, 0])
        close(run("nn.log_softmax", a32([1000, 1000]), axis=0), [-math.log(2)] * 2)


def test_matmul():
    a, b = randn(2, 1, 3, 4), randn(3, 4, 5, seed=1)
    out = run("matmul", a, b)
    expected = np.zeros((2, 3, 3, 5))
    for i in range(2):
        for j in range(3):
            expected[i, j] = a[i, 0].astype(np.float64) @ b[j].astype(np.float64)
    assert out.dtype == F32 and out.shape == (2, 3, 3, 5)
    close(out, expected)
    assert run("matmul", a32([1, 2]), a32([[1, 0, 2], [3, 1, 0]])).tolist() == [7, 2, 2]
    vec = run("matmul", a32([1, 2]), a32([3, 4]))
    assert vec.shape == () and float(vec) == 11


# --- data movement ------------------------------------------------------------------------


def test_reshape_permute_broadcast_concat():
    assert run("reshape", X, shape=[-1, 6]).shape == (4, 6)
    assert run("permute_dims", X, axes=None).shape == (4, 3, 2)
    out = run("permute_dims", X, axes=[1, -1, 0])
    assert out.shape == (3, 4, 2) and out[2, 1, 1] == X[1, 2, 1]
    b = run("broadcast_to", a32([1, 2]), shape=[3, 2])
    assert b.tolist() == [[1, 2]] * 3
    c = run("concat", np.ones((2, 1), np.int32), np.zeros((2, 2), np.int32), axis=-1)
    assert c.dtype == np.int32 and c.tolist() == [[1, 0, 0], [1, 0, 0]]


def test_split_equal_and_sized():
    x = np.arange(12).reshape(2, 6)
    parts = run("split", x, sections=3, axis=-1)
    assert [p.tolist() for p in parts] == [[[0, 1], [6, 7]], [[2, 3], [8, 9]],
                                           [[4, 5], [10, 11]]]
    parts = run("split", x, sections=[1, 0, 5], axis=1)
    assert [p.shape for p in parts] == [(2, 1), (2, 0), (2, 5)]
    assert parts[2].tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 10, 11]]


@pytest.mark.parametrize("begin, end, step, expected", [
    (2, 5, 1, [2, 3, 4]),
    (-3, 1000, 1, [7, 8, 9]),
    (-1000, 3, 1, [0, 1, 2]),
    (0, -1, 1, list(range(9))),
    (1, 9, 3, [1, 4, 7]),
    (5, 5, 1, []),
    (8, 1, -3, [8, 5, 2]),
    (-1, -1000, -1, list(range(9, -1, -1))),
    (1000, -1000, -2, [9, 7, 5, 3, 1]),
    (3, -1, -1, []),  # end -1 is index 9, behind a backwards start of 3
    (2, -10, -1, [2, 1]),  # end -10 is index 0, excluded
    (-100, -1000, -1, [0]),  # start clamps to 0
])
def test_strided_slice_1d(begin, end, step, expected):
    out = run("strided_slice", np.arange(10), begin=[begin], end=[end], strides=[step],
              axes=None)
    assert out.tolist() == expected


def test_strided_slice_axes():
    x = np.arange(12).reshape(3, 4)
    out = run("strided_slice", x, begin=(1, -1), end=(3, 0), strides=(1, -1), axes=(0, -1))
    assert out.tolist() == x[1:3, 3:0:-1].tolist()
    out = run("strided_slice", x, begin=[1], end=[2], strides=None, axes=None)
    assert out.tolist() == [[4, 5, 6, 7]]
    out = run("strided_slice", x, begin=[-2], end=[100], strides=None, axes=[1])
    assert out.tolist() == x[:, 2:].tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(-9, 9), st.integers(-9, 9), st.integers(1, 4))
def test_strided_slice_with_positive_steps_matches_python(dim, begin, end, step):
    # For positive steps, ONNX Slice's clamping selects exactly what Python slicing does.
    out = run("strided_slice", np.arange(dim), begin=[begin], end=[end], strides=[step],
              axes=None)
    assert out.tolist() == list(range(dim))[begin:end:step]


def test_take():
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = run("take", data, np.array([[2, -1], [0, -3]]), axis=0)
    assert out.shape == (2, 2, 2)
    assert out.tolist() == [[[4, 5], [4, 5]], [[0, 1], [0, 1]]]
    assert run("take", data, np.array(-1, np.int32), axis=-1).tolist() == [1, 3, 5]


@pytest.mark.parametrize("mode, value, expected", [
    ("constant", 9.0, [9, 9, 1, 2, 3, 9]),
    ("reflect", 0.0, [3, 2, 1, 2, 3, 2]),
    ("edge", 0.0, [1, 1, 1, 2, 3, 3]),
])
def test_pad_modes(mode, value, expected):
    out = run("pad", np.array([1, 2, 3], np.int32), pads=[2, 1], value=value, mode=mode)
    assert out.dtype == np.int32 and out.tolist() == expected


def test_pad_orders_begins_then_ends():
    out = run("pad", np.ones((2, 2), np.float32), pads=(1, 2, 0, 1), value=0.0, mode="constant")
    assert out.tolist() == [[0, 0, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 0]]


def test_squeeze_expand_dims_flatten():
    x = np.zeros((1, 2, 1, 3))
    assert run("squeeze", x, axes=None).shape == (2, 3)
    assert run("squeeze", x, axes=[-2]).shape == (1, 2, 3)
    y = np.zeros((2, 3))
    assert run("expand_dims", y, axes=[0, -1]).shape == (1, 2, 3, 1)
    assert run("expand_dims", y, axes=(-1, -3)).shape == (2, 1, 3, 1)
    z = np.arange(24).reshape(2, 3, 4)
    for axis, shape in ((0, (1, 24)), (1, (2, 12)), (-1, (6, 4)), (-3, (1, 24)), (3, (24, 1))):
        out = run("flatten", z, axis=axis)
        assert out.shape == shape and out.ravel().tolist() == list(range(24))


# --- normalization and linear -------------------------------------------------------------


def standardized(values, eps):
    mean, var = statistics.fmean(values), statistics.pvariance(values)
    return [(v - mean) / math.sqrt(var + eps) for v in values]


def test_layer_norm_over_last_axis():
    x, gamma, beta = randn(2, 3, 4), randn(4, seed=1), randn(4, seed=2)
    out = run("nn.layer_norm", x, gamma, beta, axes=[-1], epsilon=1e-3)
    expected = np.array([[standardized(row, 1e-3) for row in m] for m in x.tolist()])
    assert out.dtype == F32
    close(out, expected * gamma + beta)


def test_layer_norm_over_two_axes_without_params():
    x = randn(2, 3, 4)
    out = run("nn.layer_norm", x, None, None, axes=(1, 2), epsilon=1e-5)
    expected = [np.reshape(standardized(m.ravel().tolist(), 1e-5), (3, 4)) for m in x]
    close(out, expected)


def test_rms_norm():
    x, gamma = randn(3, 4), randn(4, seed=1)
    out = run("nn.rms_norm", x, gamma, axes=[-1], epsilon=1e-5)
    expected = [[v / math.sqrt(statistics.fmean(w * w for w in row) + 1e-5) for v in row]
                for row in x.tolist()]
    close(out, np.array(expected) * gamma)
    close(run("nn.rms_norm", x, None, axes=[-1], epsilon=1e-5), expected)


@pytest.mark.parametrize("axis", [1, -1])
def test_batch_norm(axis):
    x = randn(2, 3, 4)
    channels = x.shape[axis]
    gamma, beta, mean = (randn(channels, seed=s) for s in (1, 2, 3))
    var = np.abs(randn(channels, seed=4)) + np.float32(0.1)
    out = run("nn.batch_norm", x, gamma, beta, mean, var, axis=axis, epsilon=1e-5)
    expected = np.empty(x.shape)
    for c in range(channels):
        index = (slice(None), c) if axis == 1 else (..., c)
        expected[index] = (x[index] - mean[c]) / math.sqrt(var[c] + 1e-5) * gamma[c] + beta[c]
    assert out.dtype == F32
    close(out, expected)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    x, gamma, beta = randn(2, 4, 3, 2), randn(4, seed=1), randn(4, seed=2)
    out = run("nn.group_norm", x, gamma, beta, num_groups=groups, epsilon=1e-5)
    size = 4 // groups
    expected = np.empty(x.shape)
    for n in range(2):
        for g in range(groups):
            block = x[n, g * size:(g + 1) * size]
            expected[n, g * size:(g + 1) * size] = np.reshape(
                standardized(block.ravel().tolist(), 1e-5), block.shape)
    close(out, expected * gamma[:, None, None] + beta[:, None, None])


def test_instance_norm():
    x, gamma, beta = randn(2, 3, 2, 5), randn(3, seed=1), randn(3, seed=2)
    out = run("nn.instance_norm", x, gamma, beta, epsilon=1e-5)
    expected = np.empty(x.shape)
    for n in range(2):
        for c in range(3):
            expected[n, c] = np.reshape(standardized(x[n, c].ravel().tolist(), 1e-5),
                                        (2, 5)) * gamma[c] + beta[c]
    assert out.dtype == F32
    close(out, expected)


def test_linear():
    x, weight, bias = randn(2, 3), randn(4, 3, seed=1), randn(4, seed=2)
    expected = [[sum(x[i, k] * weight[o, k] for k in range(3)) + bias[o] for o in range(4)]
                for i in range(2)]
    close(run("nn.linear", x, weight, bias), expected)
    close(run("nn.linear", x[0], weight, None), np.array(expected[0]) - bias)


# --- convolution --------------------------------------------------------------------------


def naive_conv(x, w, strides, padding, dilation, groups):
    """NCHW x, OIHW w; zero padding; seven plain loops."""
    n, _, h, wd = x.shape
    out_c, in_per_group, kh, kw = w.shape
    top, left, bottom, right = padding
    oh = (h + top + bottom - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + left + right - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, out_c, oh, ow))
    for b in range(n):
        for o in range(out_c):
            group = o // (out_c // groups)
            for y in range(oh):
                for z in range(ow):
                    for c in range(in_per_group):
                        for i in range(kh):
                            for j in range(kw):
                                r = y * strides[0] - top + i * dilation[0]
                                s = z * strides[1] - left + j * dilation[1]
                                if 0 <= r < h and 0 <= s < wd:
                                    out[b, o, y, z] += (float(x[b, group * in_per_group + c, r, s])
                                                        * float(w[o, c, i, j]))
    return out


DATA_TO = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1)}
KERNEL_TO = {"OIHW": (0, 1, 2, 3), "HWIO": (2, 3, 1, 0), "OHWI": (0, 2, 3, 1)}
CONV_CASES = [  # strides, padding, dilation, groups, channels in, channels out
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, 3, 2),
    ((2, 2), (1, 0, 2, 1), (1, 1), 1, 2, 3),
    ((1, 1), (2, 1, 0, 2), (2, 2), 2, 4, 4),
    ((2, 1), (0, 1, 1, 0), (1, 2), 2, 4, 6),
    ((1, 2), (1, 1, 1, 1), (1, 1), 4, 4, 4),  # depthwise
]


@pytest.mark.parametrize("data_layout", DATA_TO)
@pytest.mark.parametrize("kernel_layout", KERNEL_TO)
@pytest.mark.parametrize("strides, padding, dilation, groups, cin, cout", CONV_CASES)
def test_conv2d_against_loops(data_layout, kernel_layout, strides, padding, dilation, groups,
                              cin, cout):
    x, w, bias = randn(2, cin, 5, 6), randn(cout, cin // groups, 3, 2, seed=1), randn(cout)
    expected = naive_conv(x, w, strides, padding, dilation, groups) + bias[:, None, None]
    out = run("nn.conv2d", x.transpose(DATA_TO[data_layout]), w.transpose(KERNEL_TO[kernel_layout]),
              bias, strides=strides, padding=padding, dilation=dilation, groups=groups,
              data_layout=data_layout, kernel_layout=kernel_layout)
    assert out.dtype == F32
    close(out, expected.transpose(DATA_TO[data_layout]), tol=1e-4)


def test_conv2d_without_bias_by_hand():
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 2, 2), np.float32)
    out = run("nn.conv2d", x, w, None, strides=[1, 1], padding=[0, 0, 0, 0],
              dilation=[1, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW")
    assert out.tolist() == [[[[8, 12], [20, 24]]]]


# --- pooling ------------------------------------------------------------------------------


def naive_pool(x, kind, kernel, strides, padding, dilation, ceil_mode, include_pad):
    n, c, h, w = x.shape
    top, left, bottom, right = padding

    def length(size, k, s, d, begin, end):
        exact = (size + begin + end - (d * (k - 1) + 1)) / s + 1
        out = math.ceil(exact) if ceil_mode else math.floor(exact)
        return out - 1 if ceil_mode and (out - 1) * s >= size + begin else out

    oh = length(h, kernel[0], strides[0], dilation[0], top, bottom)
    ow = length(w, kernel[1], strides[1], dilation[1], left, right)
    out = np.empty((n, c, oh, ow))
    for b in range(n):
        for ch in range(c):
            for y in range(oh):
                for z in range(ow):
                    values, in_padded = [], 0
                    for i in range(kernel[0]):
                        for j in range(kernel[1]):
                            r = y * strides[0] - top + i * dilation[0]
                            s = z * strides[1] - left + j * dilation[1]
                            if 0 <= r < h and 0 <= s < w:
                                values.append(float(x[b, ch, r, s]))
                            in_padded += -top <= r < h + bottom and -left <= s < w + right
                    if kind == "max":
                        out[b, ch, y, z] = max(values, default=-math.inf)
                    else:
                        out[b, ch, y, z] = sum(values) / (in_padded if include_pad
                                                          else len(values))
    return out


POOL_CASES = [  # pool_size, strides, padding, dilation, ceil_mode
    ((2, 2), None, (0, 0, 0, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((3, 2), (2, 3), (1, 0, 2, 1), (1, 1), True),
    ((2, 2), (1, 2), (0, 1, 1, 0), (2, 2), True),
    ((3, 3), (3, 3), (1, 1, 1, 1), (1, 1), True),  # last ceil window would start in padding
    ((2, 3), (2, 1), (1, 1, 0, 1), (2, 1), False),
    ((2, 2), (2, 2), (0, 0, 2, 3), (1, 1), True),  # end pads wider than the kernel
]


@pytest.mark.parametrize("data_layout", DATA_TO)
@pytest.mark.parametrize("pool_size, strides, padding, dilation, ceil_mode", POOL_CASES)
@pytest.mark.parametrize("kind, include_pad", [("max", False), ("avg", False), ("avg", True)])
def test_pools_against_loops(data_layout, pool_size, strides, padding, dilation, ceil_mode,
                             kind, include_pad):
    x = randn(2, 3, 5, 7)
    expected = naive_pool(x, kind, pool_size, strides or pool_size, padding, dilation,
                          ceil_mode, include_pad)
    attrs = {"pool_size": pool_size, "strides": strides, "padding": padding,
             "dilation": dilation, "ceil_mode": ceil_mode, "data_layout": data_layout}
    if kind == "avg":
        attrs["count_include_pad"] = include_pad
    out = run(f"nn.{kind}_pool2d", x.transpose(DATA_TO[data_layout]), **attrs)
    assert out.dtype == F32
    close(out, expected.transpose(DATA_TO[data_layout]))


ONE_TO_16 = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)


@pytest.mark.parametrize("op, x, attrs, expected", [
    # ONNX conformance vectors (test_averagepool_2d_ceil, _dilations, _precomputed_pads...)
    ("nn.avg_pool2d", ONE_TO_16, {"pool_size": [3, 3], "strides": [2, 2], "ceil_mode": True},
     [[6, 7.5], [12, 13.5]]),
    ("nn.avg_pool2d", ONE_TO_16, {"pool_size": [2, 2], "strides": [1, 1], "dilation": [2, 2],
                                  "ceil_mode": True}, [[6, 7], [10, 11]]),
    ("nn.max_pool2d", ONE_TO_16, {"pool_size": [3, 3], "strides": [2, 2], "ceil_mode": True},
     [[11, 12], [15, 16]]),
    ("nn.max_pool2d", ONE_TO_16, {"pool_size": [2, 2], "strides": [1, 1], "dilation": [2, 2]},
     [[11, 12], [15, 16]]),
    ("nn.avg_pool2d", np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5),
     {"pool_size": [5, 5], "strides": [1, 1], "padding": [2, 2, 2, 2]},
     [[7, 7.5, 8, 8.5, 9], [9.5, 10, 10.5, 11, 11.5], [12, 12.5, 13, 13.5, 14],
      [14.5, 15, 15.5, 16, 16.5], [17, 17.5, 18, 18.5, 19]]),
    ("nn.avg_pool2d", np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5),
     {"pool_size": [5, 5], "strides": [1, 1], "padding": [2, 2, 2, 2], "count_include_pad": True},
     [[2.52, 3.6, 4.8, 4.08, 3.24], [4.56, 6.4, 8.4, 7.04, 5.52], [7.2, 10, 13, 10.8, 8.4],
      [6.96, 9.6, 12.4, 10.24, 7.92], [6.12, 8.4, 10.8, 8.88, 6.84]]),
    # the ceil-mode overhang is never counted, even with count_include_pad (as onnxruntime)
    ("nn.avg_pool2d", a32([[[[1, 2, 3, 4, 5]]]]),
     {"pool_size": [1, 2], "strides": [1, 2], "ceil_mode": True, "count_include_pad": True},
     [[1.5, 3.5, 5]]),
])
def test_pools_by_hand(op, x, attrs, expected):
    close(run(op, x, **attrs)[0, 0], expected)


# --- quantization -------------------------------------------------------------------------


def test_quantize_rounds_half_to_even():
    x = a32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 3.51])
    out = run("qnn.quantize", x, np.float32(1), np.int8(0), axis=1, dtype="int8")
    assert out.dtype == np.int8 and out.tolist() == [0, 2, 2, 0, -2, -2, 0, 4]
    out = run("qnn.quantize", x, np.float32(0.5), np.int8(10), axis=1, dtype="int8")
    assert out.tolist() == [11, 13, 15, 9, 7, 5, 11, 17]


def test_quantize_divides_in_the_input_precision():
    # 11.75f / 0.1f is the tie 117.5 in float32 (to even: 118), 117.4999982 in float64.
    out = run("qnn.quantize", a32([11.75, -11.75]), np.float32(0.1), np.int8(0), axis=1,
              dtype="int8")
    assert out.tolist() == [118, -118]


@pytest.mark.parametrize("dtype, zero, expected", [
    ("int8", 0, [127, -128, 127, -128, 127]),
    ("uint8", 128, [255, 0, 255, 0, 255]),
    ("uint8", 0, [255, 0, 255, 0, 255]),
])
def test_quantize_saturates(dtype, zero, expected):
    x = a32([300, -300, 1e9, -np.inf, np.inf])
    out = run("qnn.quantize", x, np.float32(1), np.dtype(dtype).type(zero), axis=1, dtype=dtype)
    assert out.dtype == np.dtype(dtype) and out.tolist() == expected


def test_quantize_per_axis():
    x = a32([[1, 2, 3], [-4, 5, 6]])
    out = run("qnn.quantize", x, a32([1, 2, 4]), np.array([0, 1, 2], np.int8), axis=-1,
              dtype="int8")
    assert out.tolist() == [[1, 2, 3], [-4, 3, 4]]  # 5/2 -> 2 and 6/4 -> 2 (ties to even)
    out = run("qnn.quantize", x, a32([1, 0.5]), np.array([3, 0], np.uint8), axis=0,
              dtype="uint8")
    assert out.tolist() == [[4, 5, 6], [0, 10, 12]]


@settings(max_examples=300, deadline=None)
@given(st.floats(-400, 400, width=32), st.sampled_from([0.5, 0.1, 0.25, 3.0, 0.02]),
       st.integers(-20, 20))
def test_quantize_matches_python_rounding(value, scale, zero):
    # Python's round() is half-to-even on the exact float32 quotient.
    quotient = float(np.float32(value) / np.float32(scale))
    expected = min(max(round(quotient) + zero, -128), 127)
    out = run("qnn.quantize", a32([value]), np.float32(scale), np.int8(zero), axis=1,
              dtype="int8")
    assert out.tolist() == [expected]


def test_dequantize():
    x = np.array([-128, 0, 127], np.int8)
    out = run("qnn.dequantize", x, np.float32(0.5), np.int8(-1), axis=1)
    assert out.dtype == F32 and out.tolist() == [-63.5, 0.5, 64]
    out = run("qnn.dequantize", np.array([[10, 20], [30, 40]], np.uint8), a32([1, 0.25]),
              np.array([10, 0], np.uint8), axis=0)
    assert out.tolist() == [[0, 10], [7.5, 10]]
    assert run("qnn.dequantize", x, np.float16(2), np.int8(0), axis=1).dtype == np.float16


def requantize(acc, multiplier, zero, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.rint(acc * multiplier) + zero, info.min, info.max).astype(dtype)


def test_qnn_conv2d_by_hand():
    x = np.array([[[[11, 12], [13, 14]]]], np.uint8)
    w = np.array([[[[1]]]], np.int8)
    # acc = [1, 2, 3, 4]; scale 0.5 * 1 / 1 halves it; ties go to even; zp 5 shifts
    out = run("qnn.conv2d", x, np.float32(0.5), np.uint8(10), w, np.float32(1), np.int8(0),
              np.float32(1), np.uint8(5), None, strides=[1, 1], padding=[0, 0, 0, 0],
              dilation=[1, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW")
    assert out.dtype == np.uint8 and out.tolist() == [[[[5, 6], [7, 7]]]]
    out = run("qnn.conv2d", x, np.float32(0.5), np.uint8(10), w, np.float32(1), np.int8(0),
              np.float32(0.01), np.uint8(250), np.array([-3], np.int32), strides=[1, 1],
              padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, data_layout="NCHW",
              kernel_layout="OIHW")
    assert out.tolist() == [[[[150, 200], [250, 255]]]]  # (acc - 3) * 50 + 250, saturated


@pytest.mark.parametrize("data_layout", DATA_TO)
@pytest.mark.parametrize("kernel_layout", ["OIHW", "HWIO"])
@pytest.mark.parametrize("out_dtype", [np.uint8, np.int8])
def test_qnn_conv2d_against_loops(data_layout, kernel_layout, out_dtype):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 4, 5, 5)).astype(np.uint8)
    w = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    x_zero, w_zero = np.uint8(128), np.arange(-3, 3).astype(np.int8)
    x_scale, w_scale, y_scale = np.float32(0.02), a32([0.01, 0.02, 0.03, 0.01, 0.005, 0.04]), \
        np.float32(0.3)
    y_zero = out_dtype(3)
    attrs = {"strides": (2, 1), "padding": (1, 2, 0, 1), "dilation": (1, 2), "groups": 2,
             "data_layout": data_layout, "kernel_layout": kernel_layout}
    acc = naive_conv(x.astype(np.int64) - 128, w.astype(np.int64) - w_zero[:, None, None, None],
                     attrs["strides"], attrs["padding"], attrs["dilation"], 2)
    acc += bias[:, None, None]
    multiplier = (np.float64(x_scale) * w_scale.astype(np.float64) / np.float64(y_scale))
    expected = requantize(acc, multiplier[:, None, None], 3, out_dtype)
    assert len(np.unique(expected)) > 10  # neither all saturated nor all zero
    out = run("qnn.conv2d", x.transpose(DATA_TO[data_layout]), x_scale, x_zero,
              w.transpose(KERNEL_TO[kernel_layout]), w_scale, w_zero, y_scale, y_zero, bias,
              **attrs)
    assert out.dtype == out_dtype
    assert np.array_equal(out, expected.transpose(DATA_TO[data_layout]))


# --- attention ----------------------------------------------------------------------------


def naive_attention(q, k, v, mask, scale, causal):
    batch, heads, q_len, dim = q.shape
    k_len = k.shape[2]
    mask = None if mask is None else np.broadcast_to(mask, (batch, heads, q_len, k_len))
    out = np.zeros((batch, heads, q_len, v.shape[-1]))
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                scores = []
                for j in range(k_len):
                    s = sum(float(q[b, h, i, t]) * float(k[b, h, j, t]) for t in range(dim))
                    s *= scale
                    if mask is not None:
                        m = mask[b, h, i, j]
                        s = (s if m else -math.inf) if mask.dtype == bool else s + float(m)
                    scores.append(-math.inf if causal and j > i else s)
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                for j, weight in enumerate(weights):
                    out[b, h, i] += weight / sum(weights) * v[b, h, j].astype(np.float64)
    return out


def bool_mask():
    return np.random.default_rng(3).random((1, 1, 3, 5)) > 0.3  # (1, 1, q, k)


def float_mask():
    return randn(2, 1, 1, 5, seed=5)  # (batch, 1, 1, k)


@pytest.mark.parametrize("mask_fn", [lambda: None, bool_mask, float_mask])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_against_loops(mask_fn, causal, scale):
    q, k, v = randn(2, 2, 3, 4), randn(2, 2, 5, 4, seed=1), randn(2, 2, 5, 3, seed=2)
    mask = mask_fn()
    if mask is not None and mask.dtype == bool:
        mask[..., 0] = True  # every row keeps a key, also under the causal mask
    expected = naive_attention(q, k, v, mask, 0.5 if scale is None else scale, causal)
    out = run("nn.attention", q, k, v, mask, scale=scale, causal=causal)
    assert out.dtype == F32
    close(out, expected)


def test_causal_first_query_sees_only_the_first_key():
    q, k = randn(1, 1, 2, 3), randn(1, 1, 4, 3, seed=1)
    v = np.arange(4, dtype=np.float32).reshape(1, 1, 4, 1)
    out = run("nn.attention", q, k, v, None, scale=None, causal=True)
    assert out[0, 0, 0, 0] == 0


# --- errors -------------------------------------------------------------------------------

NCHW = randn(1, 2, 4, 4)
CONV_DEFAULTS = {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1,
                 "data_layout": "NCHW", "kernel_layout": "OIHW"}
W = randn(2, 2, 3, 3)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("pad", (X,), {"pads": [0] * 6, "value": 0.0, "mode": "wrap"}),
    ("pad", (X,), {"pads": [0, -1, 0, 0, 0, 0], "value": 0.0, "mode": "constant"}),
    ("pad", (X,), {"pads": [0, 0], "value": 0.0, "mode": "constant"}),
    ("pad", (X,), {"pads": [0, 0, 4, 0, 0, 0], "value": 0.0, "mode": "reflect"}),
    ("nn.gelu", (X,), {"approximate": "fast"}),
    ("nn.conv2d", (NCHW, W, None), {**CONV_DEFAULTS, "data_layout": "NCWH"}),
    ("nn.conv2d", (NCHW, W, None), {**CONV_DEFAULTS, "kernel_layout": "IOHW"}),
    ("nn.conv2d", (NCHW, W, None), {**CONV_DEFAULTS, "groups": 2}),
    ("nn.conv2d", (NCHW, randn(2, 2, 7, 1), None), CONV_DEFAULTS),
    ("nn.conv2d", (NCHW, W, None), {**CONV_DEFAULTS, "strides": [0, 1]}),
    ("nn.max_pool2d", (NCHW,), {"pool_size": [2, 2], "data_layout": "CHWN"}),
    ("nn.avg_pool2d", (NCHW,), {"pool_size": [5, 2]}),
    ("qnn.quantize", (X, np.float32(1), np.int8(0)), {"axis": 1, "dtype": "int16"}),
    ("split", (X,), {"sections": 4, "axis": 1}),
    ("split", (X,), {"sections": [1, 1], "axis": 1}),
    ("strided_slice", (X,), {"begin": [0], "end": [1], "strides": [0], "axes": None}),
    ("strided_slice", (X,), {"begin": [0, 0], "end": [1], "strides": None, "axes": None}),
    ("take", (X, np.array([3])), {"axis": 1}),
    ("take", (X, np.array([-4])), {"axis": 1}),
    ("take", (X, np.array([0.0])), {"axis": 1}),
    ("reshape", (X,), {"shape": [5, -1]}),
    ("reshape", (X,), {"shape": [-1, -1]}),
    ("permute_dims", (X,), {"axes": [0, 0, 1]}),
    ("broadcast_to", (X,), {"shape": [3, 4]}),
    ("concat", (), {"axis": 0}),
    ("squeeze", (X,), {"axes": [1]}),
    ("flatten", (X,), {"axis": 4}),
    ("flatten", (X,), {"axis": -4}),
    ("nn.group_norm", (X, np.ones(3, np.float32), np.zeros(3, np.float32)),
     {"num_groups": 2, "epsilon": 1e-5}),
    ("argmax", (X,), {"axis": 3, "keepdims": True, "select_last_index": False}),
    ("nn.softmax", (X,), {"axis": -4}),
])
def test_bad_attributes_raise_legato_error(op, inputs, attrs):
    with pytest.raises(LegatoError):
        run(op, *inputs, **attrs)
