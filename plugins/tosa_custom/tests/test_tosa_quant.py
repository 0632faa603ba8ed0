"""TOSA 1.0's INT profile (tosa_custom_int: pro_fp+pro_int): qnn ops as int8 CONV2D /
DEPTHWISE_CONV2D / MATMUL / AVG_POOL2D, RESCALE and TABLE, validated by tosa-opt for the
profiles and run on the TOSA reference model against cpu_ref.

TOSA's RESCALE rounds the exact product half up; cpu_ref (onnxruntime's CPU kernels)
rounds a float32 product half to even. So quantized results are compared within one
quantization step, and the elements that differ at all are counted; integer-only programs
must be bit-exact, above 2**24 too (pro_fp computed their compares and reductions on
float32 copies)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import legato
from legato import GraphBuilder
from legato.ir.errors import ConfigError
from legato_tosa_custom import backend
from legato_tosa_custom.quantized import apply_scale_32, multiplier_shift

INT = "tosa_custom_int"
RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def ints(rng, shape, dtype):
    lo, hi = RANGES[dtype]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def f32(value):
    return np.asarray(value, np.float32)


def zp(value, dtype):
    return np.asarray(value, dtype)


def run_both(tools, module, inputs):
    """(TOSA reference model's results, cpu_ref's, the MLIR text) of `module`."""
    text = legato.compile(module, INT).artifact
    got = tools.run_reference(text, inputs, validate=True)
    want = legato.compile(module, "cpu_ref")(*inputs)
    want = want if isinstance(want, (list, tuple)) else [want]
    return got, [np.asarray(w) for w in want], text


def within_one_step(got, want) -> int:
    """Asserts every element is within one step; returns how many differ at all."""
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max(initial=0) <= 1, diff.max()
    return int((diff > 0).sum())


# --- the profile option and the RESCALE arithmetic ---------------------------------------------

def test_an_unknown_profile_is_refused_with_the_profiles_tosa_has():
    with pytest.raises(ConfigError, match=r"'pro_float' is not a TOSA 1.0 profile.*pro_int"):
        backend("pro_float")
    assert set(backend("pro_int").legal) >= {"tosa.rescale", "tosa.qconv2d"}
    assert "tosa.rescale" not in legato.get_backend("tosa_custom").legal


def test_multiplier_and_shift_are_the_float32_scale_exactly():
    """scale32: multiplier in [2**30, 2**31), multiplier * 2**-shift == the float32 scale,
    and apply_scale_32 rounds the exact product half up, as TOSA 1.0 defines it."""
    rng = np.random.default_rng(1)
    scales = (10.0 ** rng.uniform(-9, 3, 200)).astype(np.float32)
    multiplier, shift = multiplier_shift(scales)
    assert ((multiplier >= 2 ** 30) & (multiplier < 2 ** 31)).all()
    for s, m, k in zip(scales, multiplier, shift):
        assert Fraction(int(m), 2 ** int(k)) == Fraction(float(s))
    values = rng.integers(-2 ** 20, 2 ** 20, 200)
    got = apply_scale_32(values, multiplier, shift)
    for v, m, k, g in zip(values, multiplier, shift, got):
        exact = Fraction(int(v) * int(m), 2 ** int(k))
        assert g == (exact + Fraction(1, 2)).__floor__()
    assert multiplier_shift(np.float32([-0.5])) is None  # TOSA's multiplier is >= 0


# --- each qnn op, per tensor and per channel, int8 and uint8 -----------------------------------

def _conv(g, rng, dtype, per_channel, depthwise, groups=1):
    channels = 4
    x = g.input("x", (1, channels, 7, 7), dtype)
    shape = (channels, 1, 3, 3) if depthwise else (6, channels // groups, 3, 3)
    out = shape[0]
    w = rng.integers(-127, 128, shape).astype(np.int8)
    ws = f32(rng.uniform(0.005, 0.02, out)) if per_channel else f32(0.01)
    wz = np.zeros(out, np.int8) if per_channel else zp(3, "int8")
    y = g.call("qnn.conv2d", x, g.const(f32(0.05)), g.const(zp(RANGES[dtype][0] + 100, dtype)),
               g.const(w), g.const(ws), g.const(wz), g.const(f32(0.3)),
               g.const(zp(RANGES[dtype][0] + 120, dtype)),
               g.const(rng.integers(-2000, 2000, out).astype(np.int32)),
               padding=[1, 1, 1, 1], strides=[2, 2] if depthwise else [1, 1],
               groups=channels if depthwise else groups)
    return [x], y, "tosa.depthwise_conv2d" if depthwise else "tosa.conv2d"


def _linear(g, rng, dtype, per_channel):
    x = g.input("x", (2, 5, 16), dtype)
    w = rng.integers(-127, 128, (8, 16)).astype(np.int8)
    ws = f32(rng.uniform(0.005, 0.02, 8)) if per_channel else f32(0.01)
    wz = np.zeros(8, np.int8) if per_channel else zp(-2, "int8")
    y = g.call("qnn.linear", x, g.const(f32(0.04)), g.const(zp(RANGES[dtype][0] + 128, dtype)),
               g.const(w), g.const(ws), g.const(wz), g.const(f32(0.2)),
               g.const(zp(RANGES[dtype][0] + 130, dtype)),
               g.const(rng.integers(-900, 900, 8).astype(np.int32)))
    return [x], y, "tosa.matmul"


def _matmul(g, rng, dtype, per_channel):
    a = g.input("a", (2, 3, 4, 16), dtype)
    w = g.input("b", (2, 1, 16, 5), "int8")
    bs = f32(rng.uniform(0.01, 0.03, 5)) if per_channel else f32(0.02)
    bz = np.zeros(5, np.int8) if per_channel else zp(1, "int8")
    y = g.call("qnn.matmul", a, g.const(f32(0.03)), g.const(zp(RANGES[dtype][0] + 127, dtype)),
               w, g.const(bs), g.const(bz), g.const(f32(0.25)),
               g.const(zp(RANGES[dtype][0] + 126, dtype)))
    return [a, w], y, "tosa.matmul"


def _requantize(g, rng, dtype, per_channel):
    x = g.input("x", (2, 3, 5), "int32")
    scale = f32(rng.uniform(0.001, 0.004, 3)) if per_channel else f32(0.002)
    izp = np.zeros(3, np.int32) if per_channel else zp(-7, "int32")
    y = g.call("qnn.requantize", x, g.const(scale), g.const(izp), g.const(f32(0.1)),
               g.const(zp(RANGES[dtype][0] + 110, dtype)), axis=1, dtype=dtype)
    return [x], y, "tosa.rescale"


def _binary(op):
    def make(g, rng, dtype, per_channel):
        a, x = g.input("a", (2, 3, 6), dtype), g.input("b", (3, 1), dtype)
        low = RANGES[dtype][0]
        y = g.call(op, a, g.const(f32(0.05)), g.const(zp(low + 120, dtype)), x,
                   g.const(f32(0.03)), g.const(zp(low + 135, dtype)),
                   g.const(f32(0.07 if op == "qnn.add" else 0.4)), g.const(zp(low + 125, dtype)))
        return [a, x], y, "tosa.add" if op == "qnn.add" else "tosa.mul"
    return make


def _pool(global_, include_pad=False):
    def make(g, rng, dtype, per_channel):
        x = g.input("x", (1, 3, 6, 6), dtype)
        low = RANGES[dtype][0]
        params = [g.const(f32(0.05)), g.const(zp(low + 120, dtype)), g.const(f32(0.04)),
                  g.const(zp(low + 128, dtype))]
        if global_:
            return [x], g.call("qnn.global_avg_pool2d", x, *params), "tosa.reduce_sum"
        y = g.call("qnn.avg_pool2d", x, *params, pool_size=[3, 3], strides=[1, 1],
                   padding=[1, 1, 1, 1], count_include_pad=include_pad)
        return [x], y, "tosa.depthwise_conv2d"  # the window sums
    return make


def _activation(op, **attrs):
    def make(g, rng, dtype, per_channel):
        x = g.input("x", (4, 64), dtype)
        low = RANGES[dtype][0]
        y = g.call(op, x, g.const(f32(0.06)), g.const(zp(low + 128, dtype)),
                   g.const(f32(1 / 256 if op == "qnn.sigmoid" else 0.05)),
                   g.const(zp(low + (0 if op == "qnn.sigmoid" else 100), dtype)), **attrs)
        return [x], y, "tosa.table"
    return make


CASES = {
    "conv2d": lambda g, rng, d, pc: _conv(g, rng, d, pc, False),
    "depthwise_conv2d": lambda g, rng, d, pc: _conv(g, rng, d, pc, True),
    "grouped_conv2d": lambda g, rng, d, pc: _conv(g, rng, d, pc, False, groups=2),
    "linear": _linear, "matmul": _matmul, "requantize": _requantize,
    "add": _binary("qnn.add"), "multiply": _binary("qnn.multiply"),
    "avg_pool2d": _pool(False), "avg_pool2d_with_pad": _pool(False, include_pad=True),
    "global_avg_pool2d": _pool(True),
    "sigmoid": _activation("qnn.sigmoid"), "leaky_relu": _activation("qnn.leaky_relu",
                                                                       alpha=0.1),
}
PER_CHANNEL = {"conv2d", "depthwise_conv2d", "grouped_conv2d", "linear", "matmul",
               "requantize"}


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("case", [(op, pc) for op in CASES for pc in (False, True)
                                  if op in PER_CHANNEL or not pc],
                         ids=lambda c: f"{c[0]}-{'per_channel' if c[1] else 'per_tensor'}")
def test_each_qnn_op_runs_in_int8_within_one_step_of_cpu_ref(tools, case, dtype):
    op, per_channel = case
    rng = np.random.default_rng(len(op) + per_channel)
    g = GraphBuilder()
    params, y, tosa_op = CASES[op](g, rng, dtype, per_channel)
    inputs = [ints(rng, p.shape, p.dtype) if p.dtype in RANGES else
              rng.integers(-20000, 20000, p.shape).astype(p.dtype) for p in params]
    (got,), (want,), text = run_both(tools, g.build(y), inputs)
    within_one_step(got, want)
    assert f'"{tosa_op}"' in text
    assert "f32" not in text  # integers only: no float arithmetic, no float32 copies
    if op == "grouped_conv2d":  # one CONV2D per group
        assert text.count('"tosa.conv2d"') == 2 and '"tosa.concat"' in text
    if op in ("sigmoid", "leaky_relu"):  # the table holds cpu_ref's own results
        np.testing.assert_array_equal(got, want)


def test_softmax_in_pro_fp_alone_is_refused_with_the_reason():
    """pro_fp+pro_int lowers it (test_tosa_int_models.py); pro_fp alone cannot take its
    float64 table."""
    g = GraphBuilder()
    x = g.input("x", (2, 8), "int8")
    y = g.call("qnn.softmax", x, g.const(f32(0.1)), g.const(zp(0, "int8")),
               g.const(f32(1 / 256)), g.const(zp(-128, "int8")))
    with pytest.raises(legato.LegalizationError, match="qnn.softmax.*|float64"):
        legato.compile(g.build(y), "tosa_custom")


def test_large_products_differ_from_cpu_ref_in_under_a_thousandth_of_elements(tools):
    """The one difference, RESCALE's rounding of the exact product against a float32
    product rounded half to even, shows on few elements: counted over 12,288 outputs of
    a per-channel convolution and a linear layer."""
    rng = np.random.default_rng(7)
    g = GraphBuilder()
    x = g.input("x", (1, 16, 16, 16), "int8")
    w = rng.integers(-127, 128, (32, 16, 3, 3)).astype(np.int8)
    conv = g.call("qnn.conv2d", x, g.const(f32(0.02)), g.const(zp(-3, "int8")), g.const(w),
                  g.const(f32(rng.uniform(0.002, 0.004, 32))), g.const(np.zeros(32, np.int8)),
                  g.const(f32(0.9)), g.const(zp(5, "int8")), None, padding=[1, 1, 1, 1])
    v = g.input("v", (64, 64), "uint8")
    lin = g.call("qnn.linear", v, g.const(f32(0.01)), g.const(zp(128, "uint8")),
                 g.const(rng.integers(-127, 128, (64, 64)).astype(np.int8)),
                 g.const(f32(rng.uniform(0.002, 0.004, 64))), g.const(np.zeros(64, np.int8)),
                 g.const(f32(0.05)), g.const(zp(120, "uint8")), None)
    inputs = [ints(rng, (1, 16, 16, 16), "int8"), ints(rng, (64, 64), "uint8")]
    got, want, _ = run_both(tools, g.build(conv, lin), inputs)
    differ = sum(within_one_step(a, b) for a, b in zip(got, want))
    total = sum(a.size for a in got)
    assert total == 12288 and differ / total < 1e-3, (differ, total)


# --- integer programs: native int32, bit-exact ---------------------------------------------------

def test_integer_programs_are_bit_exact_above_2_to_the_24(tools):
    """pro_int computes int32 compares, selects, min/max, reductions, bitwise ops and data
    movement natively; pro_fp's float32 copies round values beyond 2**24 (16777217 ->
    16777216), and it has no bitwise ops."""
    g = GraphBuilder()
    a, c = g.input("a", (3, 4), "int32"), g.input("c", (4,), "int32")
    big = g.maximum(a, c)
    picked = g.where(g.greater(a, c), g.add(a, c), g.multiply(a, 3))
    moved = g.concat(g.permute_dims(big, axes=[1, 0]), g.reshape(picked, shape=[4, 3]),
                     axis=0)
    total = g.sum(moved, axes=[0], keepdims=False)
    low = g.minimum(g.max(picked, axes=[1], keepdims=True), g.abs(g.negative(a)))
    bits = g.bitwise_xor(g.bitwise_and(a, c), g.bitwise_not(a))
    module = g.build(moved, total, low, bits)
    rng = np.random.default_rng(3)
    inputs = [(rng.integers(-2 ** 26, 2 ** 26, (3, 4)) | 1).astype(np.int32),
              np.array([16777217, -16777219, 33554433, 5], np.int32)]
    got, want, text = run_both(tools, module, inputs)
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)
    assert "f32" not in text  # no float32 copies


# --- the boundaries: quantize, dequantize, casts of uint8 --------------------------------------

@pytest.mark.parametrize("dtype, zero", [("uint8", 200), ("uint8", 3), ("int8", -100)])
def test_quantize_and_dequantize_at_the_boundaries_are_exact(tools, dtype, zero):
    """Float in, quantized out and back: uint8 enters and leaves as i8 bits through a
    RESCALE by 1 (its CAST to float would read them signed)."""
    g = GraphBuilder()
    x = g.input("x", (4, 16), "float32")
    q = g.call("qnn.quantize", x, g.const(f32(0.05)), g.const(zp(zero, dtype)), dtype=dtype)
    back = g.call("qnn.dequantize", q, g.const(f32(0.05)), g.const(zp(zero, dtype)))
    values = np.random.default_rng(5).uniform(-12, 12, (4, 16)).astype(np.float32)
    got, want, text = run_both(tools, g.build(q, back), [values])
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)
    if dtype == "uint8":
        assert '"tosa.rescale"' in text


def test_integer_casts_wrap_as_legato_casts(tools):
    """pro_int CASTs narrow by keeping the low bits, as legato (numpy) does; to uint8
    through BITWISE_AND 255 and an unsigned RESCALE."""
    g = GraphBuilder()
    a = g.input("a", (6,), "int32")
    u = g.input("u", (6,), "uint8")
    outs = [g.cast(a, dtype="int8"), g.cast(a, dtype="uint8"), g.cast(u, dtype="int32"),
            g.cast(u, dtype="int8"), g.cast(g.cast(u, dtype="int16"), dtype="bool")]
    inputs = [np.array([300, -300, 127, -129, 70000, 255], np.int32),
              np.array([0, 1, 127, 128, 200, 255], np.uint8)]
    got, want, _ = run_both(tools, g.build(*outs), inputs)
    for g_, w in zip(got, want):
        assert g_.dtype == w.dtype
        np.testing.assert_array_equal(g_, w)


def test_integer_clip_argmax_divide_fmod_take_are_exact_above_2_to_the_24(tools):
    """pro_fp computes these on float32 copies (exact to 2**24); pro_int by int32
    MAXIMUM/MINIMUM, REDUCE_MAX + SELECT + REDUCE_MIN, INTDIV (x / 0 and fmod(x, 0) are
    0, as in legato) and GATHER of the integers (negative indices wrapped in int32)."""
    g = GraphBuilder()
    a, d = g.input("a", (2, 5), "int32"), g.input("d", (2, 5), "int32")
    small = g.input("s", (2, 5), "int8")
    outs = [g.clip(a, min=-33554431.5, max=50000001.0), g.clip(small, min=-3.0, max=2.5),
            g.argmax(a, axis=1, keepdims=False, select_last_index=False),
            g.argmax(a, axis=0, keepdims=True, select_last_index=True),
            g.divide(a, d), g.fmod(a, d), g.take(a, g.input("i", (3,), "int64"), axis=1)]
    inputs = [np.array([[16777217, 16777219, 16777219, -33554433, 50000003],
                        [7, -7, 2 ** 30, 2 ** 30, -5]], np.int32),
              np.array([[3, -2, 0, 7, 16777216], [2, 2, -3, 0, 1]], np.int32),
              np.array([[-128, -4, -3, 2, 3], [127, 0, 1, 2, -1]], np.int8),
              np.array([0, -1, 3], np.int64)]
    got, want, text = run_both(tools, g.build(*outs), inputs)
    for g_, w in zip(got, want):
        assert g_.dtype == w.dtype
        np.testing.assert_array_equal(g_, w)
    assert '"tosa.intdiv"' in text and "f32" not in text


def test_profile_pro_int_alone_takes_integers_only(tools):
    """backend('pro_int'): an integer program validates for pro_int alone (tosa-opt
    attaches the profile the module names); a float op is refused, naming it."""
    be = backend("pro_int")
    g = GraphBuilder()
    a, c = g.input("a", (3, 4), "int32"), g.input("c", (4,), "int32")
    module = g.build(g.cast(g.greater(g.maximum(a, c), c), dtype="int32"))
    text = legato.compile(module, be).artifact
    assert '{legato.tosa_profiles = "pro_int"}' in text
    inputs = [np.arange(12, dtype=np.int32).reshape(3, 4) * 2 ** 23, np.full(4, 2 ** 26 + 1,
                                                                             np.int32)]
    (got,) = tools.run_reference(text, inputs, validate=True)
    np.testing.assert_array_equal(got, legato.compile(module, "cpu_ref")(*inputs))
    g = GraphBuilder()
    with pytest.raises(legato.LegalizationError, match=r"exp\(float32\[3\]\)"):
        legato.compile(g.build(g.exp(g.input("x", (3,)))), be)


def test_a_large_requantize_scale_saturates_large_int32_values(tools):
    """A scale of 0.5 and more has a shift below 32, and RESCALE requires |value| <
    2**(shift-1): larger values (which saturate anyway) are clamped first."""
    g = GraphBuilder()
    x = g.input("x", (6,), "int32")
    y = g.call("qnn.requantize", x, g.const(f32(0.75)), g.const(zp(0, "int32")),
               g.const(f32(0.01)), g.const(zp(3, "int8")), axis=0, dtype="int8")
    inputs = [np.array([2 ** 31 - 1, -2 ** 31, 2 ** 24, -3, 1, 0], np.int32)]
    (got,), (want,), _ = run_both(tools, g.build(y), inputs)
    np.testing.assert_array_equal(got, want)
