"""The converter table of the ONNX importer and the per-node view converters work on.

A converter is a small function `fn(node) -> Value | tuple` registered for one or more
ONNX op types with `@converter("Add", ...)`; the table refuses a second converter for an op
type. `const_inputs` names the input positions that must be known at import time (shapes,
axes, pads): legato has static shapes, so these become attributes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...ir.errors import LegatoError
from ...ir import Const, Value
from ..common.fold import dequantized
from .tensors import onnx_dtype, quote

# onnx_dtype lives with the tensors; the converters keep importing it from here
__all__ = ["CONVERTERS", "Converter", "DOMAIN_CONVERTERS", "MAX_GENERATED", "Node", "Refused",
           "converter", "converter_of", "onnx_dtype"]


@dataclass(frozen=True)
class Converter:
    op_type: str
    fn: Callable
    const_inputs: tuple[int, ...] = ()
    # where onnx has no schema (at the model's opset): a function returning an OpSchema
    schema: Callable | None = None


class Refused(LegatoError):
    """What legato declines with a stated reason rather than for want of a converter:
    random sampling, training-only behaviour, control flow or shapes that depend on the
    data, models onnx's version converter cannot upgrade faithfully."""


CONVERTERS: dict[str, Converter] = {}   # the default domain's
# other domains' converters (onnxruntime's com.microsoft ops), by domain and op type
DOMAIN_CONVERTERS: dict[str, dict[str, Converter]] = {"": CONVERTERS, "ai.onnx": CONVERTERS}
MAX_GENERATED = 1 << 24   # elements of a constant a converter derives from shapes


def converter(*op_types: str, const_inputs: tuple[int, ...] = (), domain: str = "",
              schema=None):
    """Register the decorated function as the converter of `op_types` in `domain`;
    `schema` returns the op's OpSchema where onnx has none (an onnxruntime op)."""
    table = DOMAIN_CONVERTERS.setdefault(domain, {})

    def register(fn):
        for op_type in op_types:
            if op_type in table:
                raise LegatoError(f"ONNX op {domain or 'ai.onnx'}.{op_type} already has a "
                                  f"converter ({table[op_type].fn.__name__})")
            table[op_type] = Converter(op_type, fn, tuple(const_inputs), schema)
        return fn
    return register


def converter_of(domain: str, op_type: str) -> Converter | None:
    return DOMAIN_CONVERTERS.get(domain, {}).get(op_type)


class Node:
    """One ONNX node as a converter sees it: inputs as legato values, attributes as Python
    values, constant inputs as numpy arrays, and the GraphBuilder `b` to emit calls."""

    def __init__(self, b, proto, inputs, attrs: dict, opset: int, fields=None):
        # fields: the node's nodes.NodeFields, where the importer read them already
        self.b, self.proto, self.opset = b, proto, opset
        self.op = proto.op_type if fields is None else fields.op_type
        name = proto.name if fields is None else fields.name
        self.name = name or f"<unnamed {self.op}>"
        self.inputs: list[Value | None] = inputs
        self.attrs = attrs
        self.outputs = list(proto.output if fields is None else fields.outputs)

    @functools.cached_property
    def label(self) -> str:
        """The node's name for messages (bounded; made when a message needs it)."""
        return quote(self.name)

    def input(self, index: int) -> Value | None:
        """Optional input `index`: None when absent or left empty."""
        return self.inputs[index] if index < len(self.inputs) else None

    def arg(self, index: int) -> Value:
        """Required input `index`: a LegatoError naming it when it is missing."""
        value = self.input(index)
        if value is None:
            self.fail(f"input {index} is required but missing")
        return value

    def args(self) -> list[Value]:
        """Every input, each required (variadic operands)."""
        return [self.arg(i) for i in range(len(self.inputs))]

    def attr(self, name: str, default=None):
        """An attribute's value. Types were checked against the operator schema before
        conversion, so an INT attribute is an int, an INTS one a list of ints, ..."""
        return self.attrs.get(name, default)

    def axis(self, name: str, rank: int, default: int | None = None) -> int:
        """An axis attribute normalised to [0, rank), or a LegatoError naming it."""
        axis = self.attr(name, default)
        if not -rank <= axis < rank:
            self.fail(f"attribute {name!r} = {axis} is out of range for an input of rank {rank}")
        return axis % rank

    def flag(self, name: str, default: int) -> bool:
        """A 0/1 attribute (keepdims, transA, ...): other values have no agreed meaning."""
        value = self.attr(name, default)
        if value not in (0, 1):
            self.fail(f"attribute {name!r} = {value} must be 0 or 1")
        return bool(value)

    def positive(self, name: str, default: int) -> int:
        """An attribute that counts something: an int of at least 1."""
        value = self.attr(name, default)
        if not value >= 1:
            self.fail(f"attribute {name!r} = {value} must be at least 1")
        return value

    def const(self, index: int, default=None) -> np.ndarray | None:
        """The value of input `index`, which must be known at import time (or absent)."""
        value = self.input(index)
        if value is None:
            return default
        made = None if isinstance(value, Const) else next(
            (c for c in reversed(self.b.calls) if value in c.outputs), None)
        if made is not None and (data := dequantized(made)) is not None:
            return data
        if not isinstance(value, Const):
            self.fail(f"input {index} ({self.proto.input[index]!r}) must be a constant "
                      "(initializer, Constant node or a folded shape computation): legato "
                      "has static shapes")
        return value.data

    def ints(self, index: int, default=None) -> list[int] | None:
        """A constant integer input (shape, axes, pads, ...) as a list."""
        data = self.const(index)
        if data is None:
            return default
        if data.dtype == object:  # sizes, some of them symbolic (shape_const)
            return list(np.ravel(data))
        if data.dtype.kind not in "iu":  # (formatting a dtype costs microseconds: on failure)
            self.fail(f"input {index} must hold integers, not {data.dtype}")
        return np.ravel(data).tolist()

    def scalar(self, index: int, default=None):
        """A constant input that holds one value."""
        data = self.const(index)
        if data is None:
            return default
        if data.size != 1:
            self.fail(f"input {index} must hold one value, not {data.size}")
        return np.ravel(data)[0].item()

    def wants(self, index: int) -> bool:
        """Whether output `index` is used (present and named)."""
        return index < len(self.outputs) and bool(self.outputs[index])

    def budget(self, elements: int, what: str) -> None:
        """Refuse to build a constant of `elements` elements derived from declared shapes
        beyond MAX_GENERATED: a model must not make the importer allocate without bound."""
        self.require(elements <= MAX_GENERATED, f"{what} would be a constant of {elements} "
                                                f"elements, more than the importer builds "
                                                f"({MAX_GENERATED})")

    def call(self, op: str, *inputs, **attrs):
        return self.b.call(op, *inputs, **attrs)

    def fail(self, message: str):
        raise LegatoError(f"{self.op} node {self.label}: {message}")

    def refuse(self, reason: str):
        raise Refused(f"{self.op} node {self.label}: {reason}")

    def require(self, condition, message: str):
        """A LegatoError with `message` unless `condition`; the message is built before the
        call, so per-node helpers that pass formatted values test first instead."""
        if not condition:
            self.fail(message)
