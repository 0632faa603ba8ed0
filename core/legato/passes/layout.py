"""Layout conversion: `convert_layout(module, "NHWC")` (or back to "NCHW").

Every value is tracked as (new value, perm) with `original == permute_dims(new, perm)`.
Layout-sensitive ops have rules, registered with the ops, that run them in the target
layout (conv and pool switch data_layout; softmax, reductions, concat, split and norms
remap their axes); elementwise ops carry the perm through, so the transposes between two
convolutions cancel. An op without a rule gets its inputs permuted back to the original
layout, which is always sound. Results leave in the original layout.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir import CALL_OP, Call, Const, Function, Module, Value
from ..ir.calls import Emitter
from ..ir.errors import LegatoError
from ..ops import REGISTRY
from ..ops.layout_rules import (LAYOUTS, Perm, compose_perms, data_layout, inverse_perm,
                                layout_perm, propagate)
from .manager import FunctionPass

__all__ = ["LAYOUTS", "ConvertLayout", "convert_layout", "layout_perm",
           "register_layout_rule"]


class _Context:
    """The emitter and the value map of one function's conversion."""

    def __init__(self, registry, target: str):
        self.b, self.target, self.registry = Emitter(registry), target, registry
        self.values: dict[Value, tuple[Value, Perm | None]] = {}

    def get(self, v):
        if v is None or isinstance(v, Const):
            return v, None
        return self.values.get(v, (v, None))

    def original(self, v) -> Value | None:
        """`v` in its original layout."""
        new, perm = self.get(v)
        return new if perm is None else self._permute(new, perm)

    def in_perm(self, v, perm: Perm | None) -> Value:
        """`v` laid out so that original == permute_dims(result, perm)."""
        new, current = self.get(v)
        if isinstance(new, Const):
            return new if perm is None else Const.of(np.transpose(new.data, inverse_perm(perm)))
        if current == perm:
            return new
        step = inverse_perm(perm) if current is None else compose_perms(current, inverse_perm(perm))
        return self._permute(new, step)

    def _permute(self, value, perm):
        return value if perm is None else self.b.permute_dims(value, axes=list(perm))

    def emit(self, call: Call, inputs, **attrs) -> Call:
        merged = dict(call.attrs)
        merged.update(attrs)
        self.b.origin = call.origin
        self.b.call(call.op, *inputs, **merged)
        return self.b.calls[-1]


Rule = Callable[[_Context, Call], "list[tuple[Value, Perm | None]] | None"]


def register_layout_rule(*ops: str, registry=None) -> Callable[[Rule], Rule]:
    """Attach a layout rule to ops defined elsewhere (a plugin's ops; core ops name theirs
    in their definition): it returns (new value, perm) per result, or None to fall back
    to running the op in the original layout."""
    def attach(rule: Rule) -> Rule:
        for op in ops:
            (registry or REGISTRY).get(op).layout_rule = rule
        return rule
    return attach


def _default(ctx: _Context, call: Call):
    new = ctx.emit(call, [ctx.original(v) for v in call.inputs])
    return [(o, None) for o in new.outputs]


def _elementwise(ctx: _Context, call: Call):
    """An elementwise op carries the perm (layout_rules.propagate). An operand of one value
    (a scalar, or a size-1 vector: a quantized op's scale or zero point) passes as it is,
    since every layout broadcasts it alike and a quantized op needs it to stay one value.
    An `axis` attribute (the axis per-axis quantization parameters run along) follows the
    perm, and the op's lower-rank operands, indexed along it, pass as they are."""
    perm = next((ctx.get(v)[1] for v in call.inputs if v is not None and
                 ctx.get(v)[1] is not None), None)
    along = "axis" in call.attrs
    if perm is None or call.outputs[0].rank != len(perm):
        return None
    inputs = []
    for v in call.inputs:
        if v is not None and v.rank == len(perm):
            inputs.append(ctx.in_perm(v, perm))
        elif v is None or along or v.type.size == 1:
            inputs.append(ctx.original(v))
        else:  # a broadcast operand of lower rank: propagate aligns constants
            return propagate(ctx, call)
    attrs = {"axis": perm[call.attrs["axis"] % len(perm)]} if along else {}
    new = ctx.emit(call, inputs, **attrs)
    return [(o, perm) for o in new.outputs]


def _rule_for(ctx: _Context, call: Call):
    """The op's own rule; else from its definition: an op with a `data_layout` attribute
    runs in the target layout (its data is its first input, as for the convolutions and
    pools), an elementwise op carries the perm unless an integer attribute other than
    `axis` (a shape, axes) would need a rule of its own."""
    opdef = ctx.registry.get(call.op)
    rule = getattr(opdef, "layout_rule", None)
    specs = opdef.attr_specs
    if rule is None and "data_layout" in specs:
        rule = data_layout
    elif rule is None and opdef.elementwise and not any(
            spec.type.startswith("int") for key, spec in specs.items() if key != "axis"):
        rule = _elementwise
    return rule


class ConvertLayout(FunctionPass):
    """Run layout-sensitive ops in `layout` (NCHW or NHWC); see the module docstring."""

    name = "convert-layout"

    def __init__(self, layout: str, registry=None, keep=()):
        if layout not in LAYOUTS:
            raise LegatoError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        self.layout, self.registry = layout, registry or REGISTRY
        self.keep = frozenset(keep)  # ops a user keeps stay exactly as written

    def run_function(self, name: str, fn: Function, module: Module):
        ctx = _Context(self.registry, self.layout)
        for call in fn.calls:
            if call.op == CALL_OP:  # a function call: its callee expects the original layout
                outs = tuple(Value(o.type, o.name) for o in call.outputs)
                ctx.b.calls.append(Call(call.op, tuple(ctx.original(v) for v in call.inputs),
                                        call.attrs, outs, call.origin))
                ctx.values.update((old, (new, None)) for old, new in zip(call.outputs, outs))
                continue
            rule = None if call.op in self.keep else _rule_for(ctx, call)
            outs = rule(ctx, call) if rule is not None else None
            if outs is None:
                outs = _default(ctx, call)
            for old, (new, perm) in zip(call.outputs, outs):
                ctx.values[old] = (new, perm)
        results = tuple(ctx.original(r) for r in fn.results)
        calls = ctx.b.calls
        if len(calls) == len(fn.calls) and all(
                a.op == b.op and a.attrs == b.attrs for a, b in zip(calls, fn.calls)):
            return fn, False
        return Function(fn.params, tuple(calls), results, fn.kind, fn.attrs), True


def convert_layout(module: Module, layout: str, registry=None, keep=()) -> Module:
    """The module with layout-sensitive ops in `layout`; results keep their layout. Ops in
    `keep` are left in their original layout (with transposes around them if needed)."""
    return ConvertLayout(layout, registry, keep).run(module)[0]
