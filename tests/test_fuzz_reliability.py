"""Regressions the fuzz targets found (tests/fuzz), minimised, each against an outside
reference. A bug reported to its owner and not yet fixed is a strict xfail naming the
owner: it fails the suite once the fix lands, so the marker is removed then."""
from __future__ import annotations

import numpy as np
import pytest

import legato

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from legato.frontends import onnx as lonnx  # noqa: E402


def one_node_model(node, inputs: dict, inits=(), opset=18):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, 1, v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in node.output], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnxruntime_says(model, inputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def assert_like_onnxruntime(model, inputs, backends=("cpu_ref", "c_kernels")):
    want = onnxruntime_says(model, inputs)
    module = lonnx.load(model)
    for backend in backends:
        got = legato.compile(module, backend)(**inputs)
        got = got if isinstance(got, tuple) else (got,)
        for mine, theirs in zip(got, want):
            assert mine.shape == theirs.shape, backend
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6, err_msg=backend)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def floats(name, values):
    return numpy_helper.from_array(np.array(values, np.float32), name)


X22 = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)


# --- reported to zoowide (ONNX importer), fixed --------------------------------------------

def test_hardmax_before_opset_13_takes_one_argmax_over_the_flattened_tail():
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=0)
    assert_like_onnxruntime(one_node_model(node, {"x": X22}, opset=12), {"x": X22})


def test_lp_pool_with_ceil_mode_sums_only_the_elements_inside_the_input():
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2], strides=[2],
                            ceil_mode=1, p=1)
    x = np.ones((1, 1, 3), np.float32)
    assert_like_onnxruntime(one_node_model(node, {"x": x}, opset=19), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL1", "ReduceL2"])
def test_a_noop_reduction_still_applies_its_elementwise_part(op):
    node = helper.make_node(op, ["x", "axes"], ["y"], noop_with_empty_axes=1)
    model = one_node_model(node, {"x": X22}, [ints("axes", [])])
    assert_like_onnxruntime(model, {"x": X22})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resizing_a_dim_to_zero_gives_an_empty_result(mode):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    x = np.ones((1, 1, 1, 2), np.float32)
    model = one_node_model(node, {"x": x}, [floats("scales", [1, 1, 0.5, 1])])
    assert_like_onnxruntime(model, {"x": x})


def test_resizing_a_dim_to_zero_with_nearest_gives_an_empty_result():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    x = np.ones((1, 1, 1, 2), np.float32)
    model = one_node_model(node, {"x": x}, [floats("scales", [1, 1, 0.5, 1])])
    assert_like_onnxruntime(model, {"x": x})


# --- reported to torchfix (PyTorch importer), fixed -----------------------------------------

def test_a_module_pytorch_cannot_decompose_is_a_legato_error():
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as ltorch

    class IntegerAddcmul(torch.nn.Module):
        def forward(self, x, y):
            z = x.clone()
            z.addcmul_(y, y, value=0.5)
            return z

    x = torch.ones(3, dtype=torch.int64)
    IntegerAddcmul()(x, x)  # eager runs it
    with pytest.raises(legato.LegatoError, match="addcmul"):
        ltorch.load(IntegerAddcmul(), (x, x))


@pytest.mark.parametrize("form", ["where", "masked_fill"])
def test_a_negative_scalar_wraps_into_a_uint8_tensor_like_eager(form):
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as ltorch

    class ScalarFill(torch.nn.Module):
        def forward(self, x):
            if form == "where":
                return torch.where(x > 2, x, -3)
            return x.masked_fill(x > 2, -3)

    x = torch.tensor([1, 5, 200], dtype=torch.uint8)
    want = ScalarFill()(x).numpy()
    got = legato.compile(ltorch.load(ScalarFill(), (x,)), "cpu_ref")(x.numpy())
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
