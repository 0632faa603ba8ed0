"""Models with symbolic dimensions compiled once and run at every size: ONNX dim_params
kept as symbols, shape arithmetic (Shape -> Gather -> Concat -> Reshape) folded into
symbolic reshape targets, one plan per binding."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def head_split_model():
    """What exporters write for attention's head split: the target from the input's Shape."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8))
                                .astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Shape", ["h"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
             helper.make_node("Concat", ["b", "s", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["h", "target"], ["h4"]),
             helper.make_node("Transpose", ["h4"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Mul", ["b", "s"], ["bs"]),
             helper.make_node("Concat", ["bs", "minus1"], ["flat"], axis=0),
             helper.make_node("Reshape", ["t", "flat"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, ints("i0", [0]), ints("i1", [1]), ints("heads", [2, 4]), ints("minus1", [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_arithmetic_becomes_symbolic_reshape_targets():
    module = onnx_frontend.load(head_split_model())
    reshapes = [c for c in module.main.calls if c.op == "reshape"]
    assert [str(c.outputs[0].type) for c in reshapes] == ["float32[batch, seq, 2, 4]",
                                                          "float32[batch*seq, 8]"]
    assert legato.parse(str(module)).main.results[0].type == module.main.results[0].type


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_one_compile_matches_onnxruntime_at_every_size(backend):
    model = head_split_model()
    compiled = legato.compile(onnx_frontend.load(model), backend)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for shape in [(1, 8, 8), (3, 16, 8), (1, 33, 8), (2, 1, 8)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(compiled(x), session.run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)
    assert compiled._runner.stats["misses"] == 4


def test_sizes_read_as_data_are_computed_at_run_time():
    """Shape -> Cast -> ReduceSum: batch + 4 as a float, computed from the bound sizes."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape_of_x"),
             helper.make_node("Cast", ["shape"], ["f"], to=TensorProto.FLOAT, name="to_float"),
             helper.make_node("ReduceSum", ["f"], ["n"], keepdims=0, name="count"),
             helper.make_node("Mul", ["x", "n"], ["y"], name="scale")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = legato.compile(onnx_frontend.load(model), "c_kernels")
    for batch in (1, 2, 5):
        x = np.ones((batch, 4), np.float32)
        np.testing.assert_allclose(compiled(x), x * (batch + 4))


def tiny_bert(positions: int, **options):
    """A 2-layer BERT 32 wide (random weights, seed 0) returning its last hidden state."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=positions, **options)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(ids).last_hidden_state
    return Hidden().eval()


@pytest.fixture(scope="module")
def dynamic_bert(tmp_path_factory):
    """A tiny BERT exported as people export it: batch and sequence as dynamic axes."""
    torch = pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    with torch.no_grad():
        torch.onnx.export(tiny_bert(130, attn_implementation="eager"),
                          (torch.randint(4, 100, (2, 16)),), str(path),
                          input_names=["ids"], output_names=["y"], opset_version=17,
                          dynamo=False, dynamic_axes={"ids": {0: "batch", 1: "seq"}})
    return path


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_a_dynamic_bert_compiles_once_and_runs_at_every_size(dynamic_bert, backend):
    compiled = legato.compile(str(dynamic_bert), backend)  # no input_shapes
    assert [str(p.type) for p in compiled.module.main.params] == ["int64[batch, seq]"]
    # legalized once over the symbols; only the gather of the position table (whose
    # decomposition builds constants of the indices' size) waits for the sizes
    summary = compiled.report.summary()
    assert "1 calls (gather_elements) need their symbolic dims bound" in summary
    assert "compiled per binding" not in summary
    session = ort.InferenceSession(str(dynamic_bert), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in [(1, 8), (3, 16), (1, 33), (3, 64), (1, 128), (2, 130)]:
        ids = rng.integers(4, 100, shape).astype(np.int64)
        np.testing.assert_allclose(compiled(ids), session.run(None, {"ids": ids})[0],
                                   rtol=1e-4, atol=1e-4)
    # the position table holds 130 rows: the import's guard names the limit
    with pytest.raises(legato.ExecutionError, match=r"assuming seq<=130.*seq=131 breaks"):
        compiled(np.ones((1, 131), np.int64))


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_torch_export_dynamic_shapes_compile_once_and_match_eager(backend):
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as torch_frontend

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj, self.norm = torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)

        def forward(self, x):
            b, n, d = x.shape
            h = self.proj(self.norm(x)).view(b, n, 4, 4).transpose(1, 2)
            mixed = torch.softmax(h @ h.transpose(-1, -2) / 2.0, dim=-1) @ h
            return mixed.transpose(1, 2).reshape(b, n, d) + x

    model = Block().eval()
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=128)
    module = torch_frontend.load(model, (torch.randn(2, 8, 16),),
                                 dynamic_shapes=({0: batch, 1: seq},))
    assert module.main.params[0].type.symbolic
    limits = sorted(g.split("<=")[1] for g in module.main.attrs["guards"])
    assert limits == ["128", "64"]  # torch.export's ranges are the model's guards
    compiled = legato.compile(module, backend)
    for shape in [(1, 5, 16), (3, 17, 16), (2, 8, 16)]:
        x = torch.randn(*shape)
        np.testing.assert_allclose(compiled(x.numpy()), model(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(legato.ExecutionError, match="<=128"):
        compiled(np.ones((1, 129, 16), np.float32))


@pytest.fixture(scope="module")
def exported_bert():
    """A tiny BERT through torch.export with the user's Dims for batch and sequence."""
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as torch_frontend
    hidden = tiny_bert(160)  # (transformers' default attention: sdpa)
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=128)
    module = torch_frontend.load(hidden, (torch.randint(4, 100, (2, 16)),),
                                 dynamic_shapes=({0: batch, 1: seq},))
    return hidden, module


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_torch_export_bert_with_dims_runs_at_every_size(exported_bert, backend):
    torch = pytest.importorskip("torch")
    hidden, module = exported_bert
    # the Dims' names, not torch's s0/s1; the position table's slice and the causal-mask
    # aranges over seq become symbolic calls, not constants of the example's size
    assert [str(p.type) for p in module.main.params] == ["int64[batch, seq]"]
    assert {"batch<=64", "seq<=128"} <= set(module.main.attrs["guards"])
    compiled = legato.compile(module, backend)
    generator = torch.Generator().manual_seed(0)
    for batch, seq in [(1, 8), (3, 16), (1, 33), (3, 64), (1, 128)]:
        ids = torch.randint(4, 100, (batch, seq), generator=generator)
        with torch.no_grad():
            want = hidden(ids).numpy()
        np.testing.assert_allclose(compiled(ids.numpy()), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(legato.ExecutionError, match=r"seq<=128.*seq=129 breaks"):
        compiled(np.ones((1, 129), np.int64))


def test_arange_over_symbolic_sizes_counts_at_run_time():
    """torch.arange(past, past + seq) (a decoder's cache positions), a constant start
    and a step over a symbolic end, including an empty past."""
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as torch_frontend

    class Positions(torch.nn.Module):
        def forward(self, past, x):
            p, n = past.shape[1], x.shape[1]
            return x + torch.arange(p, p + n) + torch.arange(3, n + 3), torch.arange(0, n, 2)

    dims = ({1: torch.export.Dim("past", max=100)},
            {1: torch.export.Dim("seq", min=3, max=64)})
    model = Positions()
    module = torch_frontend.load(model, (torch.zeros(1, 5), torch.zeros(1, 7)),
                                 dynamic_shapes=dims)
    compiled = legato.compile(module, "c_kernels")
    for past, seq in [(2, 3), (0, 5), (9, 4), (5, 64)]:
        inputs = torch.zeros(1, past), torch.randn(1, seq)
        for got, want in zip(compiled(*(t.numpy() for t in inputs)), model(*inputs)):
            np.testing.assert_array_equal(got, want.numpy())
