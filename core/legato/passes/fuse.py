"""Fusion into `primitive` functions that remember what they fused.

Chains of elemwise/broadcast/injective calls, and an out_elemwise_fusable producer
(matmul, conv) with its elementwise consumers, become module-level `primitive` functions
called from their parent. `op_info` answers, for each fused call, its op name, attributes,
pattern kind and origin (the high-level op and attributes it came from), so a backend can
claim a fused function by reading facts instead of pattern-matching code.
"""
from __future__ import annotations

from ..ir import CALL_OP, Attrs, Call, Function, Module
from ..plugins.context import context
from .manager import ModulePass, PassResult
from .regions import group_calls, lift_regions

# TVM's order: a fused function's pattern is the strongest of its members'
PATTERN_ORDER = {"elemwise": 0, "broadcast": 1, "injective": 2, "reduce": 3,
                 "out_elemwise_fusable": 4, "opaque": 8}
FUSABLE = {"elemwise", "broadcast", "injective", "out_elemwise_fusable"}


def _kind(registry, call: Call) -> str:
    return "opaque" if call.op == CALL_OP else registry.get(call.op).kind


class FusePass(ModulePass):
    """Fusion as a pass: modified when some chain became a primitive function."""

    name = "fuse"

    def __init__(self, registry=None):
        self.registry = registry

    def run(self, module: Module) -> PassResult:
        fused = fuse(module, self.registry)
        return PassResult(fused, fused is not module)


def fuse(module: Module, registry=None) -> Module:
    """Group fusable chains of every default function into primitive functions
    (`registry`: the context's when not given). `FusePass` is the pass form."""
    if registry is None:
        registry = context().registry

    def key_of(call):
        return "fused" if _kind(registry, call) in FUSABLE else None

    def can_join(group: list[Call], call: Call) -> bool:
        kind = _kind(registry, call)
        group_kinds = {_kind(registry, c) for c in group}
        if kind in ("elemwise", "broadcast"):
            return True
        if kind == "injective":  # layout changes do not follow a matmul/conv epilogue
            return "out_elemwise_fusable" not in group_kinds
        return False  # an out_elemwise_fusable op starts its own group

    counter = 0
    for fn_name in [n for n, f in module.functions.items() if f.kind == "default"]:
        regions = []
        for _, calls in group_calls(module.functions[fn_name].calls, key_of, can_join):
            if len(calls) < 2:
                continue
            kinds = [_kind(registry, c) for c in calls]
            pattern = max(kinds, key=PATTERN_ORDER.__getitem__)
            name = f"fused_{counter}"
            while name in module.functions:
                counter += 1
                name = f"fused_{counter}"
            counter += 1
            regions.append((name, "primitive", Attrs({"pattern": pattern,
                                                      "ops": [c.op for c in calls]}), calls))
        if regions:
            module = lift_regions(module, fn_name, regions)
    return module


def op_info(function: Function, registry=None) -> list[dict]:
    """Per call of `function`: op, attrs, pattern kind and origin (None if it is itself a
    source op)."""
    if registry is None:
        registry = context().registry
    return [{"op": c.op, "attrs": c.attrs.to_json(), "kind": _kind(registry, c),
             "origin": None if c.origin is None else c.origin.to_json()}
            for c in function.calls]


def function_pattern(function: Function, registry=None) -> str:
    """The pattern kind of a function: the strongest of its calls' kinds."""
    kinds = [info["kind"] for info in op_info(function, registry)]
    return max(kinds, key=PATTERN_ORDER.__getitem__) if kinds else "opaque"


def group_by_origin(module: Module) -> dict[str, dict]:
    """Calls produced from each source op, across all functions (also after fusion):
    {source: {"op": high-level op, "attrs": its attributes, "calls": [(function, call)]}}."""
    groups: dict[str, dict] = {}
    for fn_name, fn in module.functions.items():
        for call in fn.calls:
            if call.origin is None:
                continue
            entry = groups.setdefault(call.origin.source, {
                "op": call.origin.op, "attrs": call.origin.attrs.to_json(), "calls": []})
            entry["calls"].append((fn_name, call))
    return groups
