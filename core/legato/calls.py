"""Creating calls: `make_call` validates arity and attributes and infers the result types
at once, so a mistake is reported where it is made; `Emitter` records the calls a
decomposition or a rewrite writes. Both take the registry explicitly: this module sits
below the registries, the plugin host and the context, and imports none of them.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import OpError
from .ir import Attrs, Call, Const, Origin, Value


def make_call(registry, op: str, inputs: Sequence[Value | None], attrs,
              origin: Origin | None = None) -> Call:
    """Create a call: check arity and optional inputs, normalize attributes, infer types."""
    opdef = registry.get(op)
    if len(inputs) < len(opdef.inputs) and all(s.optional for s in opdef.inputs[len(inputs):]):
        inputs = tuple(inputs) + (None,) * (len(opdef.inputs) - len(inputs))  # omitted optionals
    opdef.check_arity(len(inputs))
    for index, value in enumerate(inputs):
        if value is None:
            if not opdef.input_spec(index).optional:
                raise OpError(f"{op}: input {index} ({opdef.input_spec(index).name}) "
                              f"is required but got None; signature is {opdef.signature()}")
        elif not isinstance(value, Value):
            raise OpError(f"{op}: input {index} is a {type(value).__name__}, not a Value")
    if not isinstance(attrs, Attrs):
        attrs = opdef.normalize_attrs(attrs)
    types = opdef.infer_types([None if v is None else v.type for v in inputs], attrs)
    opdef.check_consts(inputs, attrs)
    return Call(op, tuple(inputs), attrs, tuple(Value(t) for t in types), origin)


_SCALARS: dict = {}


def scalar_const(value, dtype: str) -> Const:
    """A rank-0 constant; shared between uses, as constants are immutable."""
    key = (type(value), value, dtype)
    const = _SCALARS.get(key)
    if const is None:
        if len(_SCALARS) >= 4096:
            _SCALARS.clear()
        const = _SCALARS[key] = Const.of(value, dtype=dtype)
    return const


class Recorder:
    """Shared core of GraphBuilder and Emitter: records calls, turns literals into consts."""

    def __init__(self, registry):
        self.registry = registry
        self.calls: list[Call] = []

    def const(self, array, dtype: str | None = None, name: str | None = None) -> Const:
        return Const.of(array, name, dtype)

    def scalar(self, value, dtype: str) -> Const:
        """A rank-0 constant of the given dtype (or of a value's dtype)."""
        if isinstance(dtype, Value):
            dtype = dtype.dtype
        return scalar_const(value, dtype)

    def _with_literals(self, inputs) -> list:
        # a literal takes the dtype of the data it meets: where(cond, x, 0.0) is x's dtype
        tensors = [v for v in inputs if isinstance(v, Value)]
        dtype = next((v.dtype for v in tensors if v.dtype != "bool"),
                     tensors[0].dtype if tensors else "float32")
        return [self._as_value(v, dtype) for v in inputs]

    def _as_value(self, item, dtype: str | None):
        if item is None or isinstance(item, Value):
            return item
        if isinstance(item, (bool, int, float)):
            return scalar_const(item, dtype)
        if isinstance(item, (np.ndarray, np.generic, list)):
            return Const.of(item, dtype=dtype if not isinstance(item, np.ndarray) else None)
        raise OpError(f"cannot use {type(item).__name__} as an op input")

    def call(self, op: str, *inputs, **attrs):
        """Append a call of `op`; returns its result (a tuple for several results)."""
        values = inputs
        for item in inputs:  # decompositions mostly pass values: no literals to convert
            if item is not None and not isinstance(item, Value):
                values = self._with_literals(inputs)
                break
        call = make_call(self.registry, op, values, attrs, self._origin())
        self.calls.append(call)
        return call.outputs[0] if len(call.outputs) == 1 else call.outputs

    def _origin(self):
        return None

    def __getattr__(self, name: str):
        # b.add(x, y), b.nn_softmax(x, axis=-1): sugar for b.call("add"/"nn.softmax", ...)
        if name.startswith("_"):
            raise AttributeError(name)
        op = name.replace("nn_", "nn.", 1).replace("qnn_", "qnn.", 1) \
            if name.startswith(("nn_", "qnn_")) else name
        if op not in self.registry:
            raise AttributeError(f"{type(self).__name__} has no attribute or op {name!r}")
        return lambda *inputs, **attrs: self.call(op, *inputs, **attrs)


class Emitter(Recorder):
    """What a decomposition writes into; stamps every call with its origin."""

    def __init__(self, registry, origin: Origin | None = None):
        super().__init__(registry)
        self.origin = origin

    def _origin(self):
        return self.origin


def run_decomposition(emitter: Emitter, opdef, inputs, attrs: Attrs) -> tuple[Value, ...]:
    result = opdef.decompose(emitter, *inputs, **attrs)
    results = result if isinstance(result, tuple) else (result,)
    for r in results:
        if not isinstance(r, Value):
            raise OpError(f"decomposition of {opdef.name} returned {type(r).__name__}, "
                          "not a Value")
    return results


def trace_decomposition(registry, opdef, input_types, attrs: Attrs):
    """Run a decomposition on fresh parameters; returns (calls, results)."""
    params = [None if t is None else Value(t) for t in input_types]
    emitter = Emitter(registry)
    results = run_decomposition(emitter, opdef, params, attrs)
    return emitter.calls, results


def literal(value: Any, dtype: str) -> Const:
    return Const.of(value, dtype=dtype)
