"""The ONNX importer: model checks, input binding, constants, folding and the CLI."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato import LegatoError  # noqa: E402
from legato.cli.commands import main as cli  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def mlp():
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["y"], name="relu"),
             helper.make_node("Softmax", ["h"], ["z"], name="sm", axis=-1)]
    return model(nodes, [tensor("x", ["batch", 3])], [tensor("y", None), tensor("z", None)], [w])


def test_load_binds_symbolic_dims_and_keeps_several_outputs():
    mod = onnx_frontend.load(mlp(), input_shapes={"batch": 2})
    assert [p.type.shape for p in mod.main.params] == [(2, 3)]
    assert [r.type.shape for r in mod.main.results] == [(2, 4), (2, 4)]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    y, z = legato.compile(mod, "cpu_ref")(x)
    h = x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 10)
    np.testing.assert_allclose(y, np.maximum(h, 0), rtol=1e-6)
    np.testing.assert_allclose(z.sum(-1), 1.0, rtol=1e-6)


def test_whole_input_shape_binding_and_unbound_dims_are_symbols():
    assert onnx_frontend.load(mlp(), {"x": (5, 3)}).main.params[0].type.shape == (5, 3)
    assert str(onnx_frontend.load(mlp()).main.params[0].type) == "float32[batch, 3]"
    unnamed = mlp()
    unnamed.graph.input[0].type.tensor_type.shape.dim[0].Clear()  # neither size nor name
    assert str(onnx_frontend.load(unnamed).main.params[0].type) == "float32[x_0, 3]"


def test_compile_binds_symbolic_dims_of_a_model_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    compiled = legato.compile(path, "cpu_ref", input_shapes={"batch": 3})
    assert [p.type.shape for p in compiled.module.main.params] == [(3, 3)]
    with pytest.raises(LegatoError, match="input_shapes binds the symbolic dimensions of an "
                                          r"\.onnx file; a legato.Module has none"):
        legato.compile(onnx_frontend.load(mlp(), {"batch": 1}), input_shapes={"batch": 2})


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_one_compile_runs_at_every_batch_size(backend):
    import onnxruntime
    compiled = legato.compile(onnx_frontend.load(mlp()), backend)
    session = onnxruntime.InferenceSession(mlp().SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    for batch in (1, 3, 8, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
        for got, want in zip(compiled(x), session.run(None, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert compiled._runner.stats["misses"] == 3 and compiled._runner.stats["hits"] == 1
    with pytest.raises(legato.ExecutionError, match=r"input 'x' must be float32\[batch, 3\], "
                                                    r"got shape \[2, 4\]"):
        compiled(np.ones((2, 4), np.float32))


def test_emitters_and_partitioned_builds_ask_for_sizes():
    module = onnx_frontend.load(mlp())
    with pytest.raises(LegatoError, match=r"backend tosa_custom, which emits code, needs "
                                          r"concrete shapes.*input_shapes=\{'batch': \.\.\.\}"):
        legato.compile(module, "tosa_custom")
    with pytest.raises(LegatoError, match="a partitioned build needs concrete shapes"):
        legato.compile(module, ["c_kernels", "cpu_ref"])


def test_unsupported_ops_are_listed_together_with_node_names():
    nodes = [helper.make_node("BitCast", ["x"], ["a"], name="m1", to=TensorProto.INT32),
             helper.make_node("BitCast", ["a"], ["b"], name="m2", to=TensorProto.FLOAT),
             helper.make_node("Relu", ["b"], ["c"], name="ok"),
             helper.make_node("Frob", ["c"], ["y"], name="f1", domain="acme")]
    bad = model(nodes, [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(LegatoError) as info:
        onnx_frontend.load(bad)
    text = str(info.value)
    assert "2 ONNX op type(s)" in text and "BitCast: m1, m2" in text and "acme.Frob: f1" in text


def test_a_tensor_whose_data_does_not_match_its_size_is_refused():
    w = TensorProto(name="w", data_type=F, dims=[3, 4], raw_data=bytes(20))  # 5 floats
    bad = model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [3, 4])],
                [tensor("y", [3, 4])], [w])
    with pytest.raises(LegatoError, match=r"initializer 'w': declares shape \[3, 4\] of "
                                          r"float32 \(48 bytes\) but holds 20 bytes"):
        onnx_frontend.load(bad)


def test_shapes_that_do_not_infer_are_refused():
    bad = model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                [tensor("a", [2, 3]), tensor("b", [4, 5])], [tensor("y", None)])
    with pytest.raises(LegatoError, match="shapes do not infer"):
        onnx_frontend.load(bad)


def test_unreadable_files_and_opsets_are_refused(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x00not a model")
    with pytest.raises(LegatoError, match="junk.onnx"):
        onnx_frontend.load(path)
    newest = onnx.defs.onnx_opset_version()
    relu = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])],
                 [tensor("y", [2])], opset=newest + 1)
    with pytest.raises(LegatoError, match=f"opset {newest + 1} is not supported"):
        onnx_frontend.load(relu)


def test_old_opsets_are_upgraded():
    old = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])],
                [tensor("y", [2])], opset=9)
    assert [c.op for c in onnx_frontend.load(old).main.calls] == ["nn.relu"]


def test_shape_arithmetic_on_constants_is_folded_for_reshape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    mod = onnx_frontend.load(model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], inits))
    assert [c.op for c in mod.main.calls] == ["reshape"]
    assert mod.main.results[0].type.shape == (2, 12)


def shape_arithmetic_model():
    """y = reshape(x, [n * 2 // 2 * (c - 0), -1]) with n, c read from Shape(x) and a Slice."""
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Slice", ["s", "one", "two"], ["c"]),
             helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["cf"], ["ci"], to=TensorProto.INT64),
             helper.make_node("Mul", ["n", "two_s"], ["n2"]),
             helper.make_node("Div", ["n2", "two_s"], ["n3"]),
             helper.make_node("Sub", ["ci", "zero1"], ["c2"]),
             helper.make_node("Unsqueeze", ["n3", "axes"], ["n4"]),
             helper.make_node("Mul", ["n4", "c2"], ["rows"]),
             helper.make_node("Concat", ["rows", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [i64("zero", 0), i64("one", [1]), i64("two", [2]), i64("two_s", 2),
             i64("zero1", [0]), i64("axes", [0]), i64("minus1", [-1])]
    return model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], inits)


def test_shape_folding_needs_no_backend(monkeypatch):
    # the importer folds in the core: with cpu_ref (or any backend) gone it folds the same
    for name in list(legato.context().backends):
        monkeypatch.delitem(legato.context().backends, name)
    assert legato.list_backends() == []
    mod = onnx_frontend.load(shape_arithmetic_model())
    assert [c.op for c in mod.main.calls] == ["reshape"]
    assert mod.main.calls[0].attrs["shape"] == [6, -1]
    assert mod.main.results[0].type.shape == (6, 4)


def test_sizes_computed_in_float_fold_too():
    # Resize-style shape code: half of each spatial size, through float and back
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "one", "big"], ["hw"]),
             helper.make_node("Cast", ["hw"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "half"], ["h"]),
             helper.make_node("Floor", ["h"], ["fl"]),
             helper.make_node("Cast", ["fl"], ["i"], to=TensorProto.INT64),
             helper.make_node("Concat", ["first", "i"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("one", [1]), ("big", [99]), ("first", [12]))]
    inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
    mod = onnx_frontend.load(model(nodes, [tensor("x", [3, 4, 6])], [tensor("y", None)], inits))
    assert [c.op for c in mod.main.calls] == ["reshape"]
    assert mod.main.results[0].type.shape == (12, 2, 3)


def test_folding_gives_up_on_what_it_cannot_compute_exactly():
    from legato.frontends.common.fold import FOLD_MAX_ELEMENTS, fold_calls
    b = legato.GraphBuilder()
    ints = lambda values: b.const(np.array(values, np.int64))  # noqa: E731
    quotient = b.call("divide", ints([7, -7]), ints([2, 2]))
    assert fold_calls(b.calls, [quotient], b.registry)[0].tolist() == [3, -3]  # truncates
    zero = b.call("divide", ints([1]), ints([0]))
    big = b.call("add", ints(np.zeros(FOLD_MAX_ELEMENTS + 1)), ints(1))
    erf = b.call("erf", b.const(np.zeros(2, np.float32)))
    for value in (zero, big, erf):
        call = next(c for c in b.calls if c.outputs[0] is value)
        assert fold_calls([call], [value], b.registry) is None


def test_a_runtime_shape_operand_is_a_clear_error():
    bad = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                [tensor("x", [2, 3]), tensor("s", [2], TensorProto.INT64)], [tensor("y", None)])
    with pytest.raises(LegatoError, match="Reshape node 'r': input 1 .* must be a constant"):
        onnx_frontend.load(bad)


def test_load_model_and_cli_read_onnx_files(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    relu = model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Gelu", ["h"], ["y"])],
                 [tensor("x", [2, 3])], [tensor("y", [2, 3])], opset=20)
    onnx.save(relu, str(path))
    assert [c.op for c in legato.load_model(str(path)).main.calls] == ["nn.relu", "nn.gelu"]
    assert cli(["compile", str(path), "--backend", "cpu_ref"]) == 0
    err = capsys.readouterr().err
    assert "ONNX op coverage for cpu_ref" in err and "Gelu" in err
    assert cli(["run", str(path), "--backend", "cpu_ref"]) == 0


# --- core fixes found by the conformance tests -----------------------------------------------

def test_pad_of_bfloat16_accepts_infinite_values():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 2), "bfloat16")
    out = b.call("pad", x, pads=[0, 0, 0, 1], value=float("-inf"))
    assert out.type.shape == (2, 3)


def test_cpu_ref_casts_to_bfloat16():
    b = legato.GraphBuilder()
    x = b.input("x", (3,), "float32")
    y = legato.compile(b.build(b.call("cast", x, dtype="bfloat16")), "cpu_ref")(
        np.array([1.0, 2.5, -3.0], np.float32))
    assert y.dtype.name == "bfloat16" and y.astype(np.float32).tolist() == [1.0, 2.5, -3.0]


def test_benchmark_models_match_onnxruntime():
    pytest.importorskip("onnxruntime")
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parent.parent / "benchmarks" / "models.py"
    spec = importlib.util.spec_from_file_location("benchmark_models", path)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    for name in models.MODELS:
        for backend, error, _, _ in models.compare_with_onnxruntime(name):
            assert error < 1e-4, (name, backend, error)
