"""The verifier and structural equality. Both look inside every function, external too."""
from __future__ import annotations

import numpy as np

from ..plugins.context import context, unknown_op_note
from .errors import IRError, LegatoError, clip, quote
from .graph import CALL_OP, Call, Const, Function, Module, Value
from .symbols import GUARDS, collecting_guards

__all__ = ["CALL_OP", "structural_equal", "verify"]  # CALL_OP: its older home


def verify(module: Module, registry=None, inferred=None) -> Module:
    """Check SSA form, op existence, attributes and inferred types; raise IRError naming
    the function and call at fault. Returns the module so it can be chained.
    `registry`: the context's when not given. `inferred`: {id(call.outputs): call} of calls
    that `make_call` made with this registry (a GraphBuilder's), whose types need no
    second derivation (see _checked_at_creation); guarded functions derive them all."""
    if registry is None:
        registry = context().registry
    for name, fn in module.functions.items():
        declared = fn.attrs.get(GUARDS, ())
        if not declared:
            _verify_function(module, name, fn, registry, inferred)
            continue
        with collecting_guards() as assumed:  # inference over symbols may assume these
            _verify_function(module, name, fn, registry)
        missing = [g for g in assumed if g not in declared]
        if missing:
            raise IRError(f"function @{name}: its shapes assume {', '.join(missing)}, which "
                          f"its guards ({', '.join(declared)}) do not say")
    _check_acyclic(module)
    return module


def _check_acyclic(module: Module) -> None:
    """Functions may call functions, never themselves, directly or not: there is no
    control flow, so a cycle could only recurse forever."""
    callees = {name: {c.attrs.get("callee") for c in fn.calls if c.op == CALL_OP}
               for name, fn in module.functions.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in callees:
        stack = [(root, iter(callees[root]))]
        state.setdefault(root, 1)
        if state[root] == 2:
            continue
        while stack:
            name, pending = stack[-1]
            callee = next(pending, None)
            if callee is None:
                state[name] = 2
                stack.pop()
            elif state.get(callee) == 1:
                raise IRError(f"function @{clip(name)} calls @{clip(callee)}, which "
                              "calls it back: "
                              "calls between functions may not form a cycle")
            elif callee not in state:
                state[callee] = 1
                stack.append((callee, iter(callees[callee])))


def _verify_function(module: Module, name: str, fn: Function, registry,
                     inferred=None) -> None:
    defined: set[int] = set()
    for p in fn.params:
        if id(p) in defined:
            raise IRError(f"function @{clip(name)}: parameter {p!r} appears twice")
        defined.add(id(p))
    for index, call in enumerate(fn.calls):
        where = f"function @{clip(name)}, call {index} ({clip(call.op)})"
        if not call.outputs:  # a pure call without results is dead and has no text form
            raise IRError(f"{where}: a call needs at least one result")
        for value in call.inputs:
            if value is not None and id(value) not in defined and not isinstance(value, Const):
                raise IRError(f"{where}: input {value!r} is not defined before use")
        for out in call.outputs:
            if id(out) in defined:
                raise IRError(f"{where}: result {out!r} is defined twice")
            defined.add(id(out))
        if inferred and _checked_at_creation(call, inferred):
            continue
        try:
            expected = _expected_types(module, call, registry)
        except LegatoError as err:
            raise IRError(f"{where}: {err}{unknown_op_note(call.op, registry)}") from None
        got = tuple(o.type for o in call.outputs)
        if got != expected:
            raise IRError(f"{where}: result types {_types(got)} differ from the "
                          f"inferred {_types(expected)}")
    for r in fn.results:
        if id(r) not in defined and not isinstance(r, Const):
            raise IRError(f"function @{clip(name)}: result {r!r} is not defined")


def _checked_at_creation(call: Call, inferred) -> bool:
    """Whether `call` is one `make_call` made with the registry being verified against (or a
    copy of one with another origin): make_call checked its arity, put its attributes in
    normal form, derived its result types from its inputs' types and checked its constant
    operands, the checks `_expected_types` repeats, and a call is immutable, so the same
    registry would derive the same types again. Its op, inputs and attributes must be the
    very objects it was made with; its outputs are the values make_call made."""
    made = inferred.get(id(call.outputs))
    return made is not None and made.outputs is call.outputs and made.inputs is call.inputs \
        and made.attrs is call.attrs and made.op == call.op


def _expected_types(module: Module, call: Call, registry):
    if call.op == CALL_OP:
        callee = call.attrs.get("callee")
        if callee not in module.functions:
            raise IRError(f"calls unknown function {quote(callee)}")
        target = module.functions[callee]
        got = tuple(None if v is None else v.type for v in call.inputs)
        if got != target.param_types:
            raise IRError(f"@{clip(callee)} takes {_types(target.param_types)}, got {_types(got)}")
        return target.result_types
    opdef = registry.get(call.op)
    opdef.check_arity(len(call.inputs))
    if opdef.normalize_attrs(call.attrs) != call.attrs:
        raise IRError(f"attributes {quote(call.attrs.to_json())} are not in normal form")
    types = opdef.infer_types([None if v is None else v.type for v in call.inputs], call.attrs)
    opdef.check_consts(call.inputs, call.attrs)
    return types


def _types(types) -> str:
    return quote([None if t is None else str(t) for t in types], 200)


# --- structural equality ------------------------------------------------------------------

def structural_equal(a: Module, b: Module, compare_origin: bool = True) -> bool:
    """True when the modules are equal up to the naming of non-parameter values."""
    if list(a.functions) != list(b.functions):
        return False
    return all(_function_equal(a.functions[n], b.functions[n], compare_origin)
               for n in a.functions)


def _function_equal(f: Function, g: Function, compare_origin: bool) -> bool:
    if (f.kind, f.attrs, len(f.params), len(f.calls), len(f.results)) != \
            (g.kind, g.attrs, len(g.params), len(g.calls), len(g.results)):
        return False
    pairs: dict[int, Value] = {}
    for p, q in zip(f.params, g.params):
        if p.type != q.type or p.name != q.name:
            return False
        pairs[id(p)] = q
    for c, d in zip(f.calls, g.calls):
        if (c.op, c.attrs, len(c.inputs), len(c.outputs)) != (d.op, d.attrs, len(d.inputs),
                                                               len(d.outputs)):
            return False
        if compare_origin and c.origin != d.origin:
            return False
        if not all(_same_value(u, v, pairs) for u, v in zip(c.inputs, d.inputs)):
            return False
        for u, v in zip(c.outputs, d.outputs):
            if u.type != v.type:
                return False
            pairs[id(u)] = v
    return all(_same_value(u, v, pairs) for u, v in zip(f.results, g.results))


def _same_value(u, v, pairs) -> bool:
    if u is None or v is None:
        return u is v
    if isinstance(u, Const) or isinstance(v, Const):
        return isinstance(u, Const) and isinstance(v, Const) and u.type == v.type and \
            np.array_equal(u.data, v.data, equal_nan=u.data.dtype.kind == "f")
    return pairs.get(id(u)) is v
