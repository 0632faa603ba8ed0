"""The qnn ops against onnxruntime's CPU kernels, one ONNX node at a time (QLinearMatMul,
QLinearConv, the com.microsoft QLinear* ops, MatMulInteger, ConvInteger), on cpu_ref and
c_kernels: integer outputs equal, except QLinearSoftmax (onnxruntime uses a table of
exponentials) whose elements may differ by one step. qnn.linear and qnn.requantize, which
no onnxruntime op spells, against numpy's int64 arithmetic."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402

# "reference": the module run whole by cpu_ref's kernels (legato.reference), which the
# decompositions compiled for cpu_ref are checked against
BACKENDS = ["cpu_ref", "c_kernels", "reference"]
MS = "com.microsoft"
RANGES = {"int8": (-128, 128), "uint8": (0, 256)}


def ints(rng, shape, dtype):
    lo, hi = RANGES[dtype]
    return rng.integers(lo, hi, shape).astype(dtype)


def const(value, dtype):
    return np.asarray(value, dtype)


def node_model(op, feeds, consts, order, out_dtype, domain="", **attrs):
    """One node over graph inputs `feeds` and initializers `consts`, its inputs named in
    `order` ("" for an absent optional one)."""
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    node = helper.make_node(op, order, ["y"], domain=domain, **attrs)
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                            v.shape) for k, v in feeds.items()]
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(
        np.dtype(out_dtype)), None)
    graph = helper.make_graph([node], "g", inputs, [out], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(MS, 1)])


def compiled(module, backend):
    return legato.reference(module) if backend == "reference" else \
        legato.compile(module, backend)


def against_ort(model, feeds, backend, max_off=0.0):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    got = compiled(onnx_frontend.load(model), backend)(*feeds.values())
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max(initial=0) <= (1 if max_off else 0), diff.max()
    assert (diff > 0).mean() <= max_off, f"{(diff > 0).sum()} of {diff.size} elements off"
    print(f"{(diff > 0).sum()} of {diff.size} elements one step off")
    return want


def binary_case(rng, dtype, shape_a, shape_b, scales):
    feeds = {"a": ints(rng, shape_a, dtype), "b": ints(rng, shape_b, dtype)}
    zeros = rng.integers(*((-20, 20) if dtype == "int8" else (100, 140)), 3)
    consts = {"as": const(scales[0], "float32"), "az": const(zeros[0], dtype),
              "bs": const(scales[1], "float32"), "bz": const(zeros[1], dtype),
              "ys": const(scales[2], "float32"), "yz": const(zeros[2], dtype)}
    return feeds, consts, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]


# --- products ----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, a_shape, b_shape, per_column", [
    ("uint8", (5, 16), (16, 7), False),
    ("int8", (2, 3, 16), (16, 6), True),
    ("int8", (2, 2, 4, 8), (2, 2, 8, 4), False),     # batched, as attention's products
    ("uint8", (3, 40), (40, 9), True),
])
def test_qlinear_matmul(backend, dtype, a_shape, b_shape, per_column):
    rng = np.random.default_rng(1)
    n = b_shape[-1]
    feeds = {"a": ints(rng, a_shape, dtype)}
    consts = {"as": const(0.02, "float32"), "az": const(3 if dtype == "int8" else 128, dtype),
              "b": ints(rng, b_shape, "int8"),
              "bs": rng.uniform(0.005, 0.02, n if per_column else ()).astype(np.float32),
              "bz": np.zeros(n if per_column else (), np.int8),
              "ys": const(0.07, "float32"), "yz": const(-5 if dtype == "int8" else 120, dtype)}
    model = node_model("QLinearMatMul", feeds, consts,
                       ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], dtype)
    against_ort(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, groups, per_channel, bias", [
    ("uint8", 1, True, True), ("int8", 1, False, True), ("int8", 4, True, False),
    ("uint8", 4, False, True),   # depthwise
])
def test_qlinear_conv(backend, dtype, groups, per_channel, bias):
    rng = np.random.default_rng(2)
    feeds = {"x": ints(rng, (2, 4, 7, 7), dtype)}
    consts = {"xs": const(0.03, "float32"), "xz": const(5 if dtype == "int8" else 120, dtype),
              "w": ints(rng, (4, 4 // groups, 3, 3), "int8"),
              "ws": rng.uniform(0.005, 0.02, 4 if per_channel else ()).astype(np.float32),
              "wz": np.zeros(4 if per_channel else (), np.int8),
              "ys": const(0.09, "float32"), "yz": const(-3 if dtype == "int8" else 110, dtype)}
    order = list(consts)
    order.insert(0, "x")
    if bias:
        consts["bias"] = rng.integers(-500, 500, 4).astype(np.int32)
        order.append("bias")
    model = node_model("QLinearConv", feeds, consts, order, dtype, group=groups,
                       pads=[1, 1, 1, 1], strides=[1, 2])
    against_ort(model, feeds, backend)


def test_qlinear_conv_is_integer_arithmetic():
    # the decomposition computes onnxruntime's int32 accumulation, never a float conv
    rng = np.random.default_rng(3)
    feeds = {"x": ints(rng, (1, 2, 5, 5), "uint8")}
    consts = {"xs": const(0.03, "float32"), "xz": const(120, "uint8"),
              "w": ints(rng, (3, 2, 3, 3), "int8"), "ws": const(0.01, "float32"),
              "wz": const(0, "int8"), "ys": const(0.09, "float32"), "yz": const(110, "uint8")}
    model = node_model("QLinearConv", feeds, consts, ["x"] + list(consts), "uint8")
    compiled = legato.compile(onnx_frontend.load(model), "cpu_ref")
    convs = [c for fn in compiled.module.functions.values() for c in fn.calls
             if "conv" in c.op or c.op == "matmul"]
    assert convs and all(c.inputs[0].type.dtype == "int32" for c in convs)


# --- elementwise -------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype, shape_a, shape_b", [
    ("uint8", (2, 3, 17), (3, 17)), ("int8", (2, 3, 17), (17,)),
    # one value per innermost run: onnxruntime's MLAS adds it to the fixed part first
    ("int8", (2, 3, 17), (1,)), ("uint8", (), (2, 3, 17)), ("uint8", (2, 3, 17), (3, 1)),
    ("int8", (3, 1), (2, 3, 17))])
def test_qlinear_binary(backend, op, dtype, shape_a, shape_b):
    rng = np.random.default_rng(4)
    scales = (0.0123, 0.0371, 0.05) if op == "QLinearAdd" else (0.0123, 0.0371, 0.3)
    feeds, consts, order = binary_case(rng, dtype, shape_a, shape_b, scales)
    model = node_model(op, feeds, consts, order, dtype, domain=MS)
    against_ort(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, attrs", [("QLinearSigmoid", {}),
                                       ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_activations(backend, op, attrs, dtype):
    feeds = {"x": np.arange(*RANGES[dtype]).astype(dtype).reshape(16, 16)}  # every value
    zero = 10 if dtype == "int8" else 128
    consts = {"xs": const(0.05, "float32"), "xz": const(zero, dtype),
              "ys": const(1 / 256 if op == "QLinearSigmoid" else 0.04, "float32"),
              "yz": const(-128 if dtype == "int8" else 0, dtype) if op == "QLinearSigmoid"
              else const(zero - 3, dtype)}
    model = node_model(op, feeds, consts, ["x", "xs", "xz", "ys", "yz"], dtype, domain=MS,
                       **attrs)
    against_ort(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, shape, axis, x_scale", [
    ("uint8", (8, 64), -1, 0.1), ("int8", (8, 64), -1, 0.05), ("int8", (2, 16, 5), 1, 0.2),
    ("uint8", (4, 3, 33), 2, 0.02),
])
def test_qlinear_softmax(backend, dtype, shape, axis, x_scale):
    # onnxruntime's table of exponentials, float32 sum and floor(1 / y_scale) (a float
    # softmax of the dequantized data rounds some elements the other way)
    rng = np.random.default_rng(6)
    feeds = {"x": ints(rng, shape, dtype)}
    consts = {"xs": const(x_scale, "float32"),
              "xz": const(0 if dtype == "int8" else 128, dtype),
              "ys": const(0.0041, "float32"),   # a calibrated scale: floor(1 / 0.0041) = 243
              "yz": const(-128 if dtype == "int8" else 0, dtype)}
    model = node_model("QLinearSoftmax", feeds, consts, ["x", "xs", "xz", "ys", "yz"], dtype,
                       domain=MS, axis=axis, opset=13)
    against_ort(model, feeds, backend)


# --- pooling and concatenation -----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, channels_last", [("uint8", 0), ("int8", 0), ("int8", 1)])
def test_qlinear_global_average_pool(backend, dtype, channels_last):
    rng = np.random.default_rng(7)
    feeds = {"x": ints(rng, (2, 5, 7, 6), dtype)}
    consts = {"xs": const(0.03, "float32"), "xz": const(4 if dtype == "int8" else 130, dtype),
              "ys": const(0.011, "float32"), "yz": const(-2 if dtype == "int8" else 125, dtype)}
    model = node_model("QLinearGlobalAveragePool", feeds, consts, list(["x"] + list(consts)),
                       dtype, domain=MS, channels_last=channels_last)
    against_ort(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, attrs", [
    ("uint8", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("int8", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("int8", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
])
def test_qlinear_average_pool(backend, dtype, attrs):
    rng = np.random.default_rng(8)
    feeds = {"x": ints(rng, (1, 3, 8, 8), dtype)}
    consts = {"xs": const(0.03, "float32"), "xz": const(4 if dtype == "int8" else 130, dtype),
              "ys": const(0.02, "float32"), "yz": const(-2 if dtype == "int8" else 125, dtype)}
    model = node_model("QLinearAveragePool", feeds, consts, ["x"] + list(consts), dtype,
                       domain=MS, **attrs)
    against_ort(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_concat(backend, dtype):
    rng = np.random.default_rng(9)
    feeds = {"a": ints(rng, (2, 3, 4), dtype), "b": ints(rng, (2, 5, 4), dtype)}
    zero = 3 if dtype == "int8" else 128
    consts = {"ys": const(0.05, "float32"), "yz": const(zero, dtype),
              "as": const(0.05, "float32"), "az": const(zero, dtype),     # copied as it is
              "bs": const(0.0731, "float32"), "bz": const(zero - 7, dtype)}
    model = node_model("QLinearConcat", feeds, consts, ["ys", "yz", "a", "as", "az", "b", "bs",
                                                        "bz"], dtype, domain=MS, axis=1)
    against_ort(model, feeds, backend)


# --- integer products (dynamic quantization) ---------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_integer_and_conv_integer(backend):
    rng = np.random.default_rng(10)
    feeds = {"a": ints(rng, (3, 16), "uint8")}
    consts = {"b": ints(rng, (16, 5), "int8"), "az": const(128, "uint8"),
              "bz": np.zeros(5, np.int8)}
    model = node_model("MatMulInteger", feeds, consts, ["a", "b", "az", "bz"], "int32")
    against_ort(model, feeds, backend)
    feeds = {"x": ints(rng, (1, 2, 6, 6), "uint8")}
    consts = {"w": ints(rng, (3, 2, 3, 3), "int8"), "xz": const(100, "uint8")}
    model = node_model("ConvInteger", feeds, consts, ["x", "w", "xz"], "int32", pads=[1] * 4)
    against_ort(model, feeds, backend)


# --- qnn.linear and qnn.requantize against numpy -----------------------------------------------

def requantized(acc, multiplier, zero, dtype):
    """onnxruntime's output stage in numpy: float32 accumulator times a float32 multiplier,
    rounded half to even, shifted and saturated."""
    y = np.rint(acc.astype(np.float32) * np.asarray(multiplier, np.float32)) + int(zero)
    lo, hi = RANGES[dtype]
    return np.clip(y, lo, hi - 1).astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("per_channel", [True, False])
def test_qnn_linear_with_bias(backend, per_channel):
    rng = np.random.default_rng(11)
    x, w = ints(rng, (2, 3, 24), "uint8"), ints(rng, (6, 24), "int8")
    ws = rng.uniform(0.005, 0.02, 6 if per_channel else ()).astype(np.float32)
    bias = rng.integers(-3000, 3000, 6).astype(np.int32)
    xs, ys = np.float32(0.02), np.float32(0.05)
    b = legato.GraphBuilder()
    data = b.input("x", x.shape, "uint8")
    y = b.call("qnn.linear", data, b.const(np.array(xs)), b.const(np.array(120, np.uint8)),
               b.const(w), b.const(ws), b.const(np.zeros(ws.shape, np.int8)),
               b.const(np.array(ys)), b.const(np.array(100, np.uint8)), b.const(bias))
    got = compiled(b.build(y), backend)(x)
    acc = (x.astype(np.int64) - 120) @ w.T.astype(np.int64) + bias
    np.testing.assert_array_equal(got, requantized(acc, xs * ws / ys, 100, "uint8"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_qnn_requantize_per_channel(backend):
    rng = np.random.default_rng(12)
    x = rng.integers(-40000, 40000, (2, 3, 5)).astype(np.int32)
    in_scale = rng.uniform(0.001, 0.01, 3).astype(np.float32)
    b = legato.GraphBuilder()
    y = b.call("qnn.requantize", b.input("x", x.shape, "int32"), b.const(in_scale),
               b.const(np.zeros(3, np.int32)), b.const(np.array(0.9, np.float32)),
               b.const(np.array(-3, np.int8)), axis=1, dtype="int8")
    got = compiled(b.build(y), backend)(x)
    want = requantized(x, (in_scale / np.float32(0.9))[:, None], -3, "int8")
    np.testing.assert_array_equal(got, want)


def test_requantize_axis_out_of_range_is_checked_not_indexed():
    # the attrs fuzzer (seeds 170, 356) met IndexError: the output's per-axis check read
    # x.shape[axis] before any check of the axis
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3), "int32")
    scalar = [b.const(np.float32(0.5)), b.const(np.int32(0)), b.const(np.float32(0.25)),
              b.const(np.int8(1))]
    y = b.call("qnn.requantize", x, *scalar, axis=5, dtype="int8")  # per tensor: axis unused
    assert y.type.shape == (2, 3)
    with pytest.raises(legato.LegatoError):
        b.call("qnn.requantize", x, scalar[0], scalar[1], b.const(np.full(4, 0.25, np.float32)),
               b.const(np.zeros(4, np.int8)), axis=5, dtype="int8")
