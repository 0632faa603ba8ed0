"""IR: types, immutability, builder checks, verifier, text round trip."""
import dataclasses

import numpy as np
import pytest

import legato
from legato.frontends.examples import EXAMPLES
from legato.ir import Attrs, Call, Function, Module, TensorType, Value


def layer_norm_module():
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8), "float32")
    g = b.const(np.ones(8, np.float32))
    y = b.call("nn.layer_norm", x, g, None, axes=[-1], epsilon=1e-5)
    return b.build(y)


def test_public_contract_example_round_trips():
    mod = layer_norm_module()
    text = str(mod)
    assert "nn.layer_norm(%x, %c" in text and "None" in text
    assert legato.structural_equal(legato.parse(text), mod)
    call = mod.main.calls[0]
    assert call.op == "nn.layer_norm" and call.attrs["axes"] == [-1]
    assert call.attrs["epsilon"] == 1e-5 and call.inputs[2] is None
    assert call.output.type == TensorType((4, 8), "float32")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_round_trips_through_text(name):
    mod = legato.load_model(f"example:{name}")
    again = legato.parse(str(mod))
    assert legato.structural_equal(again, mod)
    assert str(again) == str(mod)


def test_round_trip_keeps_origin_kinds_attrs_and_several_results():
    b = legato.GraphBuilder()
    x = b.input("x", (4, 6))
    first, second = b.call("split", x, sections=[2, 4], axis=1)
    big = b.const(np.arange(100, dtype=np.float32).reshape(4, 25))  # base64-encoded
    y = b.call("concat", first, second, axis=1)
    mod = b.build(y, b.call("sum", big, axes=[1]))
    low = legato.legalize(layer_norm_module(), backend="cpu_ref").module
    assert all(c.origin is not None for c in low.main.calls)
    for m in (mod, low):
        assert legato.structural_equal(legato.parse(str(m)), m)
    prim = Function(mod.main.params, mod.main.calls, mod.main.results, "external",
                    Attrs({"codegen": "npu", "tile": [8, 8]}))
    both = Module({"main": mod.main, "region": prim})
    again = legato.parse(str(both))
    assert again.functions["region"].kind == "external"
    assert again.functions["region"].attrs["codegen"] == "npu"
    assert legato.structural_equal(again, both)


def test_structural_equal_detects_differences():
    a = layer_norm_module()
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8), "float32")
    g = b.const(np.full(8, 2.0, np.float32))
    other = b.build(b.call("nn.layer_norm", x, g, None))
    assert not legato.structural_equal(a, other)
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8), "float32")
    eps = b.build(b.call("nn.layer_norm", x, b.const(np.ones(8, np.float32)), None,
                         epsilon=1e-3))
    assert not legato.structural_equal(a, eps)


def test_ir_objects_are_immutable():
    mod = layer_norm_module()
    call = mod.main.calls[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.op = "add"
    with pytest.raises(AttributeError):
        mod.functions_ = {}
    with pytest.raises(TypeError):
        mod.functions["main"] = mod.main
    with pytest.raises(TypeError):
        call.attrs["epsilon"] = 1.0
    with pytest.raises(ValueError):
        call.inputs[1].data[0] = 5.0
    assert isinstance(call.attrs["axes"], tuple)


def test_attr_lists_compare_equal_to_lists_and_hash():
    attrs = Attrs({"axes": [0, 1], "nested": [[1, 2], [3]]})
    assert attrs["axes"] == [0, 1] and attrs["axes"] == (0, 1) and attrs["axes"] != [1, 0]
    assert hash(attrs) == hash(Attrs({"axes": (0, 1), "nested": ((1, 2), (3,))}))
    assert attrs.to_json() == {"axes": [0, 1], "nested": [[1, 2], [3]]}
    with pytest.raises(legato.IRError, match="not JSON-like"):
        Attrs({"bad": object()})


def test_builder_reports_unknown_op_with_suggestion():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(legato.OpError, match=r"unknown op 'nn.layer_nrom'.*'nn.layer_norm'"):
        b.call("nn.layer_nrom", x)


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("add", [(2, 3), (4, 3)], {}, r"add\(float32\[2, 3\], float32\[4, 3\]\).*do not broadcast"),
    ("matmul", [(2, 3), (4, 5)], {}, "inner dimensions differ"),
    ("reshape", [(2, 3)], {"shape": [4, 2]}, "cannot reshape"),
    ("sum", [(2, 3)], {"axes": [2]}, "out of range"),
    ("nn.conv2d", [(1, 3, 5, 5), (4, 2, 3, 3)], {}, "do not match"),
    ("nn.softmax", [(2, 3)], {"axis": 5}, "out of range"),
    ("concat", [(2, 3), (2, 4)], {"axis": 0}, "cannot concatenate"),
])
def test_shape_errors_name_op_types_and_reason(op, shapes, attrs, message):
    b = legato.GraphBuilder()
    values = [b.input(f"x{i}", s) for i, s in enumerate(shapes)]
    with pytest.raises(legato.ShapeError, match=message):
        b.call(op, *values, **attrs)


@pytest.mark.parametrize("attrs, message", [
    ({"axes": [-1], "epsilonn": 1e-5}, r"unknown attribute 'epsilonn'.*'epsilon'"),
    ({"epsilon": "small"}, r"epsilon='small' must be of type float"),
    ({"axes": -1}, "must be of type ints"),
])
def test_attribute_errors(attrs, message):
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(legato.OpError, match=message):
        b.call("nn.layer_norm", x, None, None, **attrs)


def test_arity_and_required_inputs_are_checked():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(legato.OpError, match="takes 2 inputs, got 1"):
        b.call("add", x)
    with pytest.raises(legato.OpError, match="input 1 .weight. is required"):
        b.call("nn.linear", x, None, None)
    with pytest.raises(legato.OpError, match="choices|must be one of"):
        b.call("nn.gelu", x, approximate="fast")


def test_verifier_rejects_broken_functions():
    x = Value(TensorType((2,), "float32"), "x")
    dangling = Value(TensorType((2,), "float32"))
    y = Value(TensorType((2,), "float32"))
    bad_input = Call("add", (x, dangling), Attrs(), (y,))
    with pytest.raises(legato.IRError, match="not defined before use"):
        legato.verify(Module({"main": Function((x,), (bad_input,), (y,))}))
    wrong_type = Call("add", (x, x), Attrs(), (Value(TensorType((3,), "float32")),))
    with pytest.raises(legato.IRError, match="differ from the inferred"):
        legato.verify(Module({"main": Function((x,), (wrong_type,), wrong_type.outputs)}))
    with pytest.raises(legato.IRError, match="result .* is not defined"):
        legato.verify(Module({"main": Function((x,), (), (y,))}))
    with pytest.raises(legato.IRError, match="kind"):
        Function((x,), (), (x,), "weird")


@pytest.mark.parametrize("text, message", [
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  return %y\n}", r"line 2: %y is not defined"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = add(%x, %x) : float32[2]\n",
     "no closing"),
    ("func @main(%x: float33[2]) -> (float32[2]) {\n  return %x\n}", "unknown dtype"),
    ("func @other(%x: float32[2]) -> (float32[2]) {\n  return %x\n}", "no function @main"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = add(%x, %x) {\"a\": } : "
     "float32[2]\n  return %0\n}", "line 2: bad JSON"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %c = const float32[3] [1.0]\n"
     "  return %x\n}", "line 2: bad constant data"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = add(%x, %x) : float32[3]\n"
     "  return %0\n}", "differ from the inferred"),
])
def test_parse_errors_name_the_line(text, message):
    with pytest.raises(legato.IRError, match=message):
        legato.parse(text)


def test_tensor_type_validation():
    with pytest.raises(legato.IRError, match="unknown dtype"):
        TensorType((2,), "float8")
    with pytest.raises(legato.IRError, match="negative"):
        TensorType((-1,), "float32")
