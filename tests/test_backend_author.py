"""A backend author's view (issue 25): an NPU plugin, installed as an entry point the way
a team ships one, and what legato tells its author about the capability file."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.testing.plugins import plugin_module

CPU_KERNELS = "legato_cpu_ref.kernels:KERNELS"


def npu_capability(legal, **extra):
    cap = {"backend": "author_npu", "executes": True, "fallback": "cpu_ref",
           "legal": legal, "kernels": CPU_KERNELS}
    cap.update(extra)
    return cap


def install_npu(install_plugins, capability):
    def register(register):
        register(capability)
    return install_plugins({"author_npu": plugin_module(legato_register_backends=register)})


def norm_softmax_module():
    """A rank-3 layer norm over axes [2] (as the ONNX importer writes it) and a rank-2
    softmax over axis 1."""
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3, 4))
    y = b.call("nn.layer_norm", x, axes=[2])
    z = b.call("nn.softmax", b.input("s", (3, 5)), axis=1)
    return b.build(y, z)


def test_axis_conditions_match_the_call_s_axes_in_either_form(install_plugins):
    install_npu(install_plugins, npu_capability({
        "nn.layer_norm": {"attrs": {"axes": [-1]}}, "nn.softmax": {"attrs": {"axis": -1}}}))
    low = legato.legalize(norm_softmax_module(), backend="author_npu")
    assert sorted(c.op for c in low.module.main.calls) == ["nn.layer_norm", "nn.softmax"]
    assert low.report.unmatched() == []


def test_a_condition_no_call_meets_is_reported_with_the_calls_values(install_plugins):
    install_npu(install_plugins, npu_capability({
        "nn.layer_norm": {"attrs": {"axes": [0]}}, "nn.softmax": {"attrs": {"axis": [0]}}}))
    low = legato.legalize(norm_softmax_module(), backend="author_npu", mode="partial")
    assert "nn.layer_norm" not in {c.op for c in low.module.main.calls}
    text = str(low.report)
    assert "condition nn.layer_norm attrs {axes: [0]} matched 0 of 1 calls " \
           "(their axes: [2])" in text
    assert "condition nn.softmax attrs {axis: 0} matched 0 of 1 calls (their axis: 1)" in text
    assert "nn.layer_norm attrs {axes: [0]} matched 0" in low.report.summary()


def add_kernel(a, b):
    return np.add(a, b)


def relu_module():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    return b.build(b.call("nn.relu", b.call("add", b.call("nn.relu", x), x)))


def install_relu_npu(install_plugins, relu):
    def register(register):
        register({"backend": "author_npu", "fallback": "cpu_ref",
                  "legal": {"add": {}, "nn.relu": relu}}, kernels={"add": add_kernel})
    return install_plugins({"author_npu": plugin_module(legato_register_backends=register)})


def test_a_legal_op_without_a_kernel_is_refused_naming_op_and_the_way_out(install_plugins):
    host = install_relu_npu(install_plugins, {})
    assert "author_npu" not in legato.list_backends()
    [problem] = [m for p, m in host.problems if p == "author_npu"]
    assert "legal op nn.relu without a kernel" in problem
    assert "`kernel: fallback` under legal.nn.relu" in problem


def test_kernel_fallback_runs_on_the_fallback_and_the_report_says_so(install_plugins):
    install_relu_npu(install_plugins, {"kernel": "fallback"})
    compiled = legato.compile(relu_module(), "author_npu")
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    expected = np.maximum(np.maximum(x, 0) + x, 0)
    np.testing.assert_allclose(compiled(x), expected, rtol=1e-6)
    per_backend = compiled.report.per_backend
    assert per_backend["author_npu"] == {"add": 1}
    assert per_backend["cpu_ref"] == {"nn.relu": 2}
    assert "on cpu_ref (fallback): nn.relu x2" in str(compiled.report)
    assert "run by its fallback cpu_ref's kernel (kernel: fallback)" in str(compiled.report)
    from legato.testing.conformance import check_backend
    results = {r.op: r for r in check_backend("author_npu", count=2)}
    assert results["add"].how == "kernel"  # (the test's add kernel does not broadcast)
    assert results["nn.relu"].how == "fallback kernel" and results["nn.relu"].ok


def test_kernel_fallback_needs_a_fallback(install_plugins):
    with pytest.raises(legato.ConfigError, match=r"legal.exp.kernel: fallback, but the "
                                                 r"backend names no fallback"):
        legato.register_backend({"backend": "lone", "legal": {"exp": {"kernel": "fallback"}}})


@pytest.mark.parametrize("written, meant", [("fp16", "float16"), ("half", "float16"),
                                            ("BF16", "bfloat16"), ("u8", "uint8"),
                                            ("flaot32", "float32")])
def test_a_dtype_written_as_other_tools_write_it_gets_legato_s_name(written, meant):
    with pytest.raises(legato.ConfigError, match=rf"unknown dtype '{written}' \(did you mean "
                                                 rf"'{meant}'\?\)"):
        legato.register_backend({"backend": "typo_npu", "executes": False,
                                 "legal": {"exp": {"dtypes": [written]}}})


def test_kept_ops_the_backend_cannot_run_are_listed_together_with_the_ways_out(
        install_plugins, tmp_path):
    install_relu_npu(install_plugins, {"kernel": "fallback"})
    config = tmp_path / "npu.yaml"
    config.write_text("backends:\n  author_npu:\n    keep: [nn.gelu, nn.silu]\n")
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    module = b.build(b.call("nn.silu", b.call("nn.gelu", x)), b.call("nn.gelu", x))
    with pytest.raises(legato.LegalizationError) as err:
        legato.legalize(module, backend="author_npu", config=str(config))
    text = str(err.value)
    assert "cannot take 2 op(s) the config keeps: nn.gelu x2, nn.silu x1" in text
    assert "a kernel for it" in text and "`custom_ops: true`" in text


def two_attention_layers():
    """Two attention blocks written out in primitives, as an exporter writes them."""
    b = legato.GraphBuilder()
    x = b.input("x", (1, 2, 5, 8), "float32")
    k_raw = b.input("k", (1, 5, 2, 8), "float32")
    y = x
    for _ in range(2):
        scores = b.matmul(b.multiply(y, 0.25), b.permute_dims(k_raw, axes=[0, 2, 3, 1]))
        y = b.matmul(b.nn_softmax(scores, axis=-1), x)
    return b.build(y)


def test_show_draws_each_recomposed_kept_attention_whole(install_plugins, tmp_path):
    from legato.show import graph
    install_npu(install_plugins, npu_capability({"nn.attention": {}}))
    config = tmp_path / "npu.yaml"
    config.write_text("backends:\n  author_npu:\n    keep: [nn.attention]\n")
    picture = graph(two_attention_layers(), "author_npu", str(config))
    attention = [n for n in picture.after.nodes if n.label == "nn.attention"]
    assert [n.kind for n in attention] == ["kept", "kept"]
    assert [n.cluster for n in attention] == ["", ""]  # in no box
    assert not any("decomposed" in label for label in picture.after.clusters.values())


def test_onnx_layer_norm_and_softmax_meet_negative_axis_conditions(install_plugins,
                                                                     tmp_path):
    """The ONNX import writes the axes it resolved (LayerNormalization axis=-1 on rank 3 as
    [2]); a capability written with -1 still takes them, and runs them as onnxruntime does."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    gamma = helper.make_tensor("gamma", TensorProto.FLOAT, [4], [1.0, 0.5, 2.0, 1.5])
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "gamma"], ["y"], axis=-1),
         helper.make_node("Softmax", ["s"], ["z"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 5])], [gamma])
    path = tmp_path / "norm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    install_npu(install_plugins, npu_capability({
        "nn.layer_norm": {"attrs": {"axes": [-1]}}, "nn.softmax": {"attrs": {"axis": -1}}}))
    compiled = legato.compile(str(path), "author_npu")
    assert compiled.report.per_backend["author_npu"] == {"nn.layer_norm": 1, "nn.softmax": 1}
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    s = rng.standard_normal((3, 5)).astype(np.float32)
    want = ort.InferenceSession(str(path)).run(None, {"x": x, "s": s})
    for got, expected in zip(compiled(x, s), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, condition, attrs, taken", [
    ("sum", [-1, 0], {"axes": [0, 2]}, True),          # a set of axes, in any order
    ("sum", [-1], {"axes": [1]}, False),
    ("expand_dims", [3], {"axes": [-1]}, True),        # counted on the result's rank
    ("expand_dims", [2], {"axes": [-1]}, False),
    ("permute_dims", [2, 0, 1], {"axes": [-1, 0, 1]}, True),
    ("permute_dims", [2, 0, 1], {"axes": [0, 2, 1]}, False),  # a permutation keeps order
])
def test_axis_conditions_on_other_ops(backend_factory, op, condition, attrs, taken):
    backend = backend_factory({"backend": "axes_npu", "executes": False,
                               "legal": {op: {"attrs": {"axes": condition}}}})
    b = legato.GraphBuilder()
    call = b.build(b.call(op, b.input("x", (2, 3, 4)), **attrs)).main.calls[0]
    assert backend.supports(call) is taken
