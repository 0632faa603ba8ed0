"""A CNN from onnxruntime's quantize_dynamic (DynamicQuantizeLinear + ConvInteger) on
tosa_custom_int: every int32 convolution as int8 CONV2D / DEPTHWISE_CONV2D of its data's
bytes, validated for pro_fp+pro_int, run on the TOSA reference model equal to cpu_ref."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato import GraphBuilder
from legato_tosa_custom import backend

INT = "tosa_custom_int"


def two_convs(onnx):
    """conv 3->8 + relu, then a depthwise 3x3 conv of stride 2 (ConvInteger with group)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = {"w1": rng.normal(0, 0.3, (8, 3, 3, 3)), "b1": rng.normal(0, 0.1, 8),
               "w2": rng.normal(0, 0.3, (8, 1, 3, 3)), "b2": rng.normal(0, 0.1, 8)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], group=8,
                              strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 5, 5])],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k)
                     for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(seed):
    return np.random.default_rng(seed).standard_normal((2, 3, 9, 9)).astype(np.float32)


@pytest.fixture(scope="module", params=["QInt8", "QUInt8"])
def dynamic_cnn(request, tmp_path_factory):
    """(the ONNX file, legato's import) of two_convs through quantize_dynamic."""
    onnx = pytest.importorskip("onnx")
    quantization = pytest.importorskip("onnxruntime.quantization")
    root = tmp_path_factory.mktemp("dynamic")
    onnx.save(two_convs(onnx), root / "float.onnx")
    quantization.quantize_dynamic(str(root / "float.onnx"), str(root / "dynamic.onnx"),
                                  weight_type=getattr(quantization.QuantType, request.param))
    model = onnx.load(str(root / "dynamic.onnx"))
    convs = [n.output[0] for n in model.graph.node if n.op_type == "ConvInteger"]
    assert len(convs) == 2
    model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.INT32,
                                                                 None) for name in convs)
    onnx.save(model, root / "dynamic.onnx")
    from legato.frontends import onnx as onnx_frontend
    return root / "dynamic.onnx", onnx_frontend.load(model)


def int8_operators(text: str, op: str) -> tuple[int, int]:
    """(how many `op` lines the module has, how many take i8 operands)."""
    lines = [line for line in text.splitlines() if f'"{op}"(' in line]
    return len(lines), sum(line.split(": (tensor<")[1].split(">")[0].endswith("xi8")
                           for line in lines)


def test_conv_integer_runs_as_int8_convolutions_equal_to_cpu_ref(tools, dynamic_cnn):
    """Each ConvInteger is four int8 convolutions (one per byte of its int32 data), the
    module validates for pro_fp+pro_int (DynamicQuantizeLinear's range needs floats), its
    int32 ConvInteger results equal cpu_ref's, and the float output is within float32
    rounding of it (TOSA divides as a product by the reciprocal)."""
    _, module = dynamic_cnn
    text = legato.compile(module, INT).artifact
    assert int8_operators(text, "tosa.conv2d") == (4, 4)
    assert int8_operators(text, "tosa.depthwise_conv2d") == (4, 4)
    reference = legato.compile(module, "cpu_ref")
    for seed in (5, 6):
        got = tools.run_reference(text, [feeds(seed)], validate=True)
        want = reference(feeds(seed))
        assert [g.dtype for g in got] == ["float32", "int32", "int32"]
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("groups", [1, 4, 12])
def test_int32_convolutions_of_wide_data_are_exact_in_pro_int(tools, groups):
    """int32 data far outside a byte (three digits in use, negative values, padding; as
    large as int32 products allow) and a weight spanning 256 values off int8's range (an
    offset: the weight zero point): CONV2D, grouped CONV2Ds and DEPTHWISE_CONV2D equal
    cpu_ref's convolution, in profile pro_int alone."""
    rng = np.random.default_rng(groups)
    x = rng.integers(-2 ** 16, 2 ** 16, (1, 12, 6, 7)).astype(np.int32)
    w = rng.integers(-60, 196, (12, 12 // groups, 3, 3)).astype(np.int32)
    bias = rng.integers(-1000, 1000, 12).astype(np.int32)
    b = GraphBuilder()
    y = b.call("nn.conv2d", b.input("x", x.shape, "int32"), b.const(w), b.const(bias),
               padding=[1, 0, 1, 1], strides=[1, 2], groups=groups)
    module = b.build(y)
    text = legato.compile(module, backend("pro_int")).artifact
    (got,) = tools.run_reference(text, [x], validate=True)
    want = legato.compile(module, "cpu_ref")(x)
    np.testing.assert_array_equal(got, want)
