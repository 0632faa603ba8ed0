"""Legalization: rule order, fixpoint, partial lowering, configs, modes, provenance, errors."""
from collections import Counter

import numpy as np
import pytest

import legato
from legato.frontends.examples import random_inputs
from legato.ops.base import f32

LEVEL0 = {op for op in legato.list_ops() if legato.get_op(op).level == 0}


def levels(module):
    return {legato.get_op(c.op).level for c in module.main.calls}


def ops(module):
    return Counter(c.op for c in module.main.calls)


def attention_module():
    b = legato.GraphBuilder()
    q, k, v = (b.input(n, (1, 2, 5, 4)) for n in "qkv")
    y = b.call("nn.attention", q, k, v, None, causal=True)
    return b.build(b.call("nn.layer_norm", y, None, None))


def test_full_legalization_for_cpu_ref_leaves_only_level0_and_matches_reference():
    mod = legato.load_model("example:transformer")
    result = legato.legalize(mod, backend="cpu_ref")
    assert levels(result.module) == {0}
    inputs = random_inputs(mod)
    got = legato.compile(mod, "cpu_ref")(*inputs)
    np.testing.assert_allclose(got, legato.reference(mod)(*inputs), rtol=1e-5, atol=1e-5)


def test_second_legalization_is_a_no_op():
    first = legato.legalize("example:cnn", backend="cpu_ref")
    second = legato.legalize(first.module, backend="cpu_ref")
    assert second.module is first.module
    assert not second.report.changed and first.report.changed
    assert second.report.ops("decomposed") == {}
    assert legato.structural_equal(second.module, first.module)


def test_partial_lowering_without_backend_by_level():
    mod = attention_module()
    to1 = legato.legalize(mod, max_level=1).module
    assert max(levels(to1)) == 1 and "nn.softmax" in ops(to1)
    assert ops(to1)["nn.layer_norm"] == 1, "level-1 ops stay when max_level=1"
    to0 = legato.legalize(mod, max_level=0).module
    assert levels(to0) == {0}
    assert legato.legalize(to1, max_level=1).module is to1
    inputs = random_inputs(mod)
    want = legato.reference(mod)(*inputs)
    for low in (to1, to0):
        np.testing.assert_allclose(legato.reference(low)(*inputs), want, rtol=1e-5, atol=1e-6)


def test_max_level_with_a_backend(backend_factory):
    backend_factory({"backend": "fused", "legal": {"nn.attention": {}, "nn.layer_norm": {}},
                     "legal_levels": [0], "kernels": "legato_cpu_ref.kernels:KERNELS"})
    mod = attention_module()
    assert ops(legato.legalize(mod, backend="fused").module) == Counter(
        {"nn.attention": 1, "nn.layer_norm": 1})
    capped = legato.legalize(mod, backend="fused", max_level=1).module
    assert "nn.attention" not in ops(capped) and ops(capped)["nn.layer_norm"] == 1
    assert "nn.softmax" not in ops(capped), "softmax is not legal on 'fused': decomposed"


def test_keep_and_decompose_configs(tmp_path, backend_factory):
    backend_factory({"backend": "gelu_hw", "legal": {"nn.gelu": {}}, "legal_levels": [0],
                     "kernels": "legato_cpu_ref.kernels:KERNELS"})
    mod = legato.load_model("example:transformer")
    keep = legato.legalize(mod, "cpu_ref", config={"backends": {"cpu_ref": {
        "keep": ["nn.layer_norm", "nn.softmax"]}}})
    assert ops(keep.module)["nn.layer_norm"] == 2 and ops(keep.module)["nn.softmax"] == 1
    assert keep.report.ops("kept") == {"nn.layer_norm": 2, "nn.softmax": 1}
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backends:\n  gelu_hw:\n    decompose: [nn.gelu]\n")
    native = legato.legalize(mod, "gelu_hw")
    assert ops(native.module)["nn.gelu"] == 1
    forced = legato.legalize(mod, "gelu_hw", config=str(cfg))
    assert "nn.gelu" not in ops(forced.module) and "erf" in ops(forced.module)
    assert "decompose requested by config" in str(forced.report)
    c = legato.compile(mod, "cpu_ref", config={"backends": {"cpu_ref": {"keep": ["nn.gelu"]}}})
    inputs = random_inputs(mod)
    np.testing.assert_allclose(c(*inputs), legato.reference(mod)(*inputs), rtol=1e-5, atol=1e-6)


def test_rule_order_keep_beats_max_level():
    mod = attention_module()
    cfg = {"backends": {"cpu_ref": {"keep": ["nn.attention"], "max_level": 0}}}
    low = legato.legalize(mod, "cpu_ref", config=cfg).module
    assert ops(low)["nn.attention"] == 1 and "nn.layer_norm" not in ops(low)


def test_fallback_runs_what_the_backend_lacks(backend_factory):
    backend_factory({"backend": "mini", "fallback": "cpu_ref",
                     "legal": {op: {"dtypes": ["float32"]} for op in
                               ("add", "multiply", "subtract", "divide", "sum", "rsqrt")},
                     "kernels": "legato_cpu_ref.kernels:KERNELS"})
    mod = legato.load_model("example:layernorm")
    result = legato.legalize(mod, "mini")
    assert result.report.ops("fallback") == {}
    b = legato.GraphBuilder()
    x = b.input("x", (3, 4))
    y = b.call("nn.layer_norm", b.call("exp", x), None, None)
    mod = b.build(y)
    result = legato.legalize(mod, "mini")
    assert result.report.ops("fallback") == {"exp": 1}
    assert [c.op for c in result.fallback_calls] == ["exp"]
    inputs = random_inputs(mod)
    np.testing.assert_allclose(legato.compile(mod, "mini")(*inputs),
                               legato.reference(mod)(*inputs), rtol=1e-5, atol=1e-6)


def test_failure_names_op_attrs_types_backend_and_routes(backend_factory):
    backend_factory({"backend": "tiny", "executes": False, "legal": {"add": {"dtypes": ["float32"]}}})
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    mod = b.build(b.call("nn.softmax", b.call("add", x, x), axis=0))
    with pytest.raises(legato.LegalizationError) as info:
        legato.legalize(mod, "tiny")
    text = str(info.value)
    for part in ("cannot legalize max(float32[2, 3])", '"axes": [0]', "backend tiny",
                 "part of nn.softmax at main#1", "native: tiny does not list max",
                 "decompose: none", "fallback: tiny has no fallback", "custom op:"):
        assert part in text, part


def test_partial_and_analysis_modes(backend_factory):
    backend_factory({"backend": "tiny2", "executes": False, "legal": {"add": {}, "exp": {}}})
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    mod = b.build(b.call("tanh", b.call("nn.relu", b.call("exp", x))))
    partial = legato.legalize(mod, "tiny2", mode="partial")
    assert ops(partial.module) == Counter({"exp": 1, "maximum": 1, "tanh": 1})
    assert len(partial.report.failures) == 2 and "tanh" in partial.report.failures[1]
    analysis = legato.legalize(mod, "tiny2", mode="analysis")
    assert analysis.module is mod
    assert analysis.report.ops("decomposed") == {"nn.relu": 1}
    assert analysis.report.ops("failed") == {"maximum": 1, "tanh": 1}
    with pytest.raises(legato.LegatoError, match="mode 'fast'"):
        legato.legalize(mod, "tiny2", mode="fast")


def test_provenance_on_every_produced_call():
    mod = legato.load_model("example:transformer")
    low = legato.legalize(mod, "cpu_ref").module
    source_ops = {c.op for c in mod.main.calls}
    produced = [c for c in low.main.calls if c.origin is not None]
    assert produced and all(c.origin.op in source_ops for c in produced)
    norms = [c for c in produced if c.origin.op == "nn.layer_norm"]
    assert {c.origin.source for c in norms} == {"main#0", "main#18"}
    assert all(c.origin.attrs == {"axes": [-1], "epsilon": 1e-5} for c in norms)
    lin = [c for c in produced if c.origin.op == "nn.linear"]
    assert all(c.origin.rules == ("decompose:nn.linear",) for c in lin)
    b = legato.GraphBuilder()
    q = b.input("q", (1, 1, 3, 2))
    att = legato.legalize(b.build(b.call("nn.attention", q, q, q)), "cpu_ref").module
    chains = {c.origin.rules for c in att.main.calls}
    assert ("decompose:nn.attention", "decompose:nn.softmax") in chains
    untouched = [c for c in low.main.calls if c.origin is None]
    assert {c.op for c in untouched} <= LEVEL0


def test_report_says_what_and_why():
    result = legato.legalize("example:cnn", backend="cpu_ref")
    report = result.report
    assert report.before["nn.conv2d"] == 2 and sum(report.after.values()) == \
        len(result.module.main.calls)
    rows = report.by_op()["nn.conv2d"]
    assert rows == [("decomposed", "cpu_ref does not list nn.conv2d as legal", 2)]
    assert "nn.conv2d" in str(report) and "decomposed" in report.summary()


def test_compile_leaves_the_input_module_unchanged():
    mod = legato.load_model("example:transformer")
    text, calls = str(mod), mod.main.calls
    legato.compile(mod, "cpu_ref")
    legato.legalize(mod, max_level=0)
    assert str(mod) == text and mod.main.calls is calls


def test_rule_that_changes_a_type_is_an_error_naming_op_and_rule():
    from legato.ops.base import REGISTRY, composite

    def infer(types, attrs):
        return types[0]

    @composite("test.shrinks_big", "data", infer, "elemwise", 1, [((f32(2, 3),), {})])
    def shrinks(b, x):  # right on the registration example, wrong for larger inputs
        return x if x.shape[0] < 4 else b.sum(x, axes=[0], keepdims=True)

    try:
        b = legato.GraphBuilder()
        x = b.input("x", (5, 3))
        mod = b.build(b.call("test.shrinks_big", x))
        with pytest.raises(legato.LegalizationError,
                           match=r"rule decompose:test.shrinks_big changed the types of "
                                 r"test.shrinks_big .*float32\[1, 3\].*float32\[5, 3\]"):
            legato.legalize(mod, "cpu_ref")
    finally:
        REGISTRY.unregister("test.shrinks_big")


def test_kept_op_without_lowering_or_custom_support_fails(backend_factory):
    backend_factory({"backend": "nolow", "executes": False, "legal_levels": [0]})
    mod = legato.load_model("example:layernorm")
    with pytest.raises(legato.LegalizationError, match="(?s)kept by config.*does not take custom"):
        legato.legalize(mod, "nolow", config={"backends": {"nolow": {"keep": ["nn.layer_norm"]}}})


def test_custom_op_tunnelling_round_trips(backend_factory):
    backend_factory({"backend": "tunnel", "executes": False, "custom_ops": True,
                     "domain": "acme", "legal_levels": [0]})
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8))
    beta = b.const(np.zeros(8, np.float32))
    mod = b.build(b.call("nn.layer_norm", x, None, beta, axes=[-1], epsilon=1e-3))
    low = legato.legalize(mod, "tunnel", config={"backends": {"tunnel": {
        "keep": ["nn.layer_norm"]}}})
    (custom,) = low.module.main.calls
    assert custom.op == "custom" and custom.attrs["operator_name"] == "nn.layer_norm"
    assert custom.attrs["domain_name"] == "acme" and custom.inputs == (x, beta)
    assert low.report.ops("custom") == {"nn.layer_norm": 1}
    original = legato.decode_custom(custom)
    assert original.op == "nn.layer_norm" and original.inputs == (x, None, beta)
    assert original.attrs == mod.main.calls[0].attrs
    again = legato.legalize(low.module, "tunnel")
    assert again.module is low.module
    assert legato.structural_equal(legato.parse(str(low.module)), low.module)


def test_legalize_needs_a_backend_or_a_level():
    with pytest.raises(legato.LegatoError, match="needs a backend"):
        legato.legalize("example:mlp")


def test_a_decomposition_that_crashes_is_a_legalization_error_naming_op_and_rule():
    from legato.ops.base import REGISTRY, composite

    @composite("test.divides_by_width", "data", lambda types, attrs: types[0], "elemwise", 1,
               [((f32(2, 3),), {})])
    def divides(b, x):  # a Python error on inputs the registration example did not cover
        return b.multiply(x, 1 / (x.shape[-1] - 5))

    try:
        b = legato.GraphBuilder()
        mod = b.build(b.call("test.divides_by_width", b.input("x", (2, 5))))
        with pytest.raises(legato.LegalizationError,
                           match=r"rule decompose:test.divides_by_width failed on "
                                 r"test.divides_by_width\(float32\[2, 5\]\).*"
                                 r"ZeroDivisionError.*a bug in the rule"):
            legato.legalize(mod, max_level=0)
    finally:
        REGISTRY.unregister("test.divides_by_width")


def test_a_backend_rule_that_crashes_is_a_legalization_error(backend_factory):
    def rule(b, call):
        raise KeyError("weights")

    backend_factory({"backend": "crashy", "executes": False, "legal": {"exp": {}},
                     "rules": {"nn.relu": rule}})
    b = legato.GraphBuilder()
    mod = b.build(b.call("nn.relu", b.input("x", (2, 3))))
    with pytest.raises(legato.LegalizationError, match=r"rule lower:nn.relu of crashy failed "
                                                       r"on nn.relu.*KeyError"):
        legato.legalize(mod, "crashy")


@pytest.mark.parametrize("payload, names", [
    ("{", "is not JSON"),
    ("[]", "must be"),
    ('{"attrs": {}}', "must be"),
    ('{"attrs": 5, "inputs": [true]}', "must be"),
    ('{"attrs": {}, "inputs": 7}', "must be"),
    ('{"attrs": {}, "inputs": [true, true]}', "mark 2 inputs present, the call has 1"),
])
def test_decode_custom_refuses_damaged_payloads(payload, names):
    b = legato.GraphBuilder()
    y = b.call("custom", b.input("x", (2, 3)), operator_name="nn.leaky_relu",
               implementation_attrs=payload, result_types=[[[2, 3], "float32"]])
    mod = b.build(y)
    with pytest.raises(legato.LegatoError, match=names):
        legato.decode_custom(mod.main.calls[0])
    with pytest.raises(legato.ExecutionError, match=names):  # the interpreter decodes it
        legato.reference(mod)
