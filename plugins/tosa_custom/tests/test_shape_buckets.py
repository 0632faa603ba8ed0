"""Shape buckets on tosa_custom: a model with symbolic dims (ONNX dim_params) emitted as one
TOSA module with a function per binding the user asks for (`shape_buckets=`, `--shape
seq=8,16`), each validated by tosa-opt, marked with its sizes, and run by the TOSA
reference model against cpu_ref, onnxruntime and numpy at its sizes."""
from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.cli.commands import main as cli_main  # noqa: E402
from legato.cli.model import parse_shapes  # noqa: E402
from legato_tosa_custom.buckets import functions, parameter_shapes  # noqa: E402
from legato_tosa_custom.tools import ToolError  # noqa: E402

W = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
BINDINGS = re.compile(r'sym_name = "(\w+)"\}>.*?\}\) \{legato\.shape_bindings = \{([^}]*)\}\}',
                      re.S)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """softmax(x @ w) - mean of x over the sequence: x is float32[batch, seq, 8]."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Softmax", ["h"], ["p"], axis=-1),
             helper.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
             helper.make_node("Sub", ["p", "m"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "w")])
    path = tmp_path_factory.mktemp("small") / "small.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def numpy_small(x):
    h = x @ W
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) - x.mean(1, keepdims=True)


def recorded(text) -> dict:
    """Function name -> its legato.shape_bindings, read from the text."""
    return {name: dict((k.strip(), int(v.split(":")[0]))
                       for k, _, v in (item.partition("=") for item in body.split(",")))
            for name, body in BINDINGS.findall(text)}


def test_every_combination_is_a_validated_function_run_at_its_sizes(small_model, tools):
    compiled = legato.compile(str(small_model), "tosa_custom",
                              shape_buckets={"batch": [1, 3], "seq": [2, 5]})
    text = compiled.artifact
    assert recorded(text) == {f"main_batch{b}_seq{s}": {"batch": b, "seq": s}
                              for b in (1, 3) for s in (2, 5)}
    tools.validate(text)  # every function, strictly, at level 8K
    rng = np.random.default_rng(1)
    found = functions(text)
    for name in ("main_batch1_seq2", "main_batch3_seq5"):  # (each run takes a second)
        (shape,) = parameter_shapes(found[name])
        assert shape == (int(name[10]), int(name[-1]), 8)
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = tools.run_reference(text, [x])  # the function taking x's shape
        np.testing.assert_allclose(got, numpy_small(x), rtol=1e-5, atol=1e-5, err_msg=name)
    with pytest.raises(legato.LegatoError, match=r"no shape bucket .* \[\[2, 4, 8\]\].*"
                                                 r"main_batch1_seq2 \[\[1, 2, 8\]\]"):
        tools.run_reference(text, [np.zeros((2, 4, 8), np.float32)])


def test_each_bucket_is_the_module_legalized_over_the_symbols_at_its_sizes(small_model):
    """Without the TOSA tools: tosa_custom's checks (level 8K limits) need sizes, so its
    calls wait for them over the symbols, and each bucket's module is legal and concrete
    and computes the model at its sizes (simulated with numpy)."""
    from legato_tosa_custom.kernels import simulate
    compiled = legato.compile(str(small_model), "tosa_custom",
                              shape_buckets={"batch": 2, "seq": [1, 7]})
    assert [str(p.type) for p in compiled.module.main.params] == ["float32[batch, seq, 8]"]
    assert "need their symbolic dims bound" in compiled.report.summary()
    rng = np.random.default_rng(2)
    for bucket, seq in zip(compiled.buckets, (1, 7)):
        assert bucket.name == f"main_batch2_seq{seq}"
        assert bucket.bindings == {"batch": 2, "seq": seq}
        assert [p.shape for p in bucket.module.main.params] == [(2, seq, 8)]
        x = rng.standard_normal((2, seq, 8)).astype(np.float32)
        np.testing.assert_allclose(simulate(bucket.module)(x), numpy_small(x), rtol=1e-5,
                                   atol=1e-6)


def test_buckets_are_refused_naming_what_is_wrong(small_model):
    model = str(small_model)
    for buckets, why in [({"seq": [2, 5]}, r"leaves 'batch' symbolic"),
                         ({"batch": 1, "seq": 2, "len": [3]},
                          r"names 'len'.*symbolic dims are batch, seq"),
                         ({"batch": [1], "seq": [0, 2]}, r"shape_buckets\['seq'\].*>= 1"),
                         ({"batch": [1, 2], "seq": list(range(1, 34))},
                          r"66 functions \(every combination of 2 batch x 33 seq\)")]:
        with pytest.raises(legato.LegatoError, match=why):
            legato.compile(model, "tosa_custom", shape_buckets=buckets)
    with pytest.raises(legato.LegatoError, match=r"cpu_ref executes"):
        legato.compile(model, "cpu_ref", shape_buckets={"batch": 1, "seq": [2, 3]})
    with pytest.raises(legato.LegatoError, match=r"not of a partitioned build"):
        legato.compile(model, ["tosa_custom", "cpu_ref"], shape_buckets={"batch": 1, "seq": 2})
    with pytest.raises(legato.LegatoError, match=r"shape_buckets=\{'batch': \[\.\.\.\]\}"):
        legato.compile(model, "tosa_custom")  # symbolic, neither bound nor bucketed


def test_cli_shape_with_several_sizes_makes_buckets_and_one_size_binds(small_model, tmp_path,
                                                                      tools, capsys):
    assert parse_shapes(["seq=64,128,256", "batch=1"]) == {"seq": [64, 128, 256], "batch": 1}
    assert parse_shapes(["batch=1,seq=2,3"]) == {"batch": 1, "seq": [2, 3]}
    with pytest.raises(legato.LegatoError, match=r"--shape '2'"):
        parse_shapes(["x=1x3,2"])  # a whole input's shape takes one value
    out = tmp_path / "buckets.mlir"
    assert cli_main(["compile", str(small_model), "-b", "tosa_custom", "--shape",
                     "seq=2,5", "--shape", "batch=3", "-o", str(out), "--validate-run"]) == 0
    assert recorded(out.read_text()) == {"main_seq2": {"seq": 2}, "main_seq5": {"seq": 5}}
    printed = capsys.readouterr().out  # each bucket run against cpu_ref at its sizes
    assert re.search(r"main_seq2:\nresult 0: float32\[3, 2, 8\].*ok\nmain_seq5:\n"
                     r"result 0: float32\[3, 5, 8\].*ok", printed), printed
    assert cli_main(["compile", str(small_model), "-b", "tosa_custom", "--shape",
                     "seq=2,batch=3", "-o", str(out)]) == 0  # bound at import: one main
    assert list(functions(out.read_text())) == ["main"]


@pytest.fixture(scope="module")
def dynamic_bert(tmp_path_factory):
    """A tiny BERT (hidden states and pooled output; 40 positions) exported with batch and
    sequence as dynamic axes."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=40, attn_implementation="eager",
                                     return_dict=False)

    class Outputs(torch.nn.Module):  # (BertModel's own forward does not trace)
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, ids):
            hidden, pooled = self.bert(ids)[:2]
            return hidden, pooled
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    with torch.no_grad():
        torch.onnx.export(Outputs(transformers.BertModel(config).eval()),
                          (torch.randint(4, 100, (2, 16)),), str(path), input_names=["ids"],
                          output_names=["y", "pooled"], opset_version=17, dynamo=False,
                          dynamic_axes={"ids": {0: "batch", 1: "seq"}})
    return path


def test_dynamic_bert_buckets_validate_and_match_cpu_ref(dynamic_bert, tools):
    ort = pytest.importorskip("onnxruntime")
    compiled = legato.compile(str(dynamic_bert), "tosa_custom",
                              shape_buckets={"batch": 2, "seq": [5, 16]})
    assert [b.name for b in compiled.buckets] == ["main_batch2_seq5", "main_batch2_seq16"]
    assert recorded(compiled.artifact) == {"main_batch2_seq5": {"batch": 2, "seq": 5},
                                           "main_batch2_seq16": {"batch": 2, "seq": 16}}
    tools.validate(compiled.artifact)
    cpu_ref = legato.compile(str(dynamic_bert), "cpu_ref")  # one compile, any size
    session = ort.InferenceSession(str(dynamic_bert), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for seq in (5, 16):
        ids = rng.integers(4, 100, (2, seq)).astype(np.int64)
        got = tools.run_reference(compiled.artifact, [ids])
        for mine, ref, ort_out in zip(got, cpu_ref(ids), session.run(None, {"ids": ids})):
            np.testing.assert_allclose(mine, ref, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(mine, ort_out, rtol=1e-4, atol=1e-4)
        assert len(got) == 2
    # the position table has 40 rows: the import's guard refuses a bucket past it
    with pytest.raises(legato.LegatoError, match=r"main_batch2_seq41 breaks seq<=40"):
        legato.compile(str(dynamic_bert), "tosa_custom",
                       shape_buckets={"batch": 2, "seq": [16, 41]})


def test_torch_export_dims_make_buckets_within_their_ranges(tools):
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as torch_frontend

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.out = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)

        def forward(self, x):
            h = self.norm(x)
            return self.out(torch.softmax(h @ h.transpose(-1, -2) / 4, -1) @ h) + x
    torch.manual_seed(0)
    block = Block().eval()
    dims = {0: torch.export.Dim("batch", max=8), 1: torch.export.Dim("seq", max=64)}
    module = torch_frontend.load(block, (torch.randn(2, 8, 16),), dynamic_shapes=(dims,))
    text = legato.compile(module, "tosa_custom",
                          shape_buckets={"batch": 1, "seq": [3, 9]}).artifact
    assert list(recorded(text)) == ["main_batch1_seq3", "main_batch1_seq9"]
    tools.validate(text)
    for seq in (3, 9):
        x = torch.randn(1, seq, 16)
        (got,) = tools.run_reference(text, [x.numpy()])
        with torch.no_grad():
            np.testing.assert_allclose(got, block(x).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(legato.LegatoError, match=r"main_batch1_seq65 breaks seq<=64"):
        legato.compile(module, "tosa_custom", shape_buckets={"batch": 1, "seq": 65})


DYNAMIC_ADD = """"builtin.module"() ({
  "func.func"() <{function_type = (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>, \
sym_name = "main"}> ({
  ^bb0(%arg0: tensor<?x4xf32>, %arg1: tensor<?x4xf32>):
    %0 = "tosa.add"(%arg0, %arg1) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
    "func.return"(%0) : (tensor<?x4xf32>) -> ()
  }) : () -> ()
}) : () -> ()
"""


def test_tosa_opt_refuses_dynamic_dims_at_tosa_1_0_level_8k(tools):
    """What plugins/tosa_custom/README.md says: TOSA 1.0 at level 8K (what tosa_custom
    targets) has no dynamic dimension, even for an element-wise add; hence the buckets."""
    with pytest.raises(ToolError, match=r"shape dimension cannot be dynamic"):
        tools.validate(DYNAMIC_ADD)
