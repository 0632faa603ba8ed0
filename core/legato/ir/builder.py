"""Building IR: GraphBuilder, what users write models with.

Calls are created by `legato.ir.calls.make_call` (shared with decompositions), which checks
each call as it is added. A builder without a registry uses the context's (core and plugin
ops), so a plugin's op resolves in a fresh process.
"""
from __future__ import annotations

from typing import Sequence

from ..ops import REGISTRY as CORE_REGISTRY
from ..plugins.context import context, unknown_op_note
from .calls import (Emitter, Recorder, literal, make_call, run_decomposition,
                    scalar_const, trace_decomposition)
from .errors import IRError, OpError, quote
from .graph import Attrs, Function, Module, TensorType, Value
from .verify import verify

# the low-level names stay importable from here
__all__ = ["Emitter", "GraphBuilder", "literal", "make_call", "run_decomposition",
           "scalar_const", "trace_decomposition", "default_registry", "plugin_registry"]


def plugin_registry():
    """The context's registry: core ops and the ops of installed plugins."""
    return context().registry


def default_registry():
    """The core ops' registry, without loading plugins (for code that runs while legato
    is being imported: plugins import legato)."""
    return CORE_REGISTRY


class GraphBuilder(Recorder):
    """Build a module call by call (see the README for an example)."""

    def __init__(self, registry=None):
        super().__init__(registry if registry is not None else context().registry)
        self.params: list[Value] = []
        self._param_names: set = set()
        # {id(call.outputs): call} of the calls `call` made: make_call derived their types
        # with self.registry, so build's verify need not derive them again
        self._inferred: dict[int, object] = {}

    def call(self, op: str, *inputs, **attrs):
        try:
            result = super().call(op, *inputs, **attrs)
        except OpError as err:
            note = unknown_op_note(op, self.registry)
            if not note:
                raise
            raise OpError(f"{err}{note}") from None
        made = self.calls[-1]
        self._inferred[id(made.outputs)] = made
        return result

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Value:
        if name in self._param_names:
            raise IRError(f"input {quote(name)} is already defined")
        value = Value(TensorType(tuple(shape), dtype), name)
        self.params.append(value)
        self._param_names.add(name)
        return value

    def function(self, *results: Value, kind: str = "default", attrs=None) -> Function:
        if not results:
            raise IRError("a function needs at least one result")
        for r in results:
            if not isinstance(r, Value):
                raise IRError(f"result {r!r} is not a Value")
        return Function(tuple(self.params), tuple(self.calls), tuple(results), kind,
                        Attrs(attrs or {}))

    def build(self, *results: Value) -> Module:
        """The module whose `main` returns `results`; verified before it is returned."""
        module = Module({"main": self.function(*results)})
        verify(module, self.registry, self._inferred)
        return module
