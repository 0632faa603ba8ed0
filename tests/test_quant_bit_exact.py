"""legato's int8 runs are bit-exact with onnxruntime's int8 kernels tensor by tensor, through
the depth of a model, wherever onnxruntime computes in integers: a one-step difference
anywhere grows downstream (a step off at a coarse scale is several at a finer one), so the
published-size models stay within one step of onnxruntime at their output only if every
tensor before is equal. Compared with benchmarks/quant_accuracy.py's tools: onnxruntime's
optimized graph run as saved with every quantized tensor exposed (exposing them in the file
itself changes what it fuses)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from benchmarks import quant_accuracy as qa  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402

BACKENDS = ["cpu_ref", "c_kernels"]
CHANNELS, SIZE, DEPTH = 8, 10, 6


def float_model(residual: bool):
    """DEPTH blocks of a 3x3 convolution and relu (He-normal weights); with `residual`,
    every second block adds the block before it (a tensor with two readers)."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(DEPTH):
        w = rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) * (2 / (9 * CHANNELS)) ** 0.5
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(CHANNELS))
                                          .astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        if residual and i % 2:
            nodes.append(helper.make_node("Add", [f"r{i}", x], [f"a{i}"], name=f"add{i}"))
            x = f"a{i}"
        else:
            x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    shape = [1, CHANNELS, SIZE, SIZE]
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(seed: int) -> dict:
    x = np.random.default_rng(seed).standard_normal((1, CHANNELS, SIZE, SIZE))
    return {"x": x.astype(np.float32)}


def quantized(tmp_path, residual: bool, u8: bool):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    source, target = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(float_model(residual), str(source))
    batches = iter([feeds(seed) for seed in range(1, 5)])
    reader = type("Reader", (CalibrationDataReader,),
                  {"get_next": lambda self: next(batches, None)})()
    quantize_static(str(source), str(target), reader, quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8 if u8 else
                    QuantType.QInt8, weight_type=QuantType.QInt8)
    return onnx.load(str(target))


def compare(model, seed: int = 100):
    """(tensors, onnxruntime's optimized run of them, {backend: legato's})."""
    x = feeds(seed)
    tensors = qa.quantized_tensors(model)
    want = qa.fused_values(model, x, tensors)
    spec = qa.onnxruntime_values(model, x, [t for _, t, _ in tensors], False)
    shapes = {t: np.shape(v) for t, v in spec.items()}
    module = onnx_frontend.load(model)
    return tensors, want, {b: qa.legato_values(module, b, x, tensors, shapes)
                           for b in BACKENDS}


@pytest.mark.parametrize("residual, u8", [(True, True), (False, True), (False, False)],
                         ids=["residual-u8s8", "chain-u8s8", "chain-s8s8"])
def test_every_tensor_equals_onnxruntimes_int8_kernels(tmp_path, residual, u8):
    """Where onnxruntime fuses every region into its int8 kernels (uint8 activations; int8
    ones in a chain, which its x86 optimizer turns into uint8), every quantized tensor and
    the output are equal, on both backends."""
    model = quantized(tmp_path, residual, u8)
    tensors, want, got = compare(model)
    assert len(want) - 1 >= DEPTH   # the optimized graph's tensors were found
    for backend, (values, out) in got.items():
        compared = [t for _, t, _ in tensors if t in values and t in want]
        assert len(compared) >= DEPTH, backend
        for tensor in compared:
            off = qa.steps_off(values[tensor], want[tensor])
            assert off.max() == 0, f"{backend}: {tensor} {(off > 0).mean():.3%} differ"
        assert qa.steps_off(out, want["y"]).max() == 0, backend


def test_the_optimized_graph_gives_onnxruntimes_own_output(tmp_path):
    """int8 activations with a tensor read twice: onnxruntime's optimizer keeps some regions
    float there, and exposing its quantized tensors in the file would change which; its
    optimized graph run as saved gives the output of a plain session, and its tensors are
    found (uint8 where it turned int8 into uint8, shifted back by 128)."""
    model = quantized(tmp_path, residual=True, u8=False)
    x = feeds(100)
    tensors = qa.quantized_tensors(model)
    fused = qa.fused_values(model, x, tensors)
    plain = qa.onnxruntime_values(model, x, [], True)["y"]
    np.testing.assert_array_equal(fused["y"], plain)
    assert len(fused) - 1 >= DEPTH
    assert any(np.asarray(v).dtype == np.uint8 for v in fused.values())
    assert qa.steps_off(np.array([0, 255], np.uint8), np.array([-128, 127], np.int8)).max() == 0
