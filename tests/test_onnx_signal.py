"""ONNX DFT (opsets 17 and 20) and STFT onto signal.dft, against onnxruntime, on cpu_ref and
c_kernels; STFT's other cases are in test_onnx_more."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402

BACKENDS = ["cpu_ref", "c_kernels"]


def dft_model(shape, opset, attrs, length=None, axis=None):
    """One DFT node on input x of `shape`; dft_length and (opset 20) axis as constants."""
    inits, names = [], ["x", "", ""]
    for index, (name, value) in enumerate((("length", length), ("axis", axis)), start=1):
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, np.int64), name))
            names[index] = name
    node = helper.make_node("DFT", names[:3 if axis is not None else 2], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = [  # (shape, opset, attributes, dft_length, axis input)
    ((2, 16, 1), 17, {}, None, None),
    ((3, 5, 4, 2), 17, {"axis": 2, "inverse": 1}, None, None),
    ((2, 12, 1), 17, {"onesided": 1}, 8, None),
    ((3, 7, 2), 20, {}, 10, None),
    ((4, 6, 3, 2), 20, {"inverse": 1}, None, 1),
    ((2, 3, 9, 1), 20, {"onesided": 1}, None, -2),
    ((5, 6, 2), 20, {}, None, -3),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, opset, attrs, length, axis", CASES,
                         ids=[f"{c[1]}-{c[2]}-{c[3]}-{c[4]}" for c in CASES])
def test_dft_matches_onnxruntime(shape, opset, attrs, length, axis, backend):
    model = dft_model(shape, opset, attrs, length, axis)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    mod = onnx_frontend.load(model)
    assert [c.op for c in mod.main.calls] == ["signal.dft"]
    got = legato.compile(mod, backend)(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1, np.abs(want).max()))


def test_dft_one_sided_inverse_gives_the_real_signal():
    """DFT-20 with onesided and inverse is an inverse real FFT (onnxruntime does not run
    it; onnx's reference evaluator is numpy's irfft)."""
    from onnx.reference import ReferenceEvaluator
    model = dft_model((2, 5, 2), 20, {"onesided": 1, "inverse": 1}, 9, 1)
    x = np.random.default_rng(1).standard_normal((2, 5, 2)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = legato.compile(onnx_frontend.load(model), "cpu_ref")(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_stft_calls_signal_dft():
    signal = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 1))
    step = numpy_helper.from_array(np.array(4, np.int64), "step")
    window = numpy_helper.from_array(np.hanning(8).astype(np.float32), "window")
    node = helper.make_node("STFT", ["x", "step", "window"], ["y"])
    graph = helper.make_graph([node], "g", [signal], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, None)], initializer=[step, window])
    mod = onnx_frontend.load(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)]))
    assert "signal.dft" in {c.op for c in mod.main.calls}
    assert mod.main.results[0].shape == (1, 7, 5, 2)
