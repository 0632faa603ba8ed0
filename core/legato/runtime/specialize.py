"""Running a model with symbolic dimensions: bind the symbols from the inputs, make the
legalized module concrete for that binding, and plan it once per binding.

Legalization happens once, over the symbols; what differs between sizes is only the
numbers in the types. So a call at a new size evaluates every type of the legalized module
under the binding (no import, recomposition or legalization again), checks the result
as the verifier would (each call's types inferred anew must equal the evaluated ones), and
hands it to the backend's executor factory. Planned executors are kept per binding, a few
at a time, and `stats` counts hits, misses and the time spent planning.
"""
from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from typing import Callable, Mapping

import numpy as np

from ..ir import CALL_OP, Attrs, Call, Function, Module, TensorType, Value
from ..ir.errors import ExecutionError, IRError, LegatoError, ShapeError
from ..ir.symbols import GUARDS, Expr, check_guard, evaluate, lone_symbol

MAX_PLANS = 16


def is_symbolic(module: Module) -> bool:
    return any(v.type.symbolic for fn in module.functions.values()
               for v in (*fn.params, *fn.results, *(o for c in fn.calls for o in c.outputs)))


def check_guards(function: Function, bindings: Mapping[str, int]) -> None:
    """What the model's import assumed of its symbols holds for this binding."""
    for text in function.attrs.get(GUARDS, ()):
        if not check_guard(text, bindings):
            raise ExecutionError(f"the model was compiled assuming {text} (e.g. a slice of a "
                                 f"fixed-size table by a symbolic length), which {_text(bindings)}"
                                 " breaks")


def bind(params, shapes) -> dict[str, int]:
    """Symbol values from the inputs' shapes: a dim that is a lone symbol binds it, and
    every dim must then equal its size. ExecutionError naming the input and dim otherwise."""
    bindings: dict[str, int] = {}
    for param, shape in zip(params, shapes):
        label = f"input {param.name!r}" if param.name else "an input"
        if len(shape) != param.rank:
            raise ExecutionError(f"{label} must be {param.type}, got shape {list(shape)}")
        for i, (dim, size) in enumerate(zip(param.shape, shape)):
            name = lone_symbol(dim)
            if name is not None and bindings.setdefault(name, size) != size:
                raise ExecutionError(f"{label} dimension {i} is {name}, which another "
                                     f"dimension set to {bindings[name]}; got {size}")
    for param, shape in zip(params, shapes):
        for i, (dim, size) in enumerate(zip(param.shape, shape)):
            try:
                want = evaluate(dim, bindings)
            except ShapeError as err:
                raise ExecutionError(f"input {param.name!r} dimension {i} ({dim}): {err}; "
                                     "symbols are bound by inputs whose dim is the symbol "
                                     "alone") from None
            if want != size:
                why = f"{dim} = {want} when {_text(bindings)}" if isinstance(dim, Expr) \
                    else f"{dim}"
                raise ExecutionError(f"input {param.name!r} must be {param.type}, got shape "
                                     f"{list(shape)} (dimension {i} is {why})")
    return bindings


def _text(bindings: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(bindings.items())) or "nothing is bound"


def specialize(module: Module, bindings: Mapping[str, int], registry):
    """(concrete module, {symbolic call: its concrete call}) for `bindings`."""
    return Specializer(module, registry)(bindings)


class Specializer:
    """specialize() of one module at many bindings: which values, calls and attribute sets
    hold symbols is found once, and a binding evaluates each distinct type and attribute
    set once and infers each distinct (op, attributes, input types) once (a model's layers
    repeat them). Calls without symbols are the symbolic module's own, verified already."""

    def __init__(self, module: Module, registry):
        self.module, self.registry = module, registry
        self.symbolic: dict[int, Value] = {}  # id -> value, for values whose type has symbols
        self.fixed: set[Call] = set()  # calls no binding changes
        for fn in module.functions.values():
            for call in fn.calls:
                values = [v for v in (*call.inputs, *call.outputs)
                          if v is not None and v.type.symbolic]
                self.symbolic.update((id(v), v) for v in values)
                if not values and not _has_exprs(call.attrs):
                    self.fixed.add(call)
            self.symbolic.update((id(v), v) for v in (*fn.params, *fn.results)
                                 if v.type.symbolic)

    def __call__(self, bindings: Mapping[str, int]):
        types: dict[TensorType, TensorType] = {}  # values share a few types
        values: dict[int, Value] = {}
        for key, value in self.symbolic.items():
            kind = types.get(value.type)
            if kind is None:
                kind = types[value.type] = _concrete_type(value.type, bindings)
            values[key] = Value(kind, value.name)
        attr_sets: dict[Attrs, Attrs] = {}
        calls: dict[Call, Call] = {}
        rebound: set[Call] = set()  # calls whose attributes held expressions

        def concrete(value):
            return None if value is None else values.get(id(value), value)

        functions = {}
        for name, fn in self.module.functions.items():
            new_calls = []
            for call in fn.calls:
                if call in self.fixed:
                    new = call
                else:
                    attrs = call.attrs
                    if _has_exprs(attrs):
                        attrs = attr_sets.get(call.attrs)
                        if attrs is None:
                            attrs = attr_sets[call.attrs] = _concrete_attrs(call.attrs,
                                                                            bindings)
                    new = Call(call.op, tuple(map(concrete, call.inputs)), attrs,
                               tuple(map(concrete, call.outputs)), call.origin)
                    if attrs is not call.attrs:
                        rebound.add(new)
                calls[call] = new
                new_calls.append(new)
            functions[name] = Function(tuple(map(concrete, fn.params)), tuple(new_calls),
                                       tuple(map(concrete, fn.results)), fn.kind, fn.attrs)
        concrete_module = Module(functions)
        check_types(concrete_module, self.registry, rebound, skip=self.fixed)
        return concrete_module, calls


def _concrete_type(kind: TensorType, bindings) -> TensorType:
    shape = tuple(evaluate(d, bindings) for d in kind.shape)
    if any(d < 0 for d in shape):
        raise ShapeError(f"{kind} has a negative dimension when {_text(bindings)}")
    return TensorType(shape, kind.dtype)


def check_types(module: Module, registry, rebound, skip=frozenset()) -> None:
    """What a binding can change of a verified module, checked as the verifier does: each
    call's types inferred anew must equal the evaluated ones, and attributes that held
    expressions (`rebound` calls) must be valid with their values. The rest (SSA form, op
    existence, constants, acyclic calls) is the symbolic module's, verified already, as
    are the calls in `skip` (no symbol in them). Inference depends on the op, attributes
    and input types only: each distinct triple is inferred once."""
    inferred: dict = {}
    for name, fn in module.functions.items():
        for index, call in enumerate(fn.calls):
            if call in skip:
                continue
            try:
                if call in rebound or call.op == CALL_OP:
                    expected = _inferred_types(module, call, registry, call in rebound)
                else:
                    key = (call.op, call.attrs, tuple(None if v is None else v.type
                                                      for v in call.inputs))
                    expected = inferred.get(key)
                    if expected is None:
                        expected = inferred[key] = _inferred_types(module, call, registry,
                                                                   False)
            except LegatoError as err:
                raise IRError(f"function @{name}, call {index} ({call.op}): {err}") from None
            got = tuple(o.type for o in call.outputs)
            if got != expected:
                raise IRError(f"function @{name}, call {index} ({call.op}): result types "
                              f"{', '.join(map(str, got))} differ from the inferred "
                              f"{', '.join(map(str, expected))}")


def _inferred_types(module: Module, call: Call, registry, rebound: bool):
    if call.op == CALL_OP:
        target = module.functions[call.attrs["callee"]]
        got = tuple(None if v is None else v.type for v in call.inputs)
        if got != target.param_types:
            raise IRError(f"@{call.attrs['callee']} takes {target.param_types}, got {got}")
        return target.result_types
    opdef = registry.get(call.op)
    if rebound:
        if opdef.normalize_attrs(call.attrs) != call.attrs:
            raise IRError(f"attributes {call.attrs.to_json()} are not in normal form")
        opdef.check_consts(call.inputs, call.attrs)
    return opdef.infer_types([None if v is None else v.type for v in call.inputs], call.attrs)


def _concrete_attrs(attrs: Attrs, bindings) -> Attrs:
    def value(v):
        if isinstance(v, Expr):
            return v.evaluate(bindings)
        return [value(x) for x in v] if isinstance(v, tuple) else v
    return Attrs({k: value(v) for k, v in attrs.items()})


@functools.lru_cache(maxsize=4096)  # by value: a model's calls share a few attribute sets
def _has_exprs(attrs: Attrs) -> bool:
    return any(_has_expr(v) for v in attrs.values())


def _has_expr(value) -> bool:
    return isinstance(value, Expr) or isinstance(value, tuple) and any(map(_has_expr, value))


class ShapeSpecializing:
    """The runner of a compiled model with symbolic dims: one planned executor per binding.

    Safe to call from several threads at once, at any mix of sizes: plans are made one at
    a time under a lock (a call at a size already planned does not wait for it), and a
    planned runner that is not itself thread safe runs one call at a time."""

    thread_safe = True

    def __init__(self, module: Module, fallback_calls, plan: Callable, registry):
        self.module, self.fallback_calls = module, frozenset(fallback_calls)
        self.plan, self.registry = plan, registry
        self.specialize = Specializer(module, registry)
        self.plans: OrderedDict = OrderedDict()
        self.by_shapes: dict = {}  # the inputs' shapes -> their binding's runner
        self.stats = {"hits": 0, "misses": 0, "plan_s": 0.0}
        self._planning = threading.Lock()  # plans, by_shapes' writes, misses and plan_s
        self._counting = threading.Lock()  # hits

    def runner_for(self, bindings: Mapping[str, int]):
        key = tuple(sorted(bindings.items()))
        with self._planning:
            runner = self.plans.get(key)
            if runner is not None:
                self._hit()
                self.plans.move_to_end(key)
                return runner
            start = time.perf_counter()
            try:
                module, calls = self.specialize(bindings)
            except LegatoError as err:
                raise ExecutionError(f"the model cannot run at {_text(bindings)}: "
                                     f"{err}") from None
            runner = self.plan(module, frozenset(calls[c] for c in self.fallback_calls))
            if not getattr(runner, "thread_safe", False):
                runner = _OneAtATime(runner)
            self.stats["misses"] += 1
            self.stats["plan_s"] += time.perf_counter() - start
            self.plans[key] = runner
            if len(self.plans) > MAX_PLANS:
                self.plans.popitem(last=False)
            return runner

    def _hit(self) -> None:
        with self._counting:
            self.stats["hits"] += 1

    def __call__(self, *inputs, **named):
        params = self.module.main.params
        given = list(inputs) + [named[p.name] for p in params[len(inputs):] if p.name in named]
        if len(given) != len(params):
            raise ExecutionError(f"the model takes {len(params)} inputs, got {len(given)}")
        shapes = tuple(np.shape(x) for x in given)
        runner = self.by_shapes.get(shapes)  # inputs of sizes met before: one lookup
        if runner is None:
            bindings = bind(params, shapes)
            check_guards(self.module.main, bindings)
            runner = self.runner_for(bindings)
            with self._planning:
                if len(self.by_shapes) >= MAX_PLANS:
                    self.by_shapes.clear()
                self.by_shapes[shapes] = runner
        else:
            self._hit()
        return runner(*inputs, **named)


class _OneAtATime:
    """A runner that is not thread safe, called by one thread at a time."""

    thread_safe = True

    def __init__(self, runner):
        self.runner, self._lock = runner, threading.Lock()

    def __call__(self, *inputs, **named):
        with self._lock:
            return self.runner(*inputs, **named)
