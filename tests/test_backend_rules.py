"""Backend lowering rules and `check` conditions (docs/plugins.md, docs/yaml.md)."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir.errors import ConfigError, LegalizationError


def matmul_3d(b, call):
    """2-D matmul as reshapes around a 3-D one."""
    x, y = call.inputs
    if x.rank != 2 or y.rank != 2:
        return None
    z = b.matmul(b.reshape(x, shape=[1, *x.shape]), b.reshape(y, shape=[1, *y.shape]))
    return b.reshape(z, shape=list(call.outputs[0].shape))


def no_broadcast(call):
    shapes = {v.shape for v in call.inputs}
    return None if len(shapes) == 1 else "operands of different shapes"


def capability(**extra):
    cap = {"backend": "rules_npu", "executes": False,
           "legal": {"matmul": {"ranks": [3]}, "reshape": {}, "maximum": {},
                     "add": {"check": no_broadcast}, "broadcast_to": {}},
           "rules": {"matmul": matmul_3d}}
    cap.update(extra)
    return cap


def matmul_module(a=(4, 8), b=(8, 3)):
    g = legato.GraphBuilder()
    return g.build(g.matmul(g.input("a", a), g.input("b", b)))


def ops(module):
    return [c.op for c in module.main.calls]


def test_rule_rewrites_an_unsupported_form(backend_factory):
    backend_factory(capability())
    low = legato.legalize(matmul_module(), backend="rules_npu")
    assert ops(low.module) == ["reshape", "reshape", "matmul", "reshape"]
    assert [c.inputs[0].rank for c in low.module.main.calls if c.op == "matmul"] == [3]
    matmul = next(c for c in low.module.main.calls if c.op == "matmul")
    assert matmul.origin.rules == ("lower:matmul",)
    assert "lowering rule" in str(low.report)


def test_legal_forms_do_not_reach_the_rule(backend_factory):
    backend_factory(capability())
    low = legato.legalize(matmul_module((2, 4, 8), (2, 8, 3)), backend="rules_npu")
    assert ops(low.module) == ["matmul"]


def test_a_declining_rule_falls_back_to_the_decomposition(backend_factory):
    backend_factory(capability(rules={"nn.relu": lambda b, call: None}))
    g = legato.GraphBuilder()
    mod = g.build(g.call("nn.relu", g.input("x", (2, 3))))
    assert ops(legato.legalize(mod, backend="rules_npu").module) == ["maximum"]


def test_a_rule_result_is_legalized_again(backend_factory):
    """What a rule emits goes through the same steps: here add gets a broadcast_to."""
    def broadcast_add(b, call):
        x, y = call.inputs
        return b.add(x, b.broadcast_to(y, shape=list(x.shape)))
    backend_factory(capability(rules={"add": broadcast_add}))
    g = legato.GraphBuilder()
    mod = g.build(g.add(g.input("x", (2, 3)), g.input("y", (3,))))
    assert ops(legato.legalize(mod, backend="rules_npu").module) == ["broadcast_to", "add"]


def test_check_condition_sees_whole_shapes(backend_factory):
    backend = backend_factory(capability())
    g = legato.GraphBuilder()
    x, y = g.input("x", (2, 3)), g.input("y", (1, 3))
    mod = g.build(g.add(x, y), g.add(x, x))
    first, second = mod.main.calls
    assert backend.why_not(second) is None
    assert "different shapes" in backend.why_not(first)  # same ranks, so not a cached answer


def test_a_rule_that_reproduces_its_op_fails_with_a_loop_error(backend_factory):
    backend_factory(capability(rules={"matmul": lambda b, call: b.matmul(*call.inputs)}))
    with pytest.raises(LegalizationError, match="rewrite loop"):
        legato.legalize(matmul_module(), backend="rules_npu")
    part = legato.legalize(matmul_module(), backend="rules_npu", mode="partial")
    assert any("rewrite loop" in f for f in part.report.failures)


def test_a_rule_that_changes_types_is_an_error(backend_factory):
    backend_factory(capability(rules={"matmul": lambda b, call: call.inputs[0]}))
    with pytest.raises(LegalizationError, match="changed the types"):
        legato.legalize(matmul_module(), backend="rules_npu")


def test_forced_decomposition_wins_over_rules(backend_factory):
    backend_factory(capability(legal={"nn.relu": {}, "maximum": {}},
                               rules={"nn.relu": lambda b, call: pytest.fail("rule ran")}))
    g = legato.GraphBuilder()
    mod = g.build(g.call("nn.relu", g.input("x", (2, 3))))
    cfg = {"backends": {"rules_npu": {"decompose": ["nn.relu"]}}}
    assert ops(legato.legalize(mod, backend="rules_npu", config=cfg).module) == ["maximum"]


def test_rules_and_checks_as_module_references(backend_factory):
    cap = capability(rules={"matmul": "tests.test_backend_rules:matmul_3d"})
    cap["legal"]["add"] = {"check": "tests.test_backend_rules:no_broadcast"}
    backend = backend_factory(cap)
    assert ops(legato.legalize(matmul_module(), backend="rules_npu").module)[2] == "matmul"
    g = legato.GraphBuilder()
    mod = g.build(g.add(g.input("x", (2, 3)), g.const(np.ones((1, 3), np.float32))))
    assert "different shapes" in backend.why_not(mod.main.calls[0])


@pytest.mark.parametrize("key, value, message", [
    ("rules", {"matmull": matmul_3d}, "did you mean 'matmul'"),
    ("rules", {"matmul": "no_colon"}, "module:function"),
    ("rules", ["matmul"], "must map op names"),
    ("legal", {"add": {"check": 3}}, "legal.add.check"),
])
def test_bad_rules_and_checks_are_config_errors(backend_factory, key, value, message):
    with pytest.raises(ConfigError, match=message):
        backend_factory(capability(**{key: value}))


def test_unimportable_rule_names_the_backend_and_op(backend_factory):
    backend_factory(capability(rules={"matmul": "no_such_module:rule"}))
    with pytest.raises(legato.LegatoError, match="rules_npu rule for matmul"):
        legato.legalize(matmul_module(), backend="rules_npu")


def broken_check(call):
    raise KeyError("shape")


@pytest.mark.parametrize("mode", ["full", "partial"])
def test_a_check_that_raises_names_the_backend_op_and_check(backend_factory, mode):
    cap = capability()
    cap["legal"]["add"] = {"check": broken_check}
    backend_factory(cap)
    g = legato.GraphBuilder()
    mod = g.build(g.add(g.input("x", (2, 3)), g.input("y", (2, 3))))
    with pytest.raises(LegalizationError, match=r"backend rules_npu: check broken_check for "
                                                r"add raised KeyError: 'shape'"):
        legato.legalize(mod, backend="rules_npu", mode=mode)


@pytest.mark.parametrize("answer", [False, 0, ["too", "wide"]])
def test_a_check_must_answer_none_or_a_reason(backend_factory, answer):
    cap = capability()
    cap["legal"]["add"] = {"check": lambda call: answer}
    backend_factory(cap)
    g = legato.GraphBuilder()
    mod = g.build(g.add(g.input("x", (2, 3)), g.input("y", (2, 3))))
    with pytest.raises(LegalizationError, match="returned .*; expected None"):
        legato.legalize(mod, backend="rules_npu")


def test_a_check_reference_to_something_not_callable_is_a_config_error(backend_factory):
    cap = capability()
    cap["legal"]["add"] = {"check": "os:sep"}
    backend_factory(cap)
    g = legato.GraphBuilder()
    mod = g.build(g.add(g.input("x", (2, 3)), g.input("y", (2, 3))))
    with pytest.raises(ConfigError, match="backend rules_npu: check for add: 'os:sep' is a "
                                          "str, not a function"):
        legato.legalize(mod, backend="rules_npu")


def test_a_rule_that_raises_names_the_backend_and_rule(backend_factory):
    def buggy(b, call):
        return call.inputs[5]
    backend_factory(capability(rules={"matmul": buggy}))
    with pytest.raises(LegalizationError, match=r"rule lower:matmul of rules_npu failed on "
                       r"matmul.*: backend rules_npu: rule .*buggy for matmul raised IndexError"):
        legato.legalize(matmul_module(), backend="rules_npu")


@pytest.mark.parametrize("body, raised", [("1 / 0", "ZeroDivisionError"),
                                          ("raise SystemExit(2)", "SystemExit")])
def test_a_rule_module_that_raises_on_import_is_a_config_error(
        backend_factory, tmp_path, monkeypatch, body, raised):
    (tmp_path / "raising_rules_module.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    backend_factory(capability(rules={"matmul": "raising_rules_module:rule"}))
    with pytest.raises(ConfigError, match="rules_npu rule for matmul: cannot import "
                                          f"'raising_rules_module:rule': {raised}"):
        legato.legalize(matmul_module(), backend="rules_npu")


def test_a_checks_long_reason_is_cut_short(backend_factory):
    cap = capability()
    cap["legal"]["add"] = {"check": lambda call: "too wide " * 10_000}
    backend = backend_factory(cap)
    g = legato.GraphBuilder()
    mod = g.build(g.add(g.input("x", (2, 3)), g.input("y", (2, 3))))
    reason = backend.why_not(mod.main.calls[0])
    assert reason.startswith("rules_npu lists add as legal but not for too wide too wide")
    assert len(reason) < 600
