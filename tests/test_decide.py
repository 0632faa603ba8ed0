"""One answer to "who takes this call": legalization and partitioning both ask
`Backend.decide(call, config, level)`, so a region a backend is given holds exactly the
calls legalizing for that backend would leave to it."""
from __future__ import annotations

import re

import numpy as np
import pytest

import legato
from legato.legalization.backend import DECLINED, KEPT, TAKEN
from legato.legalization.config import BackendConfig
from legato.passes.partition import PartitionPass, owner, partition


def unary(data, **attrs):
    return data


def binary(a, b):
    return a + b


def layer_norm(data, gamma=None, beta=None, **attrs):
    return data


def region_ops(module, backend):
    return sorted(c.op for fn in module.functions.values()
                  if fn.kind == "external" and fn.attrs["codegen"] == backend for c in fn.calls)


def gelu_module():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 4))
    return b.build(b.call("nn.gelu", b.call("exp", x)))


def test_decide_answers_each_route(backend_factory):
    backend = backend_factory({"backend": "npu", "executes": False, "custom_ops": True,
                               "legal": {"exp": {"dtypes": ["float32"]}, "nn.gelu": {}},
                               "rules": {"tanh": lambda b, call: None}})
    exp, gelu = gelu_module().main.calls
    assert backend.decide(exp).action == "legal"
    assert backend.decide(gelu, BackendConfig(max_level=0), level=1).rule == "max_level"
    assert backend.decide(gelu, BackendConfig(decompose=frozenset({"nn.gelu"})),
                          level=1).action == "decomposed"
    b = legato.GraphBuilder()
    x = b.input("x", (2,), "float16")
    half, tanh = b.build(b.call("tanh", b.call("exp", x))).main.calls
    assert backend.decide(half) == legato.legalization.report.Decision(
        "failed", "npu lists exp as legal but not for dtype float16 not in ['float32']",
        DECLINED)
    assert backend.decide(tanh).rule == "backend-rule"
    assert backend.decide(tanh, use_rules=False).rule == DECLINED
    kept = backend.decide(half, BackendConfig(keep=frozenset({"exp"})))
    assert kept.action == "custom" and kept.action in TAKEN


def test_max_level_of_the_config_decomposes_in_partition_as_in_legalize(backend_factory):
    # partition used to give nn.gelu to the backend whose config lowers it below level 1
    # its gelu kernel is wrong on purpose: the results show it is never called
    backend_factory({"backend": "npu", "fallback": "cpu_ref", "legal_from_kernels": {}},
                    kernels={"exp": np.exp, "nn.gelu": unary})
    config = {"backends": {"npu": {"max_level": 0}}}
    module = gelu_module()
    legal = legato.legalize(module, "npu", config=config, mode="analysis")
    assert legal.report.ops("decomposed") == {"nn.gelu": 1}
    parted = partition(module, ["npu", "cpu_ref"], config)
    assert "nn.gelu" not in region_ops(parted, "npu")
    assert "exp" in region_ops(parted, "npu")
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(legato.compile(module, ["npu", "cpu_ref"], config)(x),
                               legato.reference(module)(x), rtol=1e-5, atol=1e-6)


def test_a_kept_op_an_emitter_can_neither_emit_nor_tunnel_is_not_claimed(backend_factory):
    # partition used to claim it because the backend had a kernel for it; legalize fails
    backend_factory({"backend": "emits", "executes": False, "legal": {"nn.gelu": {}}},
                    kernels={"exp": unary})
    config = {"backends": {"emits": {"keep": ["exp"]}}}
    module = gelu_module()
    with pytest.raises(legato.LegalizationError, match="(?s)kept by config.*native: emits "
                                                       "does not list exp"):
        legato.legalize(module, "emits", config=config)
    exp = module.main.calls[0]
    assert legato.get_backend("emits").decide(exp, BackendConfig(keep=frozenset({"exp"}))
                                               ).rule == KEPT
    parted = partition(module, ["emits", "cpu_ref"], config)
    assert region_ops(parted, "emits") == ["nn.gelu"]
    assert region_ops(parted, "cpu_ref") == ["exp"]


def test_a_custom_call_goes_to_the_backend_that_takes_custom_ops(backend_factory):
    # legalize keeps a custom call for a custom_ops backend; partition used to leave it out
    backend_factory({"backend": "tunnel", "executes": False, "custom_ops": True,
                     "legal": {"add": {}}})
    module = gelu_module()
    low = legato.legalize(module, "tunnel", config={"backends": {"tunnel": {
        "keep": ["nn.gelu"]}}}, mode="partial")
    custom = next(c for c in low.module.main.calls if c.op == "custom")
    assert legato.legalize(low.module, "tunnel", mode="analysis").report.ops("custom") \
        == {"custom": 1}
    parted = partition(low.module, ["tunnel"])
    assert region_ops(parted, "tunnel") == ["custom"]
    assert owner([(legato.get_backend("tunnel"), BackendConfig())], custom,
                 legato.context().registry) == "tunnel"


def test_partition_and_legalize_agree_call_by_call(backend_factory):
    backend_factory({"backend": "npu", "fallback": "cpu_ref",
                     "legal_from_kernels": {"dtypes": ["float32"]}},
                    kernels={"exp": unary, "add": binary, "multiply": binary,
                             "nn.softmax": unary, "nn.layer_norm": layer_norm})
    config = {"backends": {"npu": {"decompose": ["nn.softmax"]}}}
    module = legato.load_model("example:transformer")
    actions: dict = {}
    for entry in legato.legalize(module, "npu", config=config).report.entries:
        actions.setdefault(entry["op"], set()).add(entry["action"])
    parted = partition(module, ["npu"], config)
    claimed = set(region_ops(parted, "npu"))
    assert {"exp", "add", "nn.layer_norm"} <= claimed and "nn.softmax" not in claimed
    for op in claimed:
        assert actions[op] <= TAKEN, (op, actions[op])
    for call in parted.main.calls:
        if call.op != legato.CALL_OP:
            assert not actions[call.op] & TAKEN, (call.op, actions[call.op])


def test_partition_is_a_pass():
    module = gelu_module()
    result, modified = PartitionPass(["cpu_ref"])(module)
    assert modified and region_ops(result, "cpu_ref")


def rank_at_most_2(call):
    return None if all(v.rank <= 2 for v in call.inputs if v is not None) else "rank > 2"


def test_custom_ops_conditions_say_which_calls_a_backend_tunnels(backend_factory):
    backend_factory({"backend": "tunnel", "executes": False, "legal": {"add": {}},
                     "custom_ops": {"dtypes": ["float32"], "check": rank_at_most_2}})
    config = {"backends": {"tunnel": {"keep": ["nn.gelu"]}}}
    low = legato.legalize(gelu_module(), "tunnel", config=config, mode="partial")
    assert low.report.ops("custom") == {"nn.gelu": 1}
    for shape, dtype, reason in [((2, 4), "float16", "dtype float16 not in ['float32']"),
                                 ((1, 2, 4), "float32", "rank > 2")]:
        b = legato.GraphBuilder()
        module = b.build(b.call("nn.gelu", b.input("x", shape, dtype)))
        with pytest.raises(legato.LegalizationError, match=(
                r"(?s)kept by config.*\n  - native: tunnel does not list nn.gelu as legal\n"
                r"  - custom op: tunnel takes custom ops but not for " + re.escape(reason))):
            legato.legalize(module, "tunnel", config=config)
        # partition agrees: nothing to tunnel, so gelu is decomposed and only add claimed
        assert set(region_ops(partition(module, ["tunnel"], config), "tunnel")) == {"add"}


@pytest.mark.parametrize("value, match", [
    (1, r"key 'custom_ops' must be true or false, or the conditions of the calls it "
        r"tunnels, got 1"),
    ({"attrs": {"axis": 0}}, r"custom_ops.attrs: attributes differ from op to op"),
    ({"dtype": ["float32"]}, r"unknown key custom_ops.'dtype' \(did you mean 'dtypes'\?\)"),
    ({"ranks": [-1]}, r"custom_ops.ranks: expected a list of ranks"),
])
def test_malformed_custom_ops_conditions_are_config_errors(value, match):
    with pytest.raises(legato.ConfigError, match=r"<capability file dict>: " + match):
        legato.register_backend({"backend": "tunnel", "executes": False,
                                 "custom_ops": value})


def no_constant_operand(call):
    return "a constant operand" if any(isinstance(v, legato.Const) for v in call.inputs) \
        else None


@pytest.mark.parametrize("const_first", [True, False])
def test_a_check_that_tells_constants_from_values_is_asked_for_each(backend_factory,
                                                                    const_first):
    backend_factory({"backend": "npu", "executes": False,
                     "legal": {"add": {"check": no_constant_operand}}, "custom_ops": {
                         "check": no_constant_operand}})
    b = legato.GraphBuilder()
    x = b.input("x", (3,))
    c = b.const(np.ones(3, np.float32))
    first, second = (c, x) if const_first else (x, c)
    y = b.call("add", x, first)
    module = b.build(b.call("add", y, second), b.call("nn.gelu", first),
                     b.call("nn.gelu", second))
    low = legato.legalize(module, "npu", config={"backends": {"npu": {"keep": ["nn.gelu"]}}},
                          mode="analysis")
    actions = {(e["op"], e["action"]): e["count"] for e in low.report.entries}
    assert actions[("add", "legal")] == 1 and actions[("add", "failed")] == 1
    assert actions[("nn.gelu", "custom")] == 1 and actions[("nn.gelu", "failed")] == 1
