"""Edge behaviour every backend shares: zero-size tensors, refused geometries, integer edge
values and float precision at the ends of the range.

Zero-size tensors are valid everywhere: an op whose result is empty gives an empty array of
the inferred type on the reference kernels, through its decomposition and on c_kernels.
Where no answer exists (a max over an empty axis, a window over padding alone) the op's
inference refuses with a ShapeError, so every backend refuses alike at build time.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import legato
from legato.ir.errors import ShapeError
from legato_cpu_ref.kernels import KERNELS

F32 = np.float32


def zeros(*shape, dtype=F32):
    return np.zeros(shape, dtype)


def randn(*shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def build(op, arrays, attrs):
    """A one-call module of `op` on inputs shaped like `arrays` (None: absent optional)."""
    b = legato.GraphBuilder()
    values, feeds = [], []
    for index, item in enumerate(arrays):
        if item is None:
            values.append(None)
            continue
        item = np.asarray(item)
        values.append(b.input(f"in{index}", item.shape, item.dtype.name))
        feeds.append(item)
    return b.build(b.call(op, *values, **attrs)), feeds


def quietly(fn):
    """Run fn with every warning an error: kernels must be warning-free."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


# --- zero-size tensors --------------------------------------------------------------------

EMPTY_CASES = {  # id: (op, inputs, attrs)
    "softmax-empty-axis": ("nn.softmax", [zeros(2, 0)], {}),
    "log_softmax-empty-axis": ("nn.log_softmax", [zeros(0, 3)], {"axis": 0}),
    "layer_norm-empty-axis": ("nn.layer_norm", [zeros(2, 0), None, None], {}),
    "layer_norm-batch0": ("nn.layer_norm", [zeros(0, 4), randn(4), randn(4)], {}),
    "rms_norm-empty-axis": ("nn.rms_norm", [zeros(3, 0), None], {}),
    "group_norm-batch0": ("nn.group_norm", [zeros(0, 4, 2, 2), randn(4), randn(4)],
                          {"num_groups": 2}),
    "group_norm-spatial0": ("nn.group_norm", [zeros(2, 4, 0, 2), randn(4), randn(4)],
                            {"num_groups": 2}),
    "instance_norm-spatial0": ("nn.instance_norm", [zeros(2, 4, 0, 2), randn(4), randn(4)],
                               {}),
    "batch_norm-batch0": ("nn.batch_norm", [zeros(0, 4, 2, 2)] + [np.abs(randn(4))] * 4,
                          {}),
    "variance-batch0": ("variance", [zeros(0, 4)], {"axes": [1]}),
    "conv-batch0": ("nn.conv2d", [zeros(0, 2, 4, 4), randn(3, 2, 3, 3), randn(3)], {}),
    "conv-nhwc-batch0": ("nn.conv2d", [zeros(0, 4, 4, 2), randn(3, 3, 2, 3), None],
                         {"data_layout": "NHWC", "kernel_layout": "HWIO"}),
    "conv-out-channels0": ("nn.conv2d", [randn(1, 2, 4, 4), zeros(0, 2, 3, 3), None], {}),
    "conv-in-channels0": ("nn.conv2d", [zeros(1, 0, 4, 4), zeros(3, 0, 3, 3), randn(3)], {}),
    "conv-spatial0-padded": ("nn.conv2d", [zeros(1, 2, 0, 3), randn(3, 2, 1, 1), randn(3)],
                             {"padding": [1, 0, 1, 0]}),
    "max_pool-batch0": ("nn.max_pool2d", [zeros(0, 2, 4, 4)], {"pool_size": [2, 2]}),
    "max_pool-channels0": ("nn.max_pool2d", [zeros(1, 0, 4, 4)],
                           {"pool_size": [2, 2], "padding": [1, 1, 1, 1]}),
    "avg_pool-batch0": ("nn.avg_pool2d", [zeros(0, 2, 4, 4)],
                        {"pool_size": [2, 2], "ceil_mode": True}),
    "linear-batch0": ("nn.linear", [zeros(0, 3), randn(4, 3), randn(4)], {}),
    "linear-in-features0": ("nn.linear", [zeros(2, 0), zeros(4, 0), randn(4)], {}),
    "matmul-inner0": ("matmul", [zeros(2, 0), zeros(0, 3)], {}),
    "gelu-empty": ("nn.gelu", [zeros(0, 3)], {"approximate": "tanh"}),
    "quantize-empty": ("qnn.quantize", [zeros(0, 3), np.float32(0.1), np.int8(0)], {}),
    "qnn_conv-batch0": ("qnn.conv2d", [zeros(0, 2, 4, 4, dtype=np.uint8), np.float32(0.5),
                                       np.uint8(3), np.ones((2, 2, 3, 3), np.int8),
                                       np.float32(0.25), np.int8(0), np.float32(0.5),
                                       np.uint8(1), None], {}),
    "attention-no-queries": ("nn.attention", [zeros(1, 2, 0, 4), randn(1, 2, 3, 4),
                                              randn(1, 2, 3, 4), None], {}),
    "attention-batch0": ("nn.attention", [zeros(0, 2, 3, 4)] * 3 + [None], {"causal": True}),
    "attention-head_dim0-with-scale": ("nn.attention", [zeros(1, 2, 3, 0), zeros(1, 2, 3, 0),
                                                        randn(1, 2, 3, 4), None],
                                       {"scale": 1.0}),
    "argmax-batch0": ("argmax", [zeros(0, 3)], {"axis": 1}),
    "take-no-indices": ("take", [randn(3, 2), np.zeros((0,), np.int64)], {}),
}


def _run_everywhere(op, arrays, attrs):
    mod, feeds = build(op, arrays, attrs)
    result = mod.main.results[0]
    runs = {
        "reference": lambda: legato.reference(mod)(*feeds),
        "decomposed": lambda: legato.compile(mod, backend="cpu_ref")(*feeds),
        "max_level=0": lambda: legato.reference(legato.legalize(mod, max_level=0).module)(
            *feeds),
    }
    return result, {name: quietly(fn) for name, fn in runs.items()}, mod, feeds


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_zero_size_inputs_agree_on_cpu_ref_and_the_decomposition(case):
    op, arrays, attrs = EMPTY_CASES[case]
    result, outs, _, _ = _run_everywhere(op, arrays, attrs)
    expected = outs["reference"]
    assert (expected.shape, expected.dtype.name) == (result.shape, result.dtype)
    for name, out in outs.items():
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6, err_msg=name)
        assert out.dtype == expected.dtype, name


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_zero_size_inputs_agree_on_c_kernels(case):
    op, arrays, attrs = EMPTY_CASES[case]
    mod, feeds = build(op, arrays, attrs)
    expected = legato.reference(mod)(*feeds)
    for backend in ("c_kernels", ["c_kernels", "cpu_ref"]):
        out = legato.compile(mod, backend=backend)(*feeds)
        assert (out.shape, out.dtype) == (expected.shape, expected.dtype)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_an_empty_result_decomposes_to_an_empty_constant():
    """The softmax decomposition would take a max over the empty axis; with an empty result
    it is not run at all."""
    mod, _ = build("nn.softmax", [zeros(4, 0)], {})
    lowered = legato.legalize(mod, max_level=0).module
    assert lowered.main.calls == ()
    assert lowered.main.results[0].type == mod.main.results[0].type


def test_normal_shapes_decompose_as_before():
    mod, _ = build("nn.softmax", [zeros(4, 3)], {})
    ops = [c.op for c in legato.legalize(mod, max_level=0).module.main.calls]
    assert ops == ["max", "subtract", "exp", "sum", "divide"]


# --- refusals at inference ----------------------------------------------------------------

REFUSED = {  # id: (op, inputs, attrs, what the message must name)
    "max-empty-axis": ("max", [zeros(2, 0)], {"axes": [1]}, "empty axis 1"),
    "sum-empty-axis": ("sum", [zeros(0, 3)], {"axes": [0]}, "empty axis 0"),
    "argmax-empty-axis": ("argmax", [zeros(2, 0, 4)], {"axis": 1}, "empty axis 1"),
    "conv-zero-kernel-height": ("nn.conv2d", [randn(1, 2, 3, 3), zeros(4, 2, 0, 2), None], {},
                                r"weight \[4, 2, 0, 2\] \(OIHW\) kernel \[0, 2\]"),
    "conv-zero-kernel-hwio": ("nn.conv2d", [randn(1, 3, 3, 2), zeros(2, 0, 2, 4), None],
                              {"data_layout": "NHWC", "kernel_layout": "HWIO"},
                              r"kernel \[2, 0\]"),
    "qnn_conv-zero-kernel": ("qnn.conv2d", [zeros(1, 2, 4, 4, dtype=np.uint8), np.float32(1),
                                            np.uint8(0), zeros(2, 2, 0, 3, dtype=np.int8),
                                            np.float32(1), np.int8(0), np.float32(1),
                                            np.uint8(0), None], {}, r"kernel \[0, 3\]"),
    "qnn_conv-empty-weight-scale": ("qnn.conv2d", [zeros(1, 2, 4, 4, dtype=np.uint8),
                                                   np.float32(1), np.uint8(0),
                                                   zeros(2, 2, 3, 3, dtype=np.int8),
                                                   zeros(0), np.int8(0), np.float32(1),
                                                   np.uint8(0), None], {}, "scale"),
    "qnn_conv-per-channel-out-scale": ("qnn.conv2d", [zeros(1, 2, 4, 4, dtype=np.uint8),
                                                      np.float32(1), np.uint8(0),
                                                      zeros(2, 2, 3, 3, dtype=np.int8),
                                                      np.float32(1), np.int8(0), zeros(2),
                                                      np.zeros(2, np.uint8), None], {},
                                       "out_scale"),
    "conv-stride0": ("nn.conv2d", [randn(1, 2, 3, 3), randn(4, 2, 2, 2), None],
                     {"strides": [0, 1]}, r"strides \[0, 1\]"),
    "conv-negative-padding": ("nn.conv2d", [randn(1, 2, 3, 3), randn(4, 2, 2, 2), None],
                              {"padding": [0, -1, 0, 0]}, r"padding \[0, -1, 0, 0\]"),
    "conv-dilation0": ("nn.conv2d", [randn(1, 2, 3, 3), randn(4, 2, 2, 2), None],
                       {"dilation": [1, 0]}, r"dilation \[1, 0\]"),
    "conv-groups0": ("nn.conv2d", [randn(1, 2, 3, 3), randn(4, 2, 2, 2), None],
                     {"groups": 0}, "groups=0"),
    "conv-window-too-big": ("nn.conv2d", [randn(1, 2, 3, 3), randn(4, 2, 4, 2), None], {},
                            r"window of 4 \(kernel 4, dilation 1\) does not fit input 3"),
    "pool-window-over-padding-only": ("nn.avg_pool2d", [randn(1, 1, 2, 2)],
                                      {"pool_size": [2, 2], "strides": [1, 1],
                                       "padding": [2, 0, 0, 0]}, "only padding"),
    "pool-dilated-window-skips-input": ("nn.max_pool2d", [randn(1, 1, 1, 4)],
                                        {"pool_size": [2, 1], "strides": [1, 1],
                                         "dilation": [3, 1], "padding": [1, 0, 2, 0]},
                                        "only padding"),
    "pool-spatial0": ("nn.max_pool2d", [zeros(1, 1, 0, 4)],
                      {"pool_size": [1, 1], "padding": [1, 0, 1, 0]}, "only padding"),
    "pool-size0": ("nn.max_pool2d", [randn(1, 1, 3, 3)], {"pool_size": [0, 1]},
                   r"pool_size \[0, 1\]"),
    "attention-no-keys": ("nn.attention", [randn(1, 2, 3, 4), zeros(1, 2, 0, 4),
                                           zeros(1, 2, 0, 4), None], {}, "at least one key"),
    "attention-head_dim0-default-scale": ("nn.attention", [zeros(1, 2, 3, 0),
                                                           zeros(1, 2, 3, 0),
                                                           randn(1, 2, 3, 4), None], {},
                                          "give scale"),
    "broadcast_to-negative": ("broadcast_to", [randn(1, 3)], {"shape": [-1, 3]},
                              r"shape \[-1, 3\] has a negative"),
    "split-no-sections": ("split", [zeros(0, 3)], {"sections": []}, r"split sizes \[\]"),
    "reshape-two-minus-ones": ("reshape", [zeros(2, 3)], {"shape": [-1, -1]}, "more than one"),
    "reshape-below-minus-one": ("reshape", [zeros(2, 3)], {"shape": [-2, -3]}, "invalid"),
    "axis-out-of-range": ("nn.softmax", [zeros(2, 3)], {"axis": 2}, "axis 2"),
    "conv-stride-beyond-int64": ("nn.conv2d", [randn(1, 1, 4, 4), randn(1, 1, 2, 2), None],
                                 {"strides": [2**70, 1]}, r"strides .* below 2\*\*31"),
    "pool-stride-2**63": ("nn.max_pool2d", [randn(1, 1, 4, 4)],
                          {"pool_size": [2, 2], "strides": [2**63, 1]}, "below 2"),
    "pool-size-huge": ("nn.max_pool2d", [randn(1, 1, 4, 4)], {"pool_size": [2**40, 2]},
                       r"pool_size \[1099511627776, 2\]"),
    "clip-nan-bound": ("clip", [zeros(2, dtype=np.int8)], {"min": -1.0, "max": math.nan},
                       "max is NaN"),
    "pad-bool-with-a-half": ("pad", [np.ones(2, bool)], {"pads": [1, 1], "value": 0.5},
                             "not a bool"),
    "split-into-2**70-parts": ("split", [zeros(0, 3)], {"sections": 2**70},
                               "at most 65536 results"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_undefined_cases_are_refused_at_inference(case):
    op, arrays, attrs, names = REFUSED[case]
    with pytest.raises(ShapeError, match=names):
        build(op, arrays, attrs)


def test_a_pool_window_touching_the_input_is_accepted():
    """The padding check refuses only windows that see no input cell."""
    mod, feeds = build("nn.avg_pool2d", [randn(1, 1, 2, 2)],
                       {"pool_size": [3, 3], "strides": [1, 1], "padding": [2, 2, 2, 2]})
    out = legato.reference(mod)(*feeds)
    assert out.shape == (1, 1, 4, 4) and np.all(np.isfinite(out))


# --- integer edge values: defined, deterministic and warning-free -------------------------

def kernel(op, *inputs, **attrs):
    return quietly(lambda: KERNELS[op](*inputs, **attrs))


def i8(*values):
    return np.array(values, np.int8)


def test_integer_division_by_zero_and_overflow():
    out = kernel("divide", i8(-128, 5, 0, -7, 7), i8(-1, 0, 0, 2, -2))
    assert out.tolist() == [-128, 0, 0, -3, -3] and out.dtype == np.int8


def test_integer_power_with_negative_exponents():
    a = np.array([2, 1, -1, -1, 0, 3, -3], np.int32)
    b = np.array([-1, -5, -3, -2, -1, 2, 3], np.int32)
    assert kernel("power", a, b).tolist() == [0, 1, -1, 1, 0, 9, -27]


def test_abs_and_negative_of_the_minimum_wrap():
    assert kernel("abs", i8(-128, -3)).tolist() == [-128, 3]
    assert kernel("negative", i8(-128, 3)).tolist() == [-128, -3]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_float_to_int_cast_saturates_and_maps_nan_to_zero(dtype):
    info = np.iinfo(dtype)
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, -1.7, 2.7, info.max + 0.0], F32)
    out = kernel("cast", x, dtype=dtype)
    truncated_minus_1_7 = 0 if info.min == 0 else -1  # -1 saturates to 0 when unsigned
    assert out.dtype == np.dtype(dtype)
    assert out.tolist() == [0, info.max, info.min, info.max, info.min,
                            truncated_minus_1_7, 2, info.max]


def test_float_to_int_cast_of_int64_bounds_from_float64():
    x = np.array([2.0**63, -2.0**63, 2.0**62], np.float64)
    assert kernel("cast", x, dtype="int64").tolist() == [2**63 - 1, -2**63, 2**62]


def test_integer_wraps_and_float_specials_raise_no_warning():
    assert kernel("add", np.array(127, np.int8), np.array(1, np.int8)) == -128
    assert kernel("sum", i8(100, 100), axes=None, keepdims=False) == -56
    x = np.array([0.0, -1.0, 1e30], F32)
    assert np.isnan(kernel("sqrt", x)[1]) and np.isinf(kernel("exp", x)[2])
    assert kernel("divide", x, np.zeros(3, F32)).tolist()[1:] == [-np.inf, np.inf]
    assert np.isinf(kernel("cast", np.array([1e300]), dtype="float32")[0])


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_integer_edge_values_agree_on_every_backend(backend):
    b = legato.GraphBuilder()
    a, d = b.input("a", (5,), "int8"), b.input("d", (5,), "int8")
    f = b.input("f", (4,), "float32")
    mod = b.build(b.divide(a, d), b.power(a, d), b.abs(a), b.cast(f, dtype="int32"))
    feeds = (i8(-128, 5, 0, -1, 2), i8(-1, 0, 0, -3, -2),
             np.array([np.nan, np.inf, -1e20, 2.5], F32))
    want = legato.reference(mod)(*feeds)
    got = quietly(lambda: legato.compile(mod, backend=backend)(*feeds))
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


def test_unbiased_variance_of_one_element_is_nan_everywhere_without_warnings():
    x = randn(3, 1)
    mod, feeds = build("variance", [x], {"axes": [1], "unbiased": True})
    for out in _run_everywhere("variance", [x], {"axes": [1], "unbiased": True})[1].values():
        assert np.all(np.isnan(out))
    assert np.all(np.isnan(legato.compile(mod, backend="c_kernels")(*feeds)))


def test_quantize_with_a_zero_scale_saturates_and_maps_nan_to_zero_everywhere():
    x = np.array([0.0, 1.0, -1.0, np.nan], F32)
    arrays = [x, np.float32(0.0), np.int8(3)]
    result, outs, mod, feeds = _run_everywhere("qnn.quantize", arrays, {})
    for name, out in outs.items():
        assert out.tolist() == [0, 127, -128, 0], name


# --- float precision ----------------------------------------------------------------------

def gelu_exact(x):
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(float)])


def gelu_tanh_exact(x):
    u = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    return x * np.array([1 / (1 + math.exp(min(-2 * v, 700))) for v in u])


TAIL = np.array([-30.0, -12.0, -8.0, -5.0, -1.0, 0.5, 6.0], F32)


def assert_float32_close(actual, exact, rtol):
    """Within rtol of the exact value rounded to float32 (which may underflow to 0)."""
    np.testing.assert_allclose(actual, exact.astype(F32), rtol=rtol, atol=0)


def test_reference_gelu_keeps_relative_accuracy_in_the_left_tail():
    out = kernel("nn.gelu", TAIL, approximate="none")
    assert_float32_close(out, gelu_exact(TAIL), 1e-6)
    assert out[1] < 0  # 0.5 x (1 + erf(x / sqrt2)) cancels to 0 here


def test_tanh_gelu_keeps_relative_accuracy_in_the_left_tail_everywhere():
    want = gelu_tanh_exact(TAIL.astype(np.float64))
    assert_float32_close(kernel("nn.gelu", TAIL, approximate="tanh"), want, 1e-6)
    mod, feeds = build("nn.gelu", [TAIL], {"approximate": "tanh"})
    decomposed = legato.compile(mod, backend="cpu_ref")(*feeds)
    assert_float32_close(decomposed, want, 1e-5)
    assert np.all(decomposed[2:5] < 0)  # 1 + tanh(u) cancels to 0 here


def test_erf_gelu_decomposition_error_is_within_its_documented_bound():
    from legato.ops.tolerance import error_bound
    x = np.linspace(-20, 20, 401).astype(F32)
    mod, feeds = build("nn.gelu", [x], {})
    got = legato.compile(mod, backend="cpu_ref")(*feeds).astype(np.float64)
    want = gelu_exact(x)
    assert np.max(np.abs(got - want)) <= 3e-8 * 20 * 2
    assert np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1) <= error_bound("nn.gelu")


@pytest.mark.parametrize("op", ["nn.layer_norm", "nn.rms_norm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reference_norms_do_not_overflow_at_the_top_of_the_range(op, dtype):
    big = np.finfo(dtype).max / 4
    x = np.array([[big, -big / 2, big / 3, 0.0]], dtype)
    params = [None, None] if op == "nn.layer_norm" else [None]
    out = kernel(op, x, *params, axes=(-1,), epsilon=1e-5)
    unit = (x / big).astype(np.float64)
    want = KERNELS[op](unit, *params, axes=(-1,), epsilon=0.0)  # scale-invariant
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_every_op_has_a_tolerance_and_limits_name_real_ops():
    from legato.ops import tolerance
    ops = set(legato.list_ops())
    assert tolerance.SUM_OF_SQUARES_OPS <= ops and tolerance.ROUNDING_OPS <= ops
    assert tolerance.error_bound("erf") == legato.get_op("erf").tolerance == 3e-4
    assert tolerance.error_bound("nn.conv2d") == tolerance.DEFAULT_ERROR  # says none
    assert all(tolerance.error_bound(op) >= 0 for op in ops)
    assert tolerance.error_bound("reshape") == 0 and tolerance.error_bound("sum") > 0


@pytest.mark.parametrize("op", ["nn.layer_norm", "nn.rms_norm", "variance"])
def test_decompositions_hold_up_to_their_input_limit(op):
    from legato.ops.tolerance import error_bound, input_limit
    limit = input_limit(op, 64)
    x = randn(3, 64, seed=1)
    x = (x / np.abs(x).max() * limit * 0.999).astype(F32)  # the largest |x| at the limit
    arrays = {"nn.layer_norm": [x, None, None], "nn.rms_norm": [x, None], "variance": [x]}[op]
    attrs = {"axes": [-1]}
    mod, feeds = build(op, arrays, attrs)
    want = legato.reference(mod)(*feeds).astype(np.float64)
    got = legato.compile(mod, backend="cpu_ref")(*feeds).astype(np.float64)
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1) <= error_bound(op)


# --- findings of the fuzz targets ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_of_a_scalar_is_the_identity_everywhere(mode):
    result, outs, mod, feeds = _run_everywhere("pad", [np.int8(3)], {"pads": [], "mode": mode})
    for name, out in outs.items():
        assert out.shape == () and out == 3, name
    assert legato.compile(mod, backend="c_kernels")(*feeds) == 3


def test_pool_inference_does_not_grow_with_the_input():
    """The padding-only window check once allocated one entry per output position."""
    import tracemalloc
    b = legato.GraphBuilder()
    x = b.input("x", (1, 1, 2**33, 4))
    tracemalloc.start()
    try:
        y = b.call("nn.max_pool2d", x, pool_size=[2, 2], strides=[2, 2], padding=[1, 0, 1, 0])
        z = b.call("nn.avg_pool2d", x, pool_size=[3, 1], strides=[1, 1], dilation=[5, 1],
                   padding=[10, 0, 0, 0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert y.shape == (1, 1, 2**32 + 1, 2) and z.shape == (1, 1, 2**33, 4)
    assert peak < 64 << 20  # bytes; one entry per output position would be 64 GiB


@pytest.mark.parametrize("op, arrays, attrs", [
    ("subtract", [np.ones(2, bool), np.ones(2, bool)], {}),
    ("negative", [np.ones(2, bool)], {}),
    ("add", [np.ones(2, bool), np.ones(2, bool)], {}),
    ("matmul", [np.ones((2, 2), bool), np.ones((2, 2), bool)], {}),
    ("clip", [np.ones(2, bool)], {"min": 0.0}),
    ("nn.max_pool2d", [np.ones((1, 1, 2, 2), bool)], {"pool_size": [1, 1]}),
    ("nn.conv2d", [np.ones((1, 1, 2, 2), bool), np.ones((1, 1, 1, 1), bool), None], {}),
    ("nn.linear", [np.ones((2, 3), bool), np.ones((4, 3), bool), None], {}),
])
def test_arithmetic_on_bool_is_refused_at_inference(op, arrays, attrs):
    """numpy refuses some of these at run time and decompositions others; ONNX has none."""
    with pytest.raises(ShapeError, match="got bool"):
        build(op, arrays, attrs)


def test_max_pool_of_bfloat16_pads_with_minus_infinity():
    import ml_dtypes
    x = randn(1, 1, 3, 3).astype(ml_dtypes.bfloat16)
    attrs = {"pool_size": [2, 2], "strides": [1, 1], "padding": [1, 1, 1, 1]}
    result, outs, _, _ = _run_everywhere("nn.max_pool2d", [x], attrs)
    for name, out in outs.items():
        np.testing.assert_array_equal(out.astype(F32), outs["decomposed"].astype(F32), name)


def test_low_precision_dtypes_get_bounds_in_their_own_ulps():
    from legato.ops.tolerance import error_bound
    assert error_bound("reshape", "bfloat16") == 0
    assert error_bound("exp", "float16") == 32 * 2.0**-10 > error_bound("exp")
    assert error_bound("nn.layer_norm", "bfloat16") == 32 * 2.0**-7
    assert error_bound("nn.layer_norm", "float64") == error_bound("nn.layer_norm")
