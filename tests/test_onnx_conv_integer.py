"""A CNN through onnxruntime's quantize_dynamic (DynamicQuantizeLinear + ConvInteger,
int8 and uint8 weights) imported by legato: its convolutions' int32 results equal
onnxruntime's on cpu_ref and c_kernels, and each weight arrives as a constant with its
zero point already subtracted (a backend sees its bytes)."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir import Const

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from legato.frontends import onnx as onnx_frontend  # noqa: E402

SHAPE = (1, 4, 11, 10)


def strided_convs():
    """conv 4->6 of stride 2 and dilation 2 + relu, then a depthwise 3x3 (group 6)."""
    rng = np.random.default_rng(1)
    weights = {"w1": rng.normal(0, 0.3, (6, 4, 3, 3)), "b1": rng.normal(0, 0.1, 6),
               "w2": rng.normal(0, 0.3, (6, 1, 3, 3))}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[2, 1, 2, 1],
                              strides=[2, 1], dilations=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1], group=6)]
    graph = helper.make_graph(
        nodes, "strided_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k)
                     for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module", params=["QInt8", "QUInt8"])
def dynamic_model(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("conv_integer")
    onnx.save(strided_convs(), root / "float.onnx")
    quantization.quantize_dynamic(str(root / "float.onnx"), str(root / "dynamic.onnx"),
                                  weight_type=getattr(quantization.QuantType, request.param))
    model = onnx.load(str(root / "dynamic.onnx"))
    convs = [n.output[0] for n in model.graph.node if n.op_type == "ConvInteger"]
    assert len(convs) == 2
    model.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.INT32, None)
                              for name in convs)
    return model


def test_conv_weights_import_as_shifted_constants(dynamic_model):
    module = onnx_frontend.load(dynamic_model)
    convs = [c for c in module.main.calls if c.op == "nn.conv2d"]
    assert len(convs) == 2
    for call in convs:
        assert isinstance(call.inputs[1], Const) and call.inputs[1].dtype == "int32"
        assert np.ptp(np.asarray(call.inputs[1].data)) <= 255


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_dynamic_cnn_matches_onnxruntime(dynamic_model, backend):
    feeds = {"x": np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)}
    session = ort.InferenceSession(dynamic_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = legato.compile(onnx_frontend.load(dynamic_model), backend)(*feeds.values())
    assert [g.dtype for g in got] == [w.dtype for w in want]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
