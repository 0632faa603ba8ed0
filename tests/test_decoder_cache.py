"""Decoders with a KV cache: exported once with the cache's length symbolic, compiled once,
and run in a greedy generation loop that gives eager `generate`'s tokens (README's
"Generation with a KV cache" recipe, run here as written), plus the pieces such exports
need: ranges between sizes, sizes read as data, an empty cache."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ["cpu_ref", "c_kernels"]


def positions_model():
    """What a decoder's export computes from its cache: positions `Range(past, past + seq)`
    into a table, `total = past + seq` as a float, the cache grown by Concat."""
    def ints(name, value):
        return numpy_helper.from_array(np.array(value, np.int64), name)
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 4))
                                    .astype(np.float32), "table")
    nodes = [helper.make_node("Shape", ["past"], ["past_shape"]),
             helper.make_node("Gather", ["past_shape", "one"], ["p"], axis=0),
             helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Gather", ["x_shape", "one"], ["s"], axis=0),
             helper.make_node("Add", ["p", "s"], ["t"]),
             helper.make_node("Range", ["p", "t", "one"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["emb"], axis=0),
             helper.make_node("Add", ["x", "emb"], ["h"]),
             helper.make_node("Pow", ["h", "three"], ["h3"]),
             helper.make_node("Concat", ["past", "h3"], ["present"], axis=1),
             helper.make_node("Cast", ["t"], ["tf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["present", "tf"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4]),
                     helper.make_tensor_value_info("past", TensorProto.FLOAT,
                                                   ["batch", "past", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [table, ints("one", 1), numpy_helper.from_array(np.array(3.0, np.float32), "three")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_ranges_and_sizes_of_the_cache_compile_once(backend):
    model = positions_model()
    compiled = legato.compile(legato.frontends.onnx.load(model), backend)
    # legalized once over the symbols: a symbolic x**3 no longer sends the model to a
    # compile per binding, and c_kernels runs the range's cumsum whole (its decomposition,
    # which cpu_ref's config asks for, waits for the bound sizes)
    summary = compiled.report.summary()
    assert "compiled per binding" not in summary
    assert ("symbolic dims bound" in summary) == (backend == "cpu_ref")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch, past, seq in [(1, 0, 3), (2, 3, 1), (1, 7, 2)]:  # an empty cache first
        x = rng.standard_normal((batch, seq, 4)).astype(np.float32)
        cache = rng.standard_normal((batch, past, 4)).astype(np.float32)
        np.testing.assert_allclose(compiled(x, cache),
                                   session.run(None, {"x": x, "past": cache})[0],
                                   rtol=1e-5, atol=1e-5)
