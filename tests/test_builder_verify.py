"""GraphBuilder.build's verification: the result types of the calls the builder made were
derived by make_call with the builder's registry, so build derives them once; every call
it did not make (appended by hand, or a copy with other inputs) is derived again and a
wrong type is refused as before."""
import dataclasses

import numpy as np
import pytest

import legato
from legato import IRError
from legato.ir import Attrs, Call, Origin, TensorType, Value
from legato.ops.registry import OpDef


def counting(monkeypatch) -> list[str]:
    """The op names whose types are derived from now on, one entry per derivation."""
    seen: list[str] = []
    derive = OpDef.infer_types

    def infer_types(self, input_types, attrs):
        seen.append(self.name)
        return derive(self, input_types, attrs)
    monkeypatch.setattr(OpDef, "infer_types", infer_types)
    return seen


def relu_add():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    y = b.call("nn.relu", x)
    return b, x, b.call("add", y, np.ones(3, np.float32))


def test_build_derives_each_builder_calls_types_once(monkeypatch):
    seen = counting(monkeypatch)
    b, _, z = relu_add()
    module = b.build(z)
    assert seen == ["nn.relu", "add"]   # by make_call; build's verify did not repeat them
    assert module.main.results[0].type == TensorType((2, 3), "float32")
    legato.verify(module)               # a plain verify still derives them all
    assert seen == ["nn.relu", "add", "nn.relu", "add"]


def test_a_call_appended_by_hand_is_still_checked():
    b, x, z = relu_add()
    wrong = Value(TensorType((3, 2), "float32"))
    b.calls.append(Call("nn.relu", (x,), Attrs({}), (wrong,)))
    with pytest.raises(IRError, match=r"call 2 \(nn.relu\): result types \['float32\[3, 2\]'\] "
                                      r"differ from the inferred \['float32\[2, 3\]'\]"):
        b.build(z, wrong)


def test_a_copy_of_a_builder_call_is_known_only_with_the_same_inputs(monkeypatch):
    b, x, z = relu_add()
    relu = b.calls[0]
    # another origin (the ONNX importer names each call's node): the same call still
    b.calls[0] = dataclasses.replace(relu, origin=Origin("nn.relu", relu.attrs, "n1"))
    seen = counting(monkeypatch)
    b.build(z)
    assert seen == []
    # other inputs (of another shape): derived, and refused
    other = b.input("w", (4, 3), "float32")
    b.calls[0] = dataclasses.replace(relu, inputs=(other,))
    with pytest.raises(IRError, match=r"call 0 \(nn.relu\): result types"):
        b.build(z)
    assert seen == ["nn.relu"]


@pytest.mark.parametrize("attrs, message", [
    ({"axis": -1.0}, "attribute axis=-1.0 must be of type int"),
    ({}, "not in normal form"),
])
def test_attributes_of_calls_made_elsewhere_are_checked(attrs, message):
    b, x, _ = relu_add()
    out = Value(TensorType((2, 3), "float32"))
    b.calls.append(Call("nn.softmax", (x,), Attrs(attrs), (out,)))
    with pytest.raises(IRError, match=rf"call 2 \(nn.softmax\): .*{message}"):
        b.build(out)
