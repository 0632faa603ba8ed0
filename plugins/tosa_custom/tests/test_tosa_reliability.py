"""tosa_custom never writes invalid TOSA: every call either becomes valid TOSA 1.0 (pro_fp,
level 8K) or is refused with a LegalizationError that names the constraint. Cases found by
fuzzing (tests/fuzz/target_tosa.py): empty tensors, rank-0 operands to PAD / TILE / SLICE
/ TRANSPOSE, clip bounds out of order or NaN, float64 / uint8, rank above 6."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir.errors import LegalizationError
from legato_tosa_custom import emit_mlir
from legato_tosa_custom.kernels import simulate

from legato_tosa_custom.cases import KEEP, assert_matches, keep


def one_call(op, in_shape, dtype="float32", /, *extra, **attrs):
    b = legato.GraphBuilder()
    return b.build(b.call(op, b.input("x", in_shape, dtype), *extra, **attrs))


def feed(module, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(-8, 9, p.shape) / 4).astype(p.dtype) for p in module.main.params]


# --- refused at legalization --------------------------------------------------------------

EMPTY = {
    "exp": ("exp", (0, 3), {}),
    "broadcast_to": ("broadcast_to", (0, 1), {"shape": [0, 3]}),
    "pad": ("pad", (2, 0), {"pads": [0, 1, 0, 1]}),
    "sum": ("sum", (3, 0), {"axes": [0], "keepdims": True}),
    "strided_slice to empty": ("strided_slice", (4,), {"begin": [2], "end": [2]}),
    "softmax": ("nn.softmax", (2, 0), {}),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_tensors_are_refused_with_the_reason(name):
    op, shape, attrs = EMPTY[name]
    module = one_call(op, shape, **attrs)
    with pytest.raises(LegalizationError, match=r"is empty \(TOSA 1.0 tensors need every dim"):
        legato.compile(module, backend=KEEP)


def test_empty_broadcast_is_a_legalization_error_not_a_zero_division():
    module = one_call("broadcast_to", (0, 1), shape=[0, 3])
    report = legato.legalize(module, backend=KEEP, mode="analysis").report
    assert report.failures and "broadcast_to" in report.failures[0]
    with pytest.raises(LegalizationError, match="broadcast_to"):
        legato.compile(module, backend=KEEP)


def test_rank_above_6_is_refused_naming_the_level():
    module = one_call("exp", (1,) * 7)
    with pytest.raises(LegalizationError, match="rank 7 .*level 8K allows rank 0 to 6"):
        legato.compile(module, backend=KEEP)
    partial = legato.legalize(module, backend=KEEP, mode="partial")
    assert "rank 7" in partial.report.failures[0]


@pytest.mark.parametrize("dtype", ["float64", "uint8"])
def test_types_outside_pro_fp_are_refused_also_as_custom_ops(dtype):
    """At legalization (the capability's custom_ops check), so the analysis modes report
    it; the emitter refuses a custom call made by hand too."""
    module = one_call("abs", (2, 3), dtype)
    refused = f"custom op: tosa_custom takes custom ops but not for .*element type {dtype}"
    with pytest.raises(LegalizationError, match=refused):
        legato.compile(module, backend=KEEP, config=keep("abs"))
    report = legato.legalize(module, backend=KEEP, config=keep("abs"), mode="analysis").report
    assert f"element type {dtype}" in report.failures[0]
    custom = legato.encode_custom(module.main.calls[0], "legato", legato.context().registry)
    tunnelled = legato.Module({"main": module.main.with_calls([custom], custom.outputs)})
    with pytest.raises(LegalizationError, match=f"custom op abs: .*element type {dtype}"):
        emit_mlir(tunnelled)
    b = legato.GraphBuilder()
    with pytest.raises(LegalizationError, match=f"parameter 0: .*element type {dtype}"):
        legato.compile(b.build(b.input("x", (2, 3), dtype)), backend=KEEP)  # no call


def test_custom_op_with_an_empty_operand_is_refused():
    module = one_call("nn.gelu", (0, 3))
    with pytest.raises(LegalizationError, match="is empty"):
        legato.compile(module, backend=KEEP, config=keep("nn.gelu"))


def test_emitter_refuses_calls_that_were_not_legalized():
    """emit_mlir on a module legalized for nothing: a clear error, not a raw one."""
    with pytest.raises(LegalizationError, match="sum.*one axis at a time"):
        emit_mlir(one_call("sum", (2, 3), axes=[0, 1], keepdims=True))
    with pytest.raises(LegalizationError, match="divide.*no TOSA operator"):
        b = legato.GraphBuilder()
        x = b.input("x", (2,))
        emit_mlir(b.build(b.divide(x, x)))
    with pytest.raises(LegalizationError, match="rank-0 operand .*TOSA PAD"):
        emit_mlir(one_call("pad", (), pads=[]))


# --- emitted validly ----------------------------------------------------------------------

VALID = {
    "pad rank 0": ("pad", (), {"pads": []}),
    "tile rank 0": ("broadcast_to", (), {"shape": []}),
    "tile rank 0 to 2": ("broadcast_to", (), {"shape": [2, 3]}),
    "slice rank 0": ("strided_slice", (), {"begin": [], "end": []}),
    "transpose rank 0, empty perms": ("permute_dims", (), {"axes": []}),
    "transpose rank 0, no perms": ("permute_dims", (), {}),
    "sum rank 0": ("sum", (), {}),
    "clip min > max": ("clip", (2, 3), {"min": 2.0, "max": -1.5}),
    "clip min = inf": ("clip", (2, 3), {"min": float("inf"), "max": 1.25}),
    "clip f16 min > max": ("clip", (4,), {"min": 7.0, "max": 0.0}, "float16"),
    "rank 6": ("exp", (1, 2, 1, 2, 1, 2), {}),
}


def valid_case(name):
    op, shape, attrs, *dtype = VALID[name]
    module = one_call(op, shape, *dtype, **attrs)
    return module, legato.compile(module, backend=KEEP)


@pytest.mark.parametrize("name", sorted(VALID))
def test_edge_forms_compute_what_cpu_ref_computes(name):
    module, compiled = valid_case(name)
    feeds = feed(module)
    assert_matches(simulate(compiled.module)(*feeds), legato.reference(module)(*feeds))


@pytest.mark.parametrize("name", sorted(VALID))
def test_edge_forms_validate_and_run_on_the_reference_model(tools, name):
    module, compiled = valid_case(name)
    feeds = feed(module)
    outputs = tools.run_reference(compiled.artifact, feeds, validate=True)
    assert_matches(outputs, legato.reference(module)(*feeds))


def test_clip_out_of_order_is_one_clamp_to_the_upper_bound():
    _, compiled = valid_case("clip min > max")
    (line,) = [ln for ln in compiled.artifact.splitlines() if "tosa.clamp" in ln]
    assert line.count("0xBFC00000 : f32") == 2  # min_val = max_val = -1.5


def test_clip_out_of_order_keeps_nan_inputs_nan(tools):
    _, compiled = valid_case("clip min > max")
    x = np.array([[np.nan, 0, 9], [-9, 1, np.nan]], np.float32)
    (out,) = tools.run_reference(compiled.artifact, [x])
    np.testing.assert_array_equal(np.isnan(out), np.isnan(x))
    assert (out[~np.isnan(x)] == -1.5).all()


# --- power: TOSA POW only takes a finite base > 0 and a finite exponent ---------------------

SPECIAL = np.array([0., -0., 1., -1., 2., -2., 0.5, -0.5, 3., -2.5, np.inf, -np.inf, np.nan])


def power_grid(dtype):
    x, y = (a.astype(dtype) for a in np.meshgrid(SPECIAL, SPECIAL))
    b = legato.GraphBuilder()
    module = b.build(b.power(b.input("x", x.shape, dtype), b.input("y", y.shape, dtype)))
    return module, [x, y]


def assert_same_values(got, want):
    same = (got == want) | (np.isnan(got) & np.isnan(want)) | np.isclose(got, want, rtol=1e-3)
    assert same.all(), (got[~same], want[~same])


def test_power_matches_numpy_on_negative_zero_infinite_and_nan_operands():
    module, feeds = power_grid("float32")
    compiled = legato.compile(module, backend=KEEP)
    assert any(c.op == "tosa.pow" for c in compiled.module.main.calls)
    assert_same_values(simulate(compiled.module)(*feeds), legato.reference(module)(*feeds))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_power_runs_on_the_reference_model_for_every_operand(tools, dtype):
    """Before, tosa.pow got negative and zero bases: the reference model refused to run
    (REQUIRE: x > 0 || y > 0) and (-2) ** 2 had no defined result."""
    module, feeds = power_grid(dtype)
    compiled = legato.compile(module, backend=KEEP)
    (out,) = tools.run_reference(compiled.artifact, feeds, validate=True)
    assert_same_values(out, legato.reference(module)(*feeds))


def test_small_integer_powers_are_products():
    b = legato.GraphBuilder()
    x = b.input("x", (4,))
    module = b.build(b.power(x, b.const(np.float32(3))), b.power(x, b.const(np.float32(-2))))
    ops = [c.op for c in legato.compile(module, backend=KEEP).module.main.calls]
    assert "tosa.pow" not in ops and ops.count("multiply") == 3
    b = legato.GraphBuilder()
    x = b.input("x", (4,))
    cube = b.build(b.power(x, b.const(np.full((1, 1), 3, np.float32))))  # result (1, 4)
    ops = [c.op for c in legato.compile(cube, backend=KEEP).module.main.calls]
    assert ops == ["multiply", "multiply", "reshape"]  # no TILE by 1


def test_integer_gather_is_refused_not_emitted_without_pro_int():
    legato.list_ops()  # the plugin's ops are registered with the plugins
    b = legato.GraphBuilder()
    values = b.input("v", (1, 3, 2), "int32")
    module = b.build(b.call("tosa.gather", values, b.const(np.array([[2, 0]], np.int32))))
    with pytest.raises(LegalizationError, match="int32 values .*pro_int"):
        legato.compile(module, backend=KEEP)


def test_float_to_int_cast_of_nan_is_zero_on_the_reference_model(tools):
    """TOSA CAST leaves NaN undefined (the reference model gave INT_MIN); legato's is 0."""
    x = np.array([np.nan, np.inf, -np.inf, -2.7, 2.7, 1e10], np.float32)
    module = one_call("cast", x.shape, "float32", dtype="int32")
    (out,) = tools.run_reference(legato.compile(module, backend=KEEP).artifact, [x])
    np.testing.assert_array_equal(out, legato.reference(module)(x))
    assert out[0] == 0


@pytest.mark.parametrize("src, dst", [("float32", "bool"), ("float16", "bool")])
def test_tosa_casts_outside_the_pro_fp_modes_are_refused(src, dst):
    """f32 -> bool needs TOSA 1.1."""
    legato.list_ops()
    with pytest.raises(LegalizationError, match=f"{src} to {dst} .*CAST mode"):
        legato.compile(one_call("tosa.cast", (2,), src, dtype=dst), backend=KEEP)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tosa_cast_to_its_own_type_is_the_tensor(dtype):
    """A same-type CAST is no TOSA mode at all: nothing is emitted for it."""
    legato.list_ops()
    compiled = legato.compile(one_call("tosa.cast", (2,), dtype, dtype=dtype), backend=KEEP)
    assert not compiled.module.main.calls and "tosa.cast" not in compiled.artifact


def test_int64_constant_result_is_printed_as_an_i32_const():
    """int64 is narrowed to int32 (narrowing.py): no i64 is ever printed."""
    b = legato.GraphBuilder()
    x = b.input("x", (2,))
    folded = b.call("cast", b.const(np.array(5, np.int64)), dtype="int64")
    text = legato.compile(b.build(b.floor(x), folded), backend=KEEP).artifact
    assert 'dense<"0x05000000"> : tensor<i32>' in text and "i64" not in text


@pytest.mark.parametrize("src, dst", [("float32", "int8"), ("float16", "int32"),
                                      ("float32", "float16"), ("float16", "float32")])
def test_tosa_casts_in_the_pro_fp_modes_validate(tools, src, dst):
    legato.list_ops()
    tools.validate(legato.compile(one_call("tosa.cast", (2,), src, dtype=dst),
                                  backend=KEEP).artifact)


# --- level 8K limits beyond rank ----------------------------------------------------------

def test_tensors_over_2_gib_are_refused():
    with pytest.raises(LegalizationError, match="more than 2147483647 bytes"):
        legato.compile(one_call("exp", (2**29,)), backend=KEEP)


def test_pool_windows_over_the_level_limit_use_the_generic_decomposition(tools):
    """A stride of 9000 is beyond MAX_STRIDE 8192: the rule declines, no TOSA MAX_POOL2D."""
    module = one_call("nn.max_pool2d", (1, 1, 9001, 1), pool_size=[1, 1],
                      strides=[9000, 1])
    compiled = legato.compile(module, backend=KEEP)
    assert "tosa.max_pool2d" not in compiled.artifact
    tools.validate(compiled.artifact)


def test_float16_bounds_beyond_its_range_are_infinities_without_warnings():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clip = legato.compile(one_call("clip", (3,), "float16", min=-1e10, max=1e10),
                              backend=KEEP).artifact
        pad = legato.compile(one_call("pad", (3,), "float16", pads=[1, 1], value=1e10),
                             backend=KEEP).artifact
    assert "max_val = 0x7C00 : f16, min_val = 0xFC00 : f16" in clip
    assert 'dense<"0x007C"> : tensor<1xf16>' in pad


@pytest.mark.parametrize("dtype, tiny", [("float32", 1e-40), ("float16", 1e-6)])
def test_division_by_a_constant_whose_reciprocal_overflows(tools, dtype, tiny):
    """1 / y is inf for a subnormal y: x * (1 / y) gave inf where x / y is finite."""
    import warnings
    b = legato.GraphBuilder()
    x = b.input("x", (4,), dtype)
    module = b.build(b.divide(x, b.const(np.array([tiny, 2.0, 0.0, -tiny], dtype))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = legato.compile(module, backend=KEEP)
    feeds = [np.array([1e-30 if dtype == "float32" else 1e-3, 3.0, 1.0, -2e-30
                       if dtype == "float32" else -2e-3], dtype)]
    want = legato.reference(module)(*feeds)
    assert np.isfinite(want[[0, 1, 3]]).all() and want[2] == np.inf
    (out,) = tools.run_reference(compiled.artifact, feeds, validate=True)
    for got in (simulate(compiled.module)(*feeds), out):
        np.testing.assert_allclose(got, want, rtol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_keeps_infinities_and_nan(tools, dtype):
    """Found by fuzzing: round(-inf) came out NaN (-inf - floor(-inf) is NaN)."""
    x = np.array([-np.inf, np.inf, np.nan, -2.5, -0.5, 0.5, 1.5, 2.5, -0.0], dtype)
    module = one_call("round", x.shape, dtype)
    compiled = legato.compile(module, backend=KEEP)
    want = legato.reference(module)(x)
    (out,) = tools.run_reference(compiled.artifact, [x], validate=True)
    for got in (simulate(compiled.module)(x), out):
        np.testing.assert_array_equal(got, want)


def test_custom_op_with_an_int64_constant_operand_out_of_int32_is_refused():
    """tosa.custom carries int64 values as int32 ones; a constant operand whose values do
    not fit is refused, naming it (found by fuzzing, even on dead code)."""
    b = legato.GraphBuilder()
    x = b.input("x", (2,))
    b.call("expand_dims", b.const(np.array([-5, -2**40], np.int64)), axes=[-1])  # dead
    module = b.build(b.call("nn.relu", x))
    with pytest.raises(LegalizationError, match=r"int64 constant int64\[2\] holds "
                                                r"-1099511627776 at index \[1\]"):
        legato.compile(module, backend=KEEP, config=keep("expand_dims"))


def concat_of(count):
    b = legato.GraphBuilder()
    return b.build(b.concat(*[b.input(f"x{i}", (1, 2)) for i in range(count)], axis=0))


def test_custom_op_with_more_operands_than_tosa_takes_is_refused():
    with pytest.raises(LegalizationError, match="custom op: .*65 operands .*at most 64"):
        legato.compile(concat_of(65), backend=KEEP, config=keep("concat"))
    text = legato.compile(concat_of(64), backend=KEEP, config=keep("concat")).artifact
    assert text.count('"tosa.concat"') == 1  # kept, and TOSA takes it as it stands
