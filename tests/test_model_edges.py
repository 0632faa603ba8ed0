"""Edges real models reach that legato's own examples did not: float16 programs through
`legato run`, qnn scales that cannot be right, pooling windows larger than their input,
float64 constant subgraphs on emitting backends, and very wide concats."""
import numpy as np
import pytest

import legato
from legato.cli import main


def float16_onnx(path):
    """A float16 MatMul -> Relu -> LayerNormalization -> Softmax model."""
    pytest.importorskip("onnx")
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2).astype(np.float16), "w"),
               numpy_helper.from_array(np.ones(64, np.float16), "g"),
               numpy_helper.from_array(np.zeros(64, np.float16), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "b"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [8, 64])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_run_float16_model_uses_the_float16_tolerance(tmp_path, capsys, backend_factory):
    path = float16_onnx(tmp_path / "half.onnx")
    assert main(["run", path, "-b", "c_kernels"]) == 0  # float16 rounding differs by ulps of 1e-3
    assert "float16[8, 64]" in capsys.readouterr().out
    backend_factory({"backend": "badexp16", "fallback": "cpu_ref", "legal": {"exp": {}}},
                    kernels={"exp": lambda a: np.exp(a * 1.5).astype(a.dtype)})
    assert main(["run", path, "-b", "badexp16"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH (tolerance" in out and "first differing call: " in out


# --- qnn scales that have no quantized value --------------------------------------------

def _quant_call(b, op, scale):
    """A call of `op` whose (first divided-by) scale constant is `scale`."""
    s, z8 = b.const(np.float32(scale)), b.const(np.int8(0))
    one = b.const(np.float32(1.0))
    if op == "qnn.quantize":
        return b.call(op, b.input("x", (2, 3), "float32"), s, z8)
    if op == "qnn.dequantize":
        return b.call(op, b.input("q", (2, 3), "int8"), s, z8)
    x, w = b.input("x", (1, 2, 4, 4), "int8"), b.const(np.ones((3, 2, 3, 3), np.int8))
    return b.call(op, x, one, z8, w, one, z8, s, z8)  # out_scale: the one divided by


@pytest.mark.parametrize("op", ["qnn.quantize", "qnn.dequantize", "qnn.conv2d"])
@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_qnn_refuses_non_finite_scales(op, scale):
    with pytest.raises(legato.LegatoError, match=rf"{op}: input \d \(\w*scale\) holds {scale}"):
        _quant_call(legato.GraphBuilder(), op, scale)


def test_qnn_refuses_zero_scales_it_divides_by_and_keeps_the_defined_ones():
    for op in ("qnn.quantize", "qnn.conv2d"):
        with pytest.raises(legato.LegatoError, match=rf"{op}: .* holds 0.0 .* finite and nonzero"):
            _quant_call(legato.GraphBuilder(), op, 0.0)
    b = legato.GraphBuilder()
    x = b.input("x", (4,), "float32")
    q = b.call("qnn.quantize", x, b.const(np.float32(-0.5)), b.const(np.int8(3)))
    zeroed = b.call("qnn.dequantize", q, b.const(np.float32(0.0)), b.const(np.int8(3)))
    module = b.build(b.call("qnn.dequantize", q, b.const(np.float32(-0.5)), b.const(np.int8(3))), zeroed)
    data = np.array([1.3, -2.6, 0.25, 100.0], np.float32)
    want = (np.clip(np.round(data / -0.5) + 3, -128, 127) - 3) * -0.5  # ONNX's definition
    for backend in ("cpu_ref", "c_kernels"):
        back, zero = legato.compile(module, backend=backend)(data)
        np.testing.assert_array_equal(back, want.astype(np.float32))
        np.testing.assert_array_equal(zero, np.zeros(4, np.float32))


def test_qnn_nan_scale_refused_at_onnx_import(tmp_path):
    pytest.importorskip("onnx")
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from legato.frontends import onnx as lonnx
    for node_type, dtype in (("QuantizeLinear", TensorProto.FLOAT), ("DequantizeLinear", TensorProto.INT8)):
        graph = helper.make_graph(
            [helper.make_node(node_type, ["x", "s", "z"], ["y"])], "g",
            [helper.make_tensor_value_info("x", dtype, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
            [numpy_helper.from_array(np.array(np.nan, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")])
        path = tmp_path / f"{node_type}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        op = "qnn.quantize" if node_type == "QuantizeLinear" else "qnn.dequantize"
        with pytest.raises(legato.LegatoError, match=rf"{op}: input 1 \(scale\) holds nan at index 0"):
            lonnx.load(str(path))
