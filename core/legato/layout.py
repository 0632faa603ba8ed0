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

from .builder import Emitter
from .errors import LegatoError
from .ir import Call, Const, Function, Module, Value
from .passes import FunctionPass

LAYOUTS = ("NCHW", "NHWC")
Perm = tuple  # original = permute_dims(new, perm); None is the identity


def layout_perm(src: str, dst: str) -> Perm | None:
    """perm with tensor_in_src == permute_dims(tensor_in_dst, perm)."""
    perm = tuple(dst.index(c) for c in src)
    return None if perm == tuple(range(len(perm))) else perm


def _compose(first: Perm, then: Perm) -> Perm | None:
    perm = tuple(first[i] for i in then)
    return None if perm == tuple(range(len(perm))) else perm


def _inverse(perm: Perm) -> Perm:
    return tuple(int(i) for i in np.argsort(perm))


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
            return new if perm is None else Const.of(np.transpose(new.data, _inverse(perm)))
        if current == perm:
            return new
        step = _inverse(perm) if current is None else _compose(current, _inverse(perm))
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
    """Attach a layout rule to ops; it returns (new value, perm) per result, or None to
    fall back to running the op in the original layout."""
    def attach(rule: Rule) -> Rule:
        from .builder import default_registry
        for op in ops:
            (registry or default_registry()).get(op).layout_rule = rule
        return rule
    return attach


def _default(ctx: _Context, call: Call):
    new = ctx.emit(call, [ctx.original(v) for v in call.inputs])
    return [(o, None) for o in new.outputs]


def _first_perm(ctx, call):
    return next((ctx.get(v)[1] for v in call.inputs if ctx.get(v)[1] is not None), None)


def _propagate(ctx: _Context, call: Call):
    """Elementwise and broadcast ops: run on the permuted values, carry the perm."""
    perm = _first_perm(ctx, call)
    if perm is None:
        return None
    inputs = []
    for v in call.inputs:
        if v is None:
            inputs.append(None)
        elif v.rank == len(perm):
            inputs.append(ctx.in_perm(v, perm))
        elif isinstance(v, Const) and v.rank < len(perm):  # align a broadcast constant
            full = v.data.reshape((1,) * (len(perm) - v.rank) + v.data.shape)
            inputs.append(ctx.in_perm(Const.of(full), perm))
        elif v.rank == 0:
            inputs.append(v)
        else:
            return None
    new = ctx.emit(call, inputs)
    out_rank = new.outputs[0].rank
    if out_rank != len(perm):
        return None
    return [(o, perm) for o in new.outputs]


@register_layout_rule("nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d")
def _data_layout(ctx: _Context, call: Call):
    source = call.attrs["data_layout"]
    if source == ctx.target:
        return None
    perm = layout_perm(source, ctx.target)
    inputs = [ctx.in_perm(call.inputs[0], perm)] + [ctx.original(v) for v in call.inputs[1:]]
    new = ctx.emit(call, inputs, data_layout=ctx.target)
    return [(new.outputs[0], perm)]


@register_layout_rule("permute_dims")
def _permute_dims(ctx: _Context, call: Call):
    """Emit nothing: a transpose is a perm carried until a consumer needs it materialized,
    so permute pairs (ours and the model's) cancel."""
    new, perm = ctx.get(call.inputs[0])
    axes = call.attrs["axes"] or tuple(reversed(range(call.inputs[0].rank)))
    axes = tuple(a % call.inputs[0].rank for a in axes)
    if isinstance(new, Const):
        return None
    composed = tuple(axes) if perm is None else _compose(perm, axes)
    identity = tuple(range(len(axes)))
    return [(new, None if composed in (None, identity) else composed)]


@register_layout_rule("nn.softmax", "nn.log_softmax", "split")
def _one_axis(ctx: _Context, call: Call):
    new, perm = ctx.get(call.inputs[0])
    if perm is None:
        return None
    axis = call.attrs["axis"] % call.inputs[0].rank
    out = ctx.emit(call, [new], axis=perm[axis])
    return [(o, perm) for o in out.outputs]


@register_layout_rule("concat")
def _concat(ctx: _Context, call: Call):
    perm = _first_perm(ctx, call)
    if perm is None:
        return None
    axis = call.attrs["axis"] % call.inputs[0].rank
    out = ctx.emit(call, [ctx.in_perm(v, perm) for v in call.inputs], axis=perm[axis])
    return [(out.outputs[0], perm)]


@register_layout_rule("sum", "max", "min", "mean", "variance")
def _reduce(ctx: _Context, call: Call):
    new, perm = ctx.get(call.inputs[0])
    if perm is None:
        return None
    rank = len(perm)
    axes = range(rank) if call.attrs["axes"] is None else [a % rank for a in call.attrs["axes"]]
    out = ctx.emit(call, [new], axes=sorted(perm[a] for a in axes))
    if call.attrs["keepdims"]:
        return [(out.outputs[0], perm)]
    kept = [i for i in range(rank) if i not in set(axes)]
    kept_new = sorted(perm[i] for i in kept)
    out_perm = tuple(kept_new.index(perm[i]) for i in kept)
    return [(out.outputs[0], None if out_perm == tuple(range(len(kept))) else out_perm)]


@register_layout_rule("nn.layer_norm", "nn.rms_norm")
def _norm(ctx: _Context, call: Call):
    data, *params = call.inputs
    new, perm = ctx.get(data)
    if perm is None or any(p is not None and not isinstance(p, Const) for p in params):
        return None
    rank = len(perm)
    axes = sorted(perm[a % rank] for a in call.attrs["axes"])
    aligned = [None if p is None else ctx.in_perm(
        Const.of(p.data.reshape((1,) * (rank - p.rank) + p.data.shape)), perm) for p in params]
    out = ctx.emit(call, [new, *aligned], axes=axes)
    return [(out.outputs[0], perm)]


@register_layout_rule("nn.batch_norm")
def _batch_norm(ctx: _Context, call: Call):
    data, *params = call.inputs
    new, perm = ctx.get(data)
    if perm is None:
        return None
    out = ctx.emit(call, [new, *params], axis=perm[call.attrs["axis"] % data.rank])
    return [(out.outputs[0], perm)]


def _rule_for(ctx: _Context, call: Call):
    opdef = ctx.registry.get(call.op)
    rule = getattr(opdef, "layout_rule", None)
    if rule is None and opdef.kind in ("elemwise", "broadcast") and \
            opdef.name not in ("qnn.quantize", "qnn.dequantize"):  # per-axis parameters
        rule = _propagate
    return rule


class ConvertLayout(FunctionPass):
    """Run layout-sensitive ops in `layout` (NCHW or NHWC); see the module docstring."""

    name = "convert-layout"

    def __init__(self, layout: str, registry=None, keep=()):
        if layout not in LAYOUTS:
            raise LegatoError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        from .builder import default_registry
        self.layout, self.registry = layout, registry or default_registry()
        self.keep = frozenset(keep)  # ops a user keeps stay exactly as written

    def run_function(self, name: str, fn: Function, module: Module):
        ctx = _Context(self.registry, self.layout)
        for call in fn.calls:
            if call.op == "call":  # a function call: its callee expects the original layout
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
