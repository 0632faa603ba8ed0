"""qnn.quantize and qnn.dequantize's C kernels (csrc/qelementwise.c) against onnxruntime's
QuantizeLinear and DequantizeLinear, bit for bit: per tensor and per axis, int8 and uint8,
ties, saturation and non-finite values; a compiled QDQ pair runs both on c_kernels."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir.errors import ExecutionError
from legato_c_kernels.kernels import qnn_elementwise as qe

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402


def qdq_model(op, x_dtype, shape, scale, zero, axis, out_dtype):
    tensor = helper.np_dtype_to_tensor_dtype
    inits = [numpy_helper.from_array(np.asarray(scale), "s"),
             numpy_helper.from_array(np.asarray(zero), "z")]
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "s", "z"], ["y"], axis=axis)], "g",
        [helper.make_tensor_value_info("x", tensor(np.dtype(x_dtype)), shape)],
        [helper.make_tensor_value_info("y", tensor(np.dtype(out_dtype)), shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def run_ort(model, x):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


CASES = [  # dtype, shape, axis (None: per tensor)
    (np.int8, (1, 128, 768), None),
    (np.uint8, (2, 3, 37), None),
    (np.int8, (2, 16, 7, 9), 1),
    (np.uint8, (5, 4), 0),
    (np.int8, (3, 300, 70), 2),     # threaded
    (np.uint8, (), None),
]


def params(rng, dtype, shape, axis):
    n = () if axis is None else (shape[axis],)
    info = np.iinfo(dtype)
    scale = rng.uniform(0.005, 0.05, n).astype(np.float32)
    zero = rng.integers(info.min, info.max + 1, n).astype(dtype)
    return scale, zero


@pytest.mark.parametrize("dtype, shape, axis", CASES)
def test_quantize_and_dequantize_match_onnxruntime(dtype, shape, axis):
    rng = np.random.default_rng(len(shape) + (axis or 0))
    scale, zero = params(rng, dtype, shape, axis)
    x = np.asarray(rng.standard_normal(shape) * 3, np.float32)
    x.reshape(-1)[:3] = [np.inf, -np.inf, 0.5 * scale.reshape(-1)[0]][:x.size]  # a tie too
    attrs = {} if axis is None else {"axis": axis}
    onnx_axis = 1 if axis is None else axis
    want = run_ort(qdq_model("QuantizeLinear", np.float32, shape, scale, zero, onnx_axis, dtype), x)
    got = qe.qnn_quantize(x, scale, zero, dtype=np.dtype(dtype).name, **attrs)
    np.testing.assert_array_equal(got, want)
    back = run_ort(qdq_model("DequantizeLinear", dtype, shape, scale, zero, onnx_axis,
                             np.float32), want)
    np.testing.assert_array_equal(qe.qnn_dequantize(want, scale, zero, **attrs), back)
    out = np.empty(shape, np.float32)       # the prepared call
    qe.qnn_dequantize.bind(want, scale, zero, out=out, **attrs)()
    np.testing.assert_array_equal(out, back)


def test_quantize_rounds_ties_to_even_and_refuses_a_zero_scale():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0], np.float32)
    got = qe.qnn_quantize(x, np.float32(1.0), np.int8(0))
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, 127, -128])
    with pytest.raises(ExecutionError, match="qnn.quantize"):
        qe.qnn_quantize(x, np.float32(0.0), np.int8(0))
    with pytest.raises(ExecutionError, match="zero_point must be a uint8"):
        qe.qnn_quantize(x, np.float32(1.0), np.int8(0), dtype="uint8")
    with pytest.raises(ExecutionError, match="data must be a float32"):
        qe.qnn_quantize(x.astype(np.float64), np.float32(1.0), np.int8(0))
    with pytest.raises(ExecutionError, match="scale must hold one value or 3"):
        qe.qnn_dequantize(np.zeros((2, 3), np.int8), np.ones(2, np.float32), np.zeros(2, np.int8))


def test_compiled_quantize_dequantize_run_on_c_kernels():
    from legato.frontends import onnx as onnx_frontend
    rng = np.random.default_rng(4)
    scale, zero = np.float32(0.03), np.int8(-7)
    tensor = helper.np_dtype_to_tensor_dtype
    inits = [numpy_helper.from_array(np.asarray(scale), "s"),
             numpy_helper.from_array(np.asarray(zero), "z")]
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
        [helper.make_tensor_value_info("x", tensor(np.dtype(np.float32)), [4, 50])],
        [helper.make_tensor_value_info("y", tensor(np.dtype(np.float32)), [4, 50])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    compiled = legato.compile(onnx_frontend.load(model), "c_kernels")
    assert compiled.report.per_backend["c_kernels"] == {"qnn.quantize": 1, "qnn.dequantize": 1}
    x = rng.standard_normal((4, 50)).astype(np.float32) * 4
    np.testing.assert_array_equal(compiled(x), run_ort(model, x))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_float32_to_byte_cast_in_c_matches_the_reference(dtype):
    # truncation, saturation and NaN to 0 as cpu_ref's cast (the op's definition); ran on
    # cpu_ref before (numpy's conversion does not saturate): BERT's int8 output stages
    from legato_c_kernels.kernels import casts
    from legato_cpu_ref import kernels as ref
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 129)) * 150).astype(np.float32)
    x[0, :8] = [np.nan, np.inf, -np.inf, 127.9, -128.9, 255.5, -0.9, 0.9]
    want = ref.cast(x, dtype=dtype)
    np.testing.assert_array_equal(casts.cast(x, dtype=dtype), want)
    out = np.empty(x.shape, dtype)
    casts.cast.bind(x, out=out, dtype=dtype)()
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(casts.cast(x.T, dtype=dtype), want.T)  # not contiguous
    b = legato.GraphBuilder()
    mod = b.build(b.cast(b.input("x", x.shape, "float32"), dtype=dtype))
    compiled = legato.compile(mod, "c_kernels")
    assert compiled.report.per_backend["c_kernels"] == {"cast": 1}
    np.testing.assert_array_equal(compiled(x), want)
