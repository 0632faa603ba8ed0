"""Claimed regions (partition), fusion with op info, layout conversion, pass manager."""
from collections import Counter

import numpy as np
import pytest

import legato
from legato.frontends.examples import random_inputs
from legato.ir import Function, Module

CPU = "legato_cpu_ref.kernels:KERNELS"
QNN_OPS = ("qnn.quantize", "qnn.conv2d", "qnn.dequantize")


def qnn_model():
    """float -> quantize -> qnn.conv2d -> dequantize -> relu -> softmax."""
    rng = np.random.default_rng(0)
    b = legato.GraphBuilder()
    x = b.input("x", (1, 2, 6, 6))
    s = lambda v: b.const(np.array(v, np.float32))  # noqa: E731
    zp8 = lambda v: b.const(np.array(v, np.uint8))  # noqa: E731
    q = b.call("qnn.quantize", x, s(0.05), zp8(128), dtype="uint8")
    w = b.const(rng.integers(-20, 20, (4, 2, 3, 3)).astype(np.int8))
    y = b.call("qnn.conv2d", q, s(0.05), zp8(128), w, b.const(np.full(4, 0.02, np.float32)),
               b.const(np.zeros(4, np.int8)), s(0.1), zp8(120),
               b.const(rng.integers(-50, 50, 4).astype(np.int32)), padding=[1, 1, 1, 1])
    y = b.call("qnn.dequantize", y, s(0.1), zp8(120))
    return b.build(b.call("nn.softmax", b.call("nn.relu", y), axis=1))


@pytest.fixture
def qnn_backend(backend_factory):
    return backend_factory({"backend": "qnnpu", "legal": {op: {} for op in QNN_OPS},
                            "kernels": CPU})


def ops(fn):
    return Counter(c.op for c in fn.calls)


def test_partition_lifts_claimed_region_and_legalize_never_enters_it(qnn_backend):
    mod = qnn_model()
    parted = legato.partition(mod, backends=["qnnpu"])
    region = parted.functions["qnnpu_0"]
    assert region.kind == "external" and region.attrs["codegen"] == "qnnpu"
    assert ops(region) == Counter(QNN_OPS)
    assert ops(parted.main)[legato.CALL_OP] == 1 and not set(QNN_OPS) & set(ops(parted.main))
    low = legato.legalize(parted, backend="cpu_ref").module
    assert low.functions["qnnpu_0"] is region, "the external body is never touched"
    assert {legato.get_op(c.op).level for c in low.main.calls if c.op != legato.CALL_OP} == {0}
    assert legato.structural_equal(legato.parse(str(low)), low)
    x = random_inputs(mod)
    np.testing.assert_allclose(legato.reference(low)(*x), legato.reference(mod)(*x),
                               rtol=1e-5, atol=1e-6)


def test_multi_backend_compile_matches_cpu_ref_and_counts_per_backend(qnn_backend):
    mod = qnn_model()
    c = legato.compile(mod, backend=["qnnpu", "cpu_ref"])
    externals = {n: f.attrs["codegen"] for n, f in c.module.functions.items()
                 if f.kind == "external"}
    assert set(externals.values()) == {"qnnpu", "cpu_ref"}
    assert c.report.per_backend["qnnpu"] == {op: 1 for op in QNN_OPS}
    assert "nn.softmax" not in c.report.per_backend["cpu_ref"]  # decomposed for cpu_ref
    assert "on qnnpu: 3 calls" in c.report.summary()
    x = random_inputs(mod)
    np.testing.assert_allclose(c(*x), legato.reference(mod)(*x), rtol=1e-5, atol=1e-6)


def test_partition_regions_are_acyclic_and_maximal(backend_factory):
    backend_factory({"backend": "expo", "legal": {"exp": {}, "add": {}}, "kernels": CPU})
    b = legato.GraphBuilder()
    x = b.input("x", (3,))
    a = b.call("exp", x)           # expo
    t = b.call("tanh", a)          # not expo: reads the first region...
    y = b.call("add", a, t)        # ...and feeds this one: merging it would make a cycle
    mod = b.build(b.call("exp", y))
    parted = legato.partition(mod, backends=["expo"])
    regions = [f for f in parted.functions.values() if f.kind == "external"]
    assert sorted(sum(ops(f).values()) for f in regions) == [1, 2]
    assert [c.op for c in parted.main.calls] == [legato.CALL_OP, "tanh", legato.CALL_OP]
    np.testing.assert_allclose(legato.reference(parted)(np.ones(3, np.float32)),
                               legato.reference(mod)(np.ones(3, np.float32)), rtol=1e-6)


def test_fusion_keeps_results_and_op_info():
    mod = legato.load_model("example:transformer")
    low = legato.legalize(mod, backend="cpu_ref").module
    fused = legato.fuse(low)
    prims = {n: f for n, f in fused.functions.items() if f.kind == "primitive"}
    assert prims and all(len(f.calls) >= 2 for f in prims.values())
    x = random_inputs(mod)
    np.testing.assert_allclose(legato.reference(fused)(*x), legato.reference(mod)(*x),
                               rtol=1e-5, atol=1e-5)
    for fn in prims.values():
        info = legato.op_info(fn)
        assert [i["op"] for i in info] == list(fn.attrs["ops"])
        assert legato.function_pattern(fn) == fn.attrs["pattern"]
        assert all(i["kind"] in legato.fuse.__globals__["FUSABLE"] for i in info)
    # a matmul absorbs its elementwise epilogue: linear's matmul + bias add
    epilogues = [f for f in prims.values() if f.attrs["pattern"] == "out_elemwise_fusable"]
    assert any([i["op"] for i in legato.op_info(f)][:2] == ["matmul", "add"] for f in epilogues)
    assert legato.fuse(fused).functions.keys() == fused.functions.keys(), "fusion is idempotent"


def test_layer_norm_attributes_recoverable_after_legalization_and_fusion():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3, 8))
    y = b.call("nn.layer_norm", x, None, None, axes=[-2, -1], epsilon=1e-3)
    low = legato.legalize(b.build(b.call("nn.relu", y)), backend="cpu_ref").module
    for module in (low, legato.fuse(low)):
        groups = legato.group_by_origin(module)
        norm = groups["main#0"]
        assert norm["op"] == "nn.layer_norm"
        assert norm["attrs"] == {"axes": [-2, -1], "epsilon": 1e-3}
        assert len(norm["calls"]) == len([c for c in low.main.calls
                                          if c.origin and c.origin.source == "main#0"])
    fused_fns = {fn for fn, _ in legato.group_by_origin(legato.fuse(low))["main#0"]["calls"]}
    assert any(name.startswith("fused_") for name in fused_fns)


def test_nchw_to_nhwc_gives_identical_results_and_cancels_transposes():
    mod = legato.load_model("example:cnn")
    nhwc = legato.convert_layout(mod, "NHWC")
    convs = [c for c in nhwc.main.calls if c.op.startswith("nn.") and "data_layout" in c.attrs]
    assert convs and all(c.attrs["data_layout"] == "NHWC" for c in convs)
    assert ops(nhwc.main)["permute_dims"] == 2, "one transpose in, one out"
    assert [c.attrs["axis"] for c in nhwc.main.calls if c.op == "nn.batch_norm"] == [3]
    x = random_inputs(mod)
    want = legato.reference(mod)(*x)
    np.testing.assert_allclose(legato.reference(nhwc)(*x), want, rtol=1e-6, atol=1e-7)
    back = legato.convert_layout(nhwc, "NCHW")
    assert legato.structural_equal(back, mod, compare_origin=False)
    np.testing.assert_allclose(legato.compile(nhwc, "cpu_ref")(*x), want, rtol=1e-5, atol=1e-6)


def test_op_without_layout_rule_gets_transposes_back():
    b = legato.GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    w = b.const(np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32))
    y = b.call("nn.conv2d", x, w, None, padding=[1, 1, 1, 1])
    z = b.call("nn.softmax", y, axis=1)              # has a rule: axis remapped
    r = b.call("reshape", z, shape=[1, 3, 16])       # no rule: wrapped in the transpose back
    mod = b.build(b.call("nn.relu", r))
    nhwc = legato.convert_layout(mod, "NHWC")
    calls = nhwc.main.calls
    soft = next(c for c in calls if c.op == "nn.softmax")
    assert soft.attrs["axis"] == 3
    reshape = next(c for c in calls if c.op == "reshape")
    producer = next(c for c in calls if reshape.inputs[0] in c.outputs)
    assert producer.op == "permute_dims" and producer.attrs["axes"] == [0, 3, 1, 2]
    x_in = random_inputs(mod)
    np.testing.assert_allclose(legato.reference(nhwc)(*x_in), legato.reference(mod)(*x_in),
                               rtol=1e-6, atol=1e-7)


def test_backend_preferred_layout_is_applied_by_compile(backend_factory):
    backend_factory({"backend": "nhwc_npu", "layout": "NHWC", "legal_levels": [0],
                     "legal": {"nn.conv2d": {"attrs": {"data_layout": "NHWC"}}},
                     "kernels": CPU})
    mod = legato.load_model("example:cnn")
    c = legato.compile(mod, "nhwc_npu")
    assert [call.attrs["data_layout"] for call in c.module.main.calls
            if call.op == "nn.conv2d"] == ["NHWC", "NHWC"]
    x = random_inputs(mod)
    np.testing.assert_allclose(c(*x), legato.reference(mod)(*x), rtol=1e-5, atol=1e-6)


def test_converter_backend_builds_its_own_conv_from_op_info(backend_factory):
    """Like TensorRT's conv converter: read conv2d's attributes from op info of the claimed
    function and build a call from them, without pattern-matching the body."""
    backend_factory({"backend": "trt_like", "legal": {"nn.conv2d": {}}, "kernels": CPU})
    b = legato.GraphBuilder()
    x = b.input("x", (1, 4, 9, 9))
    w = b.const(np.random.default_rng(2).standard_normal((6, 2, 3, 3)).astype(np.float32))
    conv_attrs = dict(strides=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=2)
    mod = b.build(b.call("nn.relu", b.call("nn.conv2d", x, w, None, **conv_attrs)))
    parted = legato.partition(mod, backends=["trt_like"])
    (claimed,) = [f for f in parted.functions.values() if f.attrs.get("codegen") == "trt_like"]
    (info,) = legato.op_info(claimed)
    assert info["op"] == "nn.conv2d"
    for key, value in conv_attrs.items():
        assert info["attrs"][key] == value
    assert (info["attrs"]["data_layout"], info["attrs"]["kernel_layout"]) == ("NCHW", "OIHW")
    rebuilt = legato.GraphBuilder()
    data = rebuilt.input("data", claimed.params[0].shape)
    weight = claimed.calls[0].inputs[1]
    out = rebuilt.call("nn.conv2d", data, weight, None, **info["attrs"])
    x_in = random_inputs(mod)[0]
    np.testing.assert_allclose(legato.reference(rebuilt.build(out))(x_in),
                               legato.reference(Module({"main": Function(
                                   claimed.params, claimed.calls, claimed.results)}))(x_in),
                               rtol=1e-6)
    # the same facts survive full legalization and fusion, through origins
    low = legato.fuse(legato.legalize(mod, backend="cpu_ref").module)
    origins = {i["origin"]["op"]: i["origin"]["attrs"] for f in low.functions.values()
               for i in legato.op_info(f) if i["origin"]}
    assert all(origins["nn.conv2d"][k] == v for k, v in conv_attrs.items())


def test_function_passes_skip_external_and_primitive_unless_they_opt_in(qnn_backend):
    seen = []

    class Recorder(legato.FunctionPass):
        name = "recorder"

        def run_function(self, name, fn, module):
            seen.append((name, fn.kind))
            return fn, False

    parted = legato.fuse(legato.partition(legato.legalize(qnn_model(), max_level=1).module,
                                          backends=["qnnpu"]))
    kinds = {f.kind for f in parted.functions.values()}
    assert kinds == {"default", "external", "primitive"}
    assert Recorder().run(parted) == (parted, False)
    assert {k for _, k in seen} == {"default"}
    seen.clear()
    opted = Recorder()
    opted.enters_primitive = True
    opted.run(parted)
    assert {k for _, k in seen} == {"default", "primitive"}


def test_pass_manager_fixpoint_and_divergence():
    from legato.passes.manager import LambdaFunctionPass

    def drop_one_relu(name, fn, module):
        calls = list(fn.calls)
        for i, c in enumerate(calls):
            if c.op == "nn.relu" and i + 1 < len(calls) and calls[i + 1].op == "nn.relu" and \
                    calls[i + 1].inputs[0] is c.outputs[0]:
                nxt = calls[i + 1]
                merged = legato.Call(nxt.op, c.inputs, nxt.attrs, nxt.outputs, nxt.origin)
                return fn.with_calls(calls[:i] + [merged] + calls[i + 2:]), True
        return fn, False

    b = legato.GraphBuilder()
    h = b.input("x", (2,))
    for _ in range(4):
        h = b.call("nn.relu", h)
    mod = b.build(h)
    once = legato.PassManager([LambdaFunctionPass("relu-merge", drop_one_relu)])
    assert len(once.run(mod)[0].main.calls) == 3
    fixed, changed = legato.PassManager([LambdaFunctionPass("relu-merge", drop_one_relu)],
                                        fixpoint=True).run(mod)
    assert changed and len(fixed.main.calls) == 1
    legato.verify(fixed)
    flip = LambdaFunctionPass("flip", lambda n, f, m: (f.with_calls(f.calls), True))
    with pytest.raises(legato.LegatoError, match="no fixpoint|did not reach a fixpoint.*flip"):
        legato.PassManager([flip], fixpoint=True, max_iterations=3).run(mod)


def test_cli_explain_shows_regions_and_fused_functions(capsys, qnn_backend, tmp_path):
    from legato.cli.commands import main
    path = tmp_path / "qnn.txt"
    path.write_text(str(qnn_model()))
    assert main(["compile", str(path), "--backend", "qnnpu,cpu_ref", "--explain"]) == 0
    err = capsys.readouterr().err
    assert "region @qnnpu_0 on qnnpu: qnn.quantize, qnn.conv2d, qnn.dequantize" in err
    assert main(["compile", "example:mlp", "--explain"]) == 0
    err = capsys.readouterr().err
    assert "fused @fused_0 (out_elemwise_fusable): matmul, add, maximum  [from nn.linear, " \
           "nn.relu]" in err


def test_kept_ops_stay_in_their_original_layout():
    mod = legato.load_model("example:cnn")
    nhwc = legato.convert_layout(mod, "NHWC", keep={"nn.max_pool2d"})
    layouts = {c.op: c.attrs["data_layout"] for c in nhwc.main.calls if "data_layout" in c.attrs}
    assert layouts == {"nn.conv2d": "NHWC", "nn.max_pool2d": "NCHW", "nn.avg_pool2d": "NHWC"}
    x = random_inputs(mod)
    np.testing.assert_allclose(legato.reference(nhwc)(*x), legato.reference(mod)(*x),
                               rtol=1e-6, atol=1e-7)


def test_broadcast_to_follows_the_carried_layout():
    """Its target shape is in the original layout: the rule permutes it with the value."""
    b = legato.GraphBuilder()
    x = b.input("x", (1, 4, 2, 8), "float32")
    y = b.call("nn.conv2d", x, b.const(np.ones((4, 4, 1, 1), np.float32)))
    mod = b.build(b.call("add", b.call("broadcast_to", y, shape=[3, 4, 2, 8]), 1.0))
    nhwc = legato.convert_layout(mod, "NHWC")
    ops = [c.op for c in nhwc.main.calls]
    assert ops.count("permute_dims") == 2 and "broadcast_to" in ops  # in and out only
    feed = np.random.default_rng(0).random((1, 4, 2, 8), dtype=np.float32)
    np.testing.assert_array_equal(legato.compile(nhwc, backend="cpu_ref")(feed),
                                  legato.compile(mod, backend="cpu_ref")(feed))
