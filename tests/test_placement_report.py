"""A backend author's view of placement (issue 25): an NPU plugin installed as an entry
point, a tiny transformers BERT compiled for it alone and partitioned with cpu_ref, and
the placement and cost report (per backend calls, FLOPs and bytes; transitions; what to
implement next), checked against numbers computed here from the shapes."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

import legato
from legato.frontends import onnx as onnx_frontend
from legato.testing.plugins import plugin_module
from tests.test_onnx_contrib import BATCH, TOKENS, hf_model
from tests.test_onnx_quantized import qdq_product_model, run_ort

LEGAL = {"matmul": {}, "nn.linear": {}, "nn.layer_norm": {"attrs": {"axes": [-1]}},
         "nn.softmax": {"attrs": {"axis": -1}}, "nn.gelu": {}, "nn.attention": {}}
KEEP = "backends:\n  author_npu:\n    keep: [nn.layer_norm, nn.attention]\n"
LAYERS, HIDDEN, HEADS = 1, 32, 4  # of test_onnx_contrib's tiny BERT


def install_npu(install_plugins, legal=LEGAL):
    def register(register):
        register({"backend": "author_npu", "executes": True, "fallback": "cpu_ref",
                  "kernels": "legato_cpu_ref.kernels:KERNELS", "legal": legal})
    return install_plugins({"author_npu": plugin_module(legato_register_backends=register)})


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """(path of a tiny BERT's ONNX export, feeds, its torch model, eager result)."""
    torch = pytest.importorskip("torch")
    hidden, inputs = hf_model("bert")
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    with torch.no_grad():
        eager = hidden(*inputs).numpy()
        torch.onnx.export(hidden, inputs, str(path), input_names=["ids", "mask"],
                          output_names=["hidden"], opset_version=17, dynamo=False)
    return path, tuple(t.numpy() for t in inputs), hidden.model, eager


@pytest.fixture
def npu_yaml(tmp_path):
    path = tmp_path / "npu.yaml"
    path.write_text(KEEP)
    return str(path)


def torch_blocks(model):
    """How many layer norms and attention blocks the torch model has."""
    import torch
    norms = sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    attention = sum(type(m).__name__.endswith("SelfAttention") for m in model.modules())
    return norms, attention


def test_single_and_partitioned_builds_keep_the_same_blocks_on_the_npu(
        install_plugins, bert, npu_yaml):
    install_npu(install_plugins)
    path, feeds, model, eager = bert
    norms, attention = torch_blocks(model)
    assert (norms, attention) == (2 * LAYERS + 1, LAYERS)
    single = legato.compile(str(path), "author_npu", npu_yaml)
    parted = legato.compile(str(path), ["author_npu", "cpu_ref"], npu_yaml)
    for compiled in (single, parted):
        npu = compiled.report.per_backend["author_npu"]
        assert npu["nn.layer_norm"] == norms and npu["nn.attention"] == attention
        assert npu["nn.gelu"] == LAYERS  # recomposed: no erf left for the CPU
        ran = {op for counts in compiled.report.per_backend.values() for op in counts}
        assert "erf" not in ran and "nn.softmax" not in ran
        np.testing.assert_allclose(compiled(*feeds), eager, rtol=1e-4, atol=1e-4)
    # one flow: the partitioned build places every call where the single build does
    assert parted.report.per_backend == single.report.per_backend
    one, two = single.report.placement.to_json(), parted.report.placement.to_json()
    assert one["transitions"]["count"] == two["transitions"]["count"] > 0
    assert "backend transitions" in single.report.summary()
    assert Counter(c["source"] for c in one["calls"]) == \
        Counter(c["source"] for c in two["calls"])
    # the ONNX op coverage counts a node as fallback when a call made from it runs off
    # the NPU: the same in both flows (the partitioned one counted cpu_ref's as native)
    _, nodes = onnx_frontend.load_with_nodes(str(path))
    rows = [{line.split()[0]: line.split()[1:] for line in
             onnx_frontend.coverage(nodes, c.report).splitlines()[2:]}
            for c in (single, parted)]
    assert rows[0] == rows[1]
    assert rows[0]["LayerNormalization"][0] == str(norms)  # native
    assert rows[0]["Add"][3] == str(single.report.per_backend["cpu_ref"]["add"])  # fallback
    regions = [f for f in parted.module.functions.values() if f.kind == "external"]
    npu_regions = [f for f in regions if f.attrs["codegen"] == "author_npu"]
    assert sum(c.op == "nn.attention" for f in npu_regions for c in f.calls) == attention


def test_report_json_numbers_come_from_the_shapes(install_plugins, bert, npu_yaml, tmp_path):
    from legato import cli
    install_npu(install_plugins)
    path, _, _, _ = bert
    out = tmp_path / "report.json"
    assert cli.main(["compile", str(path), "-b", "author_npu,cpu_ref", "-c", npu_yaml,
                     "--report-json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {"schema", "model", "targets", "backends", "totals", "transitions",
            "implement_next", "calls"} <= set(report)
    assert report["targets"] == ["author_npu", "cpu_ref"]
    calls = report["calls"]
    # the ONNX node names are the calls' sources; a query projection is a
    # (batch, tokens, hidden) x (hidden, hidden) matmul
    [query] = [c for c in calls if c["source"] == "/model/encoder/layer.0/attention/self/"
                                                   "query/MatMul"]
    assert query["op"] == "matmul" and query["backend"] == "author_npu"
    rows = BATCH * TOKENS
    assert query["flops"] == 2 * rows * HIDDEN * HIDDEN and query["flops_estimated"] == 0
    assert query["bytes"] == 4 * (rows * HIDDEN + HIDDEN * HIDDEN + rows * HIDDEN)
    head = HIDDEN // HEADS
    scores = BATCH * HEADS * TOKENS * TOKENS
    [att] = [c for c in calls if c["op"] == "nn.attention"][:1]
    assert att["flops"] == 4 * scores * head + 5 * scores
    assert att["flops_estimated"] == 5 * scores
    # a recomposed call names the node whose result it computes, and what it replaced
    assert att["source"].startswith("/model/encoder/layer.0/attention/self/")
    assert "(recompose of " in att["source"]
    for name, row in report["backends"].items():
        mine = [c for c in calls if c["backend"] == name]
        assert row["calls"] == len(mine)
        assert row["flops"] == sum(c["flops"] for c in mine)
        assert row["bytes"] == sum(c["bytes"] for c in mine)
    assert report["totals"]["calls"] == len(calls)
    edges = report["transitions"]["edges"]
    assert report["transitions"]["count"] == len(edges)
    assert report["transitions"]["bytes"] == sum(e["bytes"] for e in edges)
    top = report["implement_next"][0]
    assert top["op"] == "add" and top["runs_on"] == {"cpu_ref": top["calls"]}


def chain():
    """x -> matmul -> exp -> matmul: with exp off the NPU, two transitions."""
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8))
    w = b.input("w", (8, 8))
    return b.build(b.call("matmul", b.call("exp", b.call("matmul", x, w)), w))


def test_transitions_and_implement_next_of_a_chain(install_plugins):
    install_npu(install_plugins, {"matmul": {}})
    compiled = legato.compile(chain(), "author_npu")
    placement = compiled.report.placement.to_json()
    assert placement["transitions"]["count"] == 2
    assert placement["transitions"]["bytes"] == 2 * 4 * 8 * 4
    assert [(e["from"], e["to"], e["op"]) for e in placement["transitions"]["edges"]] == [
        ("author_npu", "cpu_ref", "matmul"), ("cpu_ref", "author_npu", "exp")]
    [row] = placement["implement_next"]
    assert (row["op"], row["calls"], row["flops"], row["transitions_removed"]) == \
        ("exp", 1, 4 * 8, 2)
    npu = placement["backends"]["author_npu"]
    assert (npu["calls"], npu["flops"]) == (2, 2 * (2 * 4 * 8 * 8))
    text = str(compiled.report)
    assert "transitions: 2" in text and "implement next on author_npu" in text


def test_conv_flops_from_its_shapes():
    from legato.legalization.placement import call_flops
    b = legato.GraphBuilder()
    x = b.input("x", (2, 6, 9, 9))
    w = b.input("w", (4, 3, 3, 3))
    bias = b.input("bias", (4,))
    call = b.build(b.call("nn.conv2d", x, w, bias, groups=2, strides=[2, 2])).main.calls[0]
    out = 2 * 4 * 4 * 4  # (9 - 3) / 2 + 1 = 4
    assert call_flops(call, legato.context().registry) == (2 * out * 3 * 3 * 3 + out, 0)


def test_show_draws_bert_attention_whole_and_the_placement_table_aside(
        install_plugins, bert, npu_yaml):
    from legato.show import graph
    from legato.show.dot import dot_text
    from legato.show.svg import svg_text
    install_npu(install_plugins)
    path, _, _, _ = bert
    picture = graph(str(path), "author_npu", npu_yaml)
    attention = [n for n in picture.after.nodes if n.label == "nn.attention"]
    assert [(n.kind, n.cluster) for n in attention] == [("kept", "")] * LAYERS
    assert not any("attention" in label for label in picture.after.clusters.values())
    query = "from /model/encoder/layer.0/attention/self/query/MatMul"  # the ONNX node
    assert any(n.tooltip.endswith(query) for n in picture.after.nodes if n.label == "matmul")
    compiled = legato.compile(str(path), "author_npu", npu_yaml)
    transitions = compiled.report.placement.to_json()["transitions"]["count"]
    assert any(f"transitions: {transitions}," in line for line in picture.table)
    assert "implement next on author_npu" in svg_text(picture)
    assert "implement next on author_npu" in dot_text(picture)


@pytest.mark.parametrize("dtype", ["UINT8", "BFLOAT16"])
def test_tosa_dtype_errors_name_the_onnx_node(tmp_path, dtype):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    kind = getattr(TensorProto, dtype)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"], name="encoder/block_3/add")], "g",
        [helper.make_tensor_value_info("x", kind, [2, 3])],
        [helper.make_tensor_value_info("y", kind, [2, 3])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(legato.LegalizationError, match=r"at encoder/block_3/add\)"):
        legato.compile(str(path), "tosa_custom")


def test_partitioned_build_folds_qdq_and_reports_it(install_plugins):
    """The QDQ folding compile runs applies to a partitioned build too, and its report
    says what folded."""
    install_npu(install_plugins, {"matmul": {}})
    model, feeds = qdq_product_model("Relu", "int8", False)
    compiled = legato.compile(onnx_frontend.load(model), ["author_npu", "cpu_ref"])
    assert dict(compiled.report.qdq.folded) == {"qnn.matmul": 1}
    assert "folded QDQ into qnn.matmul x1" in compiled.report.summary()
    np.testing.assert_allclose(compiled(*feeds.values()), run_ort(model, feeds)[0], rtol=0,
                               atol=1e-6)


def test_implement_next_names_the_op_a_fallback_call_was_decomposed_from(install_plugins):
    install_npu(install_plugins, {"matmul": {}, "divide": {}, "subtract": {}})
    b = legato.GraphBuilder()
    x, w = b.input("x", (4, 8)), b.input("w", (8, 8))
    module = b.build(b.call("matmul", b.call("nn.softmax", b.call("matmul", x, w), axis=-1),
                            w))
    ranked = legato.compile(module, "author_npu").report.placement.implement_next()
    assert {r["op"] for r in ranked} == {"max", "exp", "sum"}
    assert all(r["decomposed_from"] == {"nn.softmax": 1} for r in ranked)
    assert ranked[-1]["transitions_after"] == 0


def test_partitioned_build_takes_backend_objects_and_refuses_an_emitting_last_backend(
        backend_factory):
    emitter = backend_factory({"backend": "emit_npu", "executes": False,
                               "legal": {"matmul": {}}}, emitter=str)
    compiled = legato.compile(chain(), [emitter, legato.get_backend("cpu_ref")])
    assert compiled.report.placement.targets == ("emit_npu", "cpu_ref")
    assert compiled.report.per_backend == {"emit_npu": {"matmul": 2}, "cpu_ref": {"exp": 1}}
    # what no region claims (tosa_custom's lowerings of the folded qnn.matmul) stays in
    # main, which runs on the last backend
    module = onnx_frontend.load(qdq_product_model("Relu", "int8", False)[0])
    with pytest.raises(legato.LegatoError, match=r"on its last backend, and tosa_custom "
                                                 r"emits code: end the list with an "
                                                 r"executing backend, e\.g\. emit_npu,"
                                                 r"tosa_custom,cpu_ref"):
        legato.compile(module, ["emit_npu", "tosa_custom"])


def test_torch_calls_name_the_line_of_the_model_that_made_them():
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as torch_frontend

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.proj(x)) + 1  # the line every call names

    line = next(i for i, text in enumerate(open(__file__), 1) if "the line every call" in text)
    module = torch_frontend.load(Block(), (torch.randn(2, 4),))
    compiled = legato.compile(module, "c_kernels")
    sources = {c["op"]: c["source"] for c in compiled.report.placement.to_json()["calls"]}
    assert sources == {op: f"{name} (test_placement_report.py:{line})" for op, name in
                       [("nn.linear", "linear"), ("nn.relu", "relu"), ("add", "add")]}
