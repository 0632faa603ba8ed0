"""Pads a convolution does itself: a Pad before a Conv folds into the conv's padding when
nothing else reads it, it pads the spatial dims only, and with the conv's own padding
value (0; the data's zero point for qnn.conv2d); an empty pad is dropped; every other pad
stays. Results are compared with the module as written (the reference interpreter does
not fold) and, for an ONNX model, with onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.passes.pad_fold import FoldPadsPass

RNG = np.random.default_rng(0)
W = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32)
CONV = dict(strides=[2, 2], padding=[0, 1, 0, 1], dilation=[1, 1])


def _float_model(pads, value=0.0, mode="constant", second_reader=False):
    b = legato.GraphBuilder()
    x = b.input("x", (1, 3, 9, 9))
    padded = b.call("pad", x, pads=pads, value=value, mode=mode)
    y = b.call("nn.conv2d", padded, b.const(W), **CONV)
    if second_reader:  # the padded tensor is also a result
        return b.build(y, padded)
    return b.build(y)


def _ops(module):
    return [c.op for fn in module.functions.values() for c in fn.calls]


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_a_spatial_zero_pad_becomes_the_convs_padding(backend):
    module = _float_model([0, 0, 1, 2, 0, 0, 3, 0])
    folded, modified = FoldPadsPass()(module)
    assert modified and _ops(folded) == ["nn.conv2d"]
    assert list(folded.main.calls[0].attrs["padding"]) == [1, 3, 3, 1]  # top, left, ...
    compiled = legato.compile(module, backend)
    assert dict(compiled.report.passes)["fold-pads"].startswith("changed")
    if backend == "c_kernels":  # (cpu_ref decomposes the conv, padding it itself)
        assert "pad" not in _ops(compiled.module)
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(compiled(x), legato.reference(module)(x), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("case", [dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], value=1.0),
                                  dict(pads=[1, 0, 1, 1, 0, 0, 1, 1]),  # the batch too
                                  dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="reflect"),
                                  dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], second_reader=True)])
def test_other_pads_stay(case):
    module = _float_model(**case)
    folded, modified = FoldPadsPass()(module)
    assert not modified and "pad" in _ops(folded)
    compiled = legato.compile(module, "c_kernels")
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    for got, want in zip(legato.runtime.interpreter.as_tuple(compiled(x)),
                         legato.runtime.interpreter.as_tuple(legato.reference(module)(x))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_empty_pad_is_dropped():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 5))
    module = b.build(b.call("nn.relu", b.call("pad", x, pads=[0, 0, 0, 0])))
    folded, modified = FoldPadsPass()(module)
    assert modified and _ops(folded) == ["nn.relu"]
    assert folded.main.calls[0].inputs[0] is folded.main.params[0]


def _qconv_model(pad_value):
    b = legato.GraphBuilder()
    x = b.input("x", (1, 3, 8, 8), "int8")
    zero = b.const(np.array(-3, np.int8))
    padded = b.call("pad", x, pads=[0, 0, 1, 1, 0, 0, 1, 1], value=pad_value)
    w = b.const(RNG.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8))
    y = b.call("qnn.conv2d", padded, b.const(np.float32(0.05)), zero, w,
               b.const(np.float32(0.02)), b.const(np.array(0, np.int8)),
               b.const(np.float32(0.1)), b.const(np.array(2, np.int8)), None,
               strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1])
    return b.build(y)


@pytest.mark.parametrize("pad_value, folds", [(-3.0, True), (0.0, False)])
def test_a_qnn_conv_takes_a_pad_of_its_zero_point_only(pad_value, folds):
    module = _qconv_model(pad_value)
    folded, modified = FoldPadsPass()(module)
    assert modified == folds
    x = RNG.integers(-128, 128, (1, 3, 8, 8)).astype(np.int8)
    want = legato.reference(module)(x)
    for backend in ("cpu_ref", "c_kernels"):
        np.testing.assert_array_equal(legato.compile(module, backend)(x), want)


def test_an_onnx_pad_before_conv_matches_onnxruntime(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
             helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "padconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, 0, 0, 1, 0, 0, 1, 1], np.int64), "pads"),
         numpy_helper.from_array(W, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "padconv.onnx"
    onnx.save(model, str(path))
    compiled = legato.compile(str(path), "c_kernels")
    assert "pad" not in _ops(compiled.module)
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)
