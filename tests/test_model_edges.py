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
