"""ONNX converters that rewrite an op into others (Einsum, Resize, the N-d scatters, Mod,
the activations) on cases beyond the ONNX node tests, against numpy and onnx's reference
evaluator, on cpu_ref and c_kernels."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402

F = TensorProto.FLOAT


def one_node(op, arrays, attrs=None, opset=21, outputs=1):
    names = [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **(attrs or {}))
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in zip(names, arrays)]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None)
            for i in range(outputs)]
    graph = helper.make_graph([node], "g", inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(model, arrays, backend, atol=1e-5):
    want = ReferenceEvaluator(model).run(None, {f"x{i}": a for i, a in enumerate(arrays)})
    got = legato.compile(onnx_frontend.load(model), backend)(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


EINSUMS = {
    "bhqd,bhkd->bhqk": [randn(2, 3, 4, 5), randn(2, 3, 6, 5)],
    "ij,jk,kl->il": [randn(2, 3), randn(3, 4), randn(4, 5)],
    "i,i": [randn(7), randn(7)],
    "ij->": [randn(3, 4)],
    "bij,jk->bki": [randn(2, 3, 4), randn(4, 5)],
    "...ij,...jk->...ik": [randn(2, 1, 3, 4), randn(1, 5, 4, 6)],
    "ii->i": [randn(4, 4)],
    "ijk,ik->j": [randn(2, 3, 4), randn(2, 4)],
}


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
@pytest.mark.parametrize("equation", sorted(EINSUMS))
def test_einsum(equation, backend):
    arrays = EINSUMS[equation]
    check(one_node("Einsum", arrays, {"equation": equation}), arrays, backend, atol=1e-4)


MOD = [(np.arange(-7, 8, dtype=np.int32), np.array([3, -3, 4], np.int32)[:, None], 0),
       (np.arange(-7, 8, dtype=np.int64), np.array([3, -3, 4], np.int64)[:, None], 1),
       (randn(4, 5) * 10, np.array([-3.0, 2.5, 1.0, -0.5, 7.0], np.float32), 1)]


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
@pytest.mark.parametrize("index", range(len(MOD)))
def test_mod_of_negative_operands(index, backend):
    a, b, fmod = MOD[index]
    check(one_node("Mod", [a, b], {"fmod": fmod}), [a, b], backend)


RESIZES = [
    ({"mode": "linear"}, [3, 7]), ({"mode": "cubic", "exclude_outside": 1}, [2, 9]),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "ceil"}, [6, 2]),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 5]),
    ({"mode": "cubic", "antialias": 1}, [2, 3]),
]


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
@pytest.mark.parametrize("index", range(len(RESIZES)))
def test_resize_by_sizes(index, backend):
    attrs, sizes = RESIZES[index]
    x = randn(1, 2, 4, 5)
    node = helper.make_node("Resize", ["x0", "", "", "sizes"], ["y0"], axes=[2, 3], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x0", F, x.shape)],
        [helper.make_tensor_value_info("y0", F, None)],
        [helper.make_tensor("sizes", TensorProto.INT64, [2], sizes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    check(model, [x], backend)
