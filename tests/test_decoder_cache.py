"""Decoders with a KV cache: exported once with the cache's length symbolic, compiled once,
and run in a greedy generation loop that gives eager `generate`'s tokens (README's
"Generation with a KV cache" recipe, run here as written), plus the pieces such exports
need: ranges between sizes, sizes read as data, an empty cache."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from tests import decoder_recipe  # noqa: E402

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


def test_a_polynomial_of_sizes_read_as_data():
    """(batch - 1) * seq + 2, built by the export's own arithmetic on Shape's values."""
    def ints(name, value):
        return numpy_helper.from_array(np.array(value, np.int64), name)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Mul", ["b", "s"], ["bs"]),
             helper.make_node("Sub", ["bs", "s"], ["d"]),
             helper.make_node("Add", ["d", "two"], ["n"]),
             helper.make_node("Cast", ["n"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "f"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [ints("zero", 0), ints("one", 1), ints("two", 2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = legato.compile(legato.frontends.onnx.load(model), "c_kernels")
    for batch, seq in [(1, 3), (3, 5), (4, 1)]:
        x = np.ones((batch, seq), np.float32)
        np.testing.assert_array_equal(compiled(x), x * ((batch - 1) * seq + 2))


# --- the README's recipe: GPT-2 and Llama styles, one compile, eager's tokens --------------

NEW_TOKENS = 32
PROMPT = np.array([[5, 17, 42, 7, 99]], np.int64)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """The README's blocks run as written (in a scratch directory): its GPT-2 example
    asserts eager's tokens; its names serve the tests below."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    namespace = decoder_recipe.definitions()
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("readme"))
    try:
        for block in decoder_recipe.blocks()[1:]:
            exec(compile(block, str(decoder_recipe.README), "exec"), namespace)
    finally:
        os.chdir(here)
    return namespace


@pytest.fixture(scope="module")
def exported(recipe, tmp_path_factory):
    """{style: (model, path)}, each exported once by the recipe's `export`."""
    found = {}
    for style in ("gpt2", "llama"):
        model = decoder_recipe.decoder(style)
        path = tmp_path_factory.mktemp(style) / "decoder.onnx"
        recipe["export"](model, str(path))
        found[style] = (model, path)
    return found


def test_the_readme_recipe_runs_and_compiles_once(recipe):
    compiled = recipe["compiled"]
    assert recipe["tokens"] == recipe["eager"][0, PROMPT.shape[1]:].tolist()
    # one plan per length met (the prompt's empty cache, then one more each token)
    assert compiled._runner.stats["misses"] == NEW_TOKENS
    assert "compiled per binding" not in compiled.report.summary()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_greedy_generation_gives_eager_tokens(recipe, exported, style, backend):
    import torch
    model, path = exported[style]
    compiled = legato.compile(str(path), backend)  # the only compile of the loops
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def checked(*inputs):  # every step's logits and cache against onnxruntime
        got = compiled(*inputs)
        for g, w in zip(got, session.run(None, dict(zip(names, inputs)))):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        return got
    with torch.no_grad():
        eager = model.generate(torch.from_numpy(PROMPT), do_sample=False,
                               max_new_tokens=NEW_TOKENS)[0, PROMPT.shape[1]:].tolist()
    assert len(set(eager)) > 4  # weights large enough that the tokens vary
    assert recipe["generate"](checked, model.config, PROMPT, NEW_TOKENS) == eager
    # the cache padded in buckets of 8: masked slots change no token, the loop meets 6
    # lengths (the prompt at past 8, then past 8, 16, 24, 32, 40) and a second loop
    # plans none
    met = set()

    def bucketed(*inputs):
        met.add((inputs[3].shape[2], inputs[0].shape[1]))
        return checked(*inputs)
    assert recipe["generate"](bucketed, model.config, PROMPT, NEW_TOKENS, bucket=8) == eager
    assert sorted(met) == [(8, 1), (8, 5), (16, 1), (24, 1), (32, 1), (40, 1)]
    misses = compiled._runner.stats["misses"]
    assert recipe["generate"](compiled, model.config, PROMPT, NEW_TOKENS, bucket=8) == eager
    assert compiled._runner.stats["misses"] == misses
