"""Legalization: rewrite every call until the target runs all of them, in one call.

For each call, in order:
1. kept by the user config: the backend lowers it natively, or tunnels it as a custom op;
2. level above max_level: decompose;
3. supported by the backend and not forced to decompose: legal;
   otherwise, if the backend has a lowering rule for the op (docs/plugins.md), the rule
   rewrites it into the backend's form (the new calls go through the same steps);
4. has a decomposition: decompose (the new calls go through the same steps);
5. supported by the fallback backend: legal there;
6. otherwise: an error naming the op, attributes, types, backend and each failed route.

Decompositions only use lower-level ops (checked at registration), so the recursion ends.
External functions are never entered. A decomposition already run on a call alike (same
op, attributes, input types and constant inputs: the next layer) is replayed rather than
run again (calls.Recipes), and its calls keep the decisions they got the first time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from ..ir import CALL_OP, Call, Const, Function, Module, Origin, Value
from ..ir.calls import Emitter, Recipes, new_call
from ..ir.errors import LegalizationError, LegatoError, ShapeError
from ..passes.manager import FunctionPass
from .backend import BACKEND_RULE, DECLINED, KEPT
from .config import EMPTY_CONFIG, BackendConfig
from .custom_ops import CUSTOM_OP, decode_custom, encode_custom
from .report import Decision, Report, event_key

__all__ = ["BACKEND_RULE", "MODES", "LegalizePass", "LegalizeResult", "call_text",
           "decode_custom", "encode_custom", "legalize_module"]  # the codec: custom_ops.py

MODES = ("full", "partial", "analysis")
SHARED_TABLES, SHARED_DECISIONS = 64, 4096  # bounds of the decisions the registry keeps
PLAIN = frozenset({"legal", "kept", "fallback"})  # actions that keep a call as it is
LEGAL = Decision("legal", "no backend: at or below max_level", "")
# the rule of a decision that waits for the sizes: a backend's check of a call over
# symbolic dims needed their values (the call is deferred, decided once they are bound)
NEEDS_SIZES = "needs sizes"


@dataclass
class LegalizeResult:
    """The legalized module, the report, and which calls run on the fallback backend."""

    module: Module
    report: Report
    fallback_calls: set = field(default_factory=set)  # calls that run on the fallback
    # calls over symbolic dims whose decomposition needs sizes: left as they are, to be
    # legalized once the symbols are bound (legato.compile does it per binding)
    deferred: set = field(default_factory=set)


class _Legalizer:
    def __init__(self, registry, backend, fallback, config: BackendConfig, max_level, mode):
        self.registry, self.backend, self.fallback = registry, backend, fallback
        # an explicit max_level overrides the config's; the backend reads it from there
        self.config = config if max_level is None else replace(config, max_level=max_level)
        self.mode = mode
        self.by_value = backend is not None and backend.reads_values
        self.report = Report(backend.name if backend else None, mode)
        self.fallback_calls: set[Call] = set()
        self.deferred: set[Call] = set()
        # decisions by key: those of earlier legalizations for this backend, fallback and
        # config (shared), and this one's that name the call they were made for (failures,
        # waits for sizes: their text says where the call came from)
        self._decisions = _shared_decisions(registry, backend, fallback, self.config)
        self._own_decisions: dict = {}
        # decision key -> the report event of a source call that is simply kept as it is
        # (legal, kept or fallback; not watched), and whether it runs on the fallback
        self._plain: dict = {}
        self.recipes = Recipes(registry)  # decompositions replayed on repeated layers
        self._replayed: dict = {}  # recipe -> the decisions of its calls
        # (recipe, origin op) -> a replay whose calls are all simply kept: their report
        # events, their ops, and which of them run on the fallback
        self._plans: dict = {}
        # the report's events and result ops, in order, counted in one step per function
        self.events: list = []
        self.after: list = []
        # the attribute conditions of the backend's legal ops, to report those no call meets
        self.watch = {op: c for op, c in backend.legal.items() if c.attrs} if backend else {}
        # kept calls the backend can neither run nor tunnel: reason -> (op, calls), raised
        # together so the author sees every op at once
        self.kept_failures: dict[str, list] = {}

    # --- deciding ---------------------------------------------------------------------------

    def key(self, call: Call) -> tuple:
        """What a decision about `call` depends on: op, attributes, input types (and with a
        backend that reads values, which inputs are constants). Types as (shape, dtype)
        pairs and attributes as Attrs.key(), which hash and compare in C."""
        # a list comprehension: faster than a generator for the few inputs of a call
        if self.by_value:
            return (call.op, call.attrs.key(), tuple([
                None if v is None else (v.type.shape, v.type.dtype, isinstance(v, Const))
                for v in call.inputs]))
        return (call.op, call.attrs.key(), tuple([
            None if v is None else (v.type.shape, v.type.dtype) for v in call.inputs]))

    def decide(self, call: Call, key: tuple | None = None) -> Decision:
        if key is None:
            key = self.key(call)
        decision = self._decisions.get(key) or self._own_decisions.get(key)
        if decision is None:
            try:
                decision = self._decide(call)
            except LegatoError as err:  # a backend's check needs the sizes: decided later
                if not _needs_sizes(call, err):
                    raise
                decision = Decision("legal", str(err), NEEDS_SIZES)
            if decision.action == "failed" or decision.rule == NEEDS_SIZES:
                self._own_decisions[key] = decision
            else:
                if len(self._decisions) >= SHARED_DECISIONS:
                    self._decisions.clear()
                self._decisions[key] = decision
        return decision

    def _decide(self, call: Call, use_rules: bool = True) -> Decision:
        op, backend, config = call.op, self.backend, self.config
        if op == CALL_OP:
            return Decision("legal", "a call of a module function")
        opdef = self.registry.get(op)
        level = opdef.level
        if backend is None:
            if op in config.keep:
                return Decision("kept", "kept by config")
            if config.max_level is not None and level > config.max_level:
                return Decision("decomposed", f"level {level} is above max_level "
                                              f"{config.max_level}", "max_level")
            return LEGAL
        decision = backend.decide(call, config, level, use_rules)
        if decision.rule == KEPT:
            return Decision("failed", self._routes(call, [
                f"kept by config {config.source}".rstrip(), decision.reason]), KEPT)
        if decision.rule != DECLINED:
            return decision
        why = decision.reason
        if opdef.decompose is not None:
            return Decision("decomposed", why, "unsupported")
        fallback_why = self.fallback.why_not(call) if self.fallback else \
            f"{backend.name} has no fallback backend"
        if fallback_why is None:
            return Decision("fallback", f"{why}; runs on fallback {self.fallback.name}")
        return Decision("failed", self._routes(call, [
            f"native: {why}", "decompose: none, it is a primitive (level 0)",
            f"fallback: {fallback_why}",
            "custom op: not kept by the config" if backend.custom_ops else
            f"custom op: {backend.name} does not take custom ops"]))

    def kept_text(self) -> str:
        """Every kept op the backend can neither run nor tunnel, and the ways out; '' when
        there is none."""
        if not self.kept_failures:
            return ""
        ops: dict[str, int] = {}
        for op, n in self.kept_failures.values():
            ops[op] = ops.get(op, 0) + n
        name = self.backend.name
        tunnel = "widen its custom_ops conditions" if self.backend.custom_ops else \
            "set `custom_ops: true` in its capability file"
        return (f"backend {name} cannot take {len(ops)} op(s) the config keeps: "
                + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
                + f". For each, give {name} a kernel for it (its kernel table) so it runs "
                f"natively, or {tunnel} to tunnel it as a custom op, or drop it from the "
                "config's keep.\n" + "\n".join(self.kept_failures) + "\n")

    def _routes(self, call: Call, routes: list[str]) -> str:
        text = f"cannot legalize {call_text(call)} for backend {self.backend.name}"
        if call.origin is not None:
            text += f" (part of {call.origin.op} at {call.origin.source})"
        return text + ":\n  - " + "\n  - ".join(routes)

    # --- rewriting --------------------------------------------------------------------------

    def function(self, name: str, fn: Function) -> Function:
        remap: dict[Value, Value] = {}  # keyed by identity; keeps old values alive
        out: list[Call] = []
        self.report.before.update([call.op for call in fn.calls])
        plain, events, after, append = self._plain, self.events, self.after, out.append
        key_of = self.key
        for index, call in enumerate(fn.calls):
            for v in call.inputs:  # _rewire's test, inline: most calls read nothing rewritten
                if v in remap:
                    call = _rewire(call, remap)
                    break
            key = key_of(call)
            known = plain.get(key)
            if known is None:
                decision = self.decide(call, key)
                if not self._is_plain(call.op, decision):
                    self.emit(call, remap, out, f"{name}#{index}", True, decision)
                    continue
                known = plain[key] = (_event(call, decision, True),
                                      decision.action == "fallback")
            events.append(known[0])  # what emit does for a call kept as it is
            after.append(call.op)
            if known[1]:
                self.fallback_calls.add(call)
            append(call)
        self.flush()
        results = tuple(remap.get(r, r) for r in fn.results)
        if len(out) == len(fn.calls) and all(a is b for a, b in zip(out, fn.calls)):
            return fn
        return Function(fn.params, tuple(out), results, fn.kind, fn.attrs)

    def emit(self, call: Call, remap, out: list, source: str, from_input: bool,
             decision: Decision | None = None) -> None:
        if decision is None:
            decision = self.decide(call)
        if decision.rule == NEEDS_SIZES:
            self._defer(call, out)
            return
        if call.op in self.watch:
            self.report.condition(call.op, self.watch[call.op], call)
        if decision.rule == BACKEND_RULE:
            if call.origin is not None and f"lower:{call.op}" in call.origin.rules:
                # the rule made a call of its own op that is still not legal: it would loop
                decision = Decision("failed", self._routes(call, [
                    f"native: {decision.reason}", f"rule lower:{call.op}: produced "
                    f"{call.op} that is still not legal (rewrite loop)"]))
            elif self._lower(call, decision, remap, out, source, from_input):
                return
            else:  # the rule declined: the other routes
                decision = self._decide(call, use_rules=False)
        self.events.append(_event(call, decision, from_input))
        action = decision.action
        if action == "decomposed":
            self._decompose(call, decision, remap, out, source)
            return
        if action == "failed":
            if self.mode == "full" and decision.rule == KEPT:
                self.kept_failures.setdefault(decision.reason, [call.op, 0])[1] += 1
            elif self.mode == "full":
                raise LegalizationError(self.kept_text() + decision.reason)
            else:
                self.report.failures.append(decision.reason)
        elif action == "custom" and call.op != CUSTOM_OP:
            call = self._custom(call, remap, source)
        elif action == "fallback":
            self.fallback_calls.add(call)
        self.after.append(call.op)
        out.append(call)

    def _is_plain(self, op: str, decision: Decision) -> bool:
        """Whether a call of `op` with `decision` is only counted and kept as it is."""
        return decision.action in PLAIN and decision.rule != NEEDS_SIZES and \
            op not in self.watch

    def flush(self) -> None:
        """Count the events and result ops gathered so far into the report."""
        self.report.count(self.events, self.after)
        self.events.clear()
        self.after.clear()

    def _decompose(self, call: Call, decision: Decision, remap, out, source) -> None:
        opdef = self.registry.get(call.op)
        rule = f"decompose:{call.op}"
        origin = _child_origin(call, source, rule)
        emitter = Emitter(self.registry, origin)
        try:
            results, recipe = self.recipes.run(emitter, opdef, call.inputs, call.attrs)
        except Exception as err:
            if not _needs_sizes(call, err):
                raise _rule_failed(rule, call, err) from err
            self._defer(call, out)
            return
        _check_types(call, results, rule)
        plan = self._plans.get((recipe, origin.op)) if recipe is not None else None
        if plan is None:
            self._emit_produced(call, opdef, rule, recipe, emitter, remap, out, source)
        else:  # every call is kept as it is: counted, the decisions of the first replay
            out.extend(emitter.calls)
            self.events.extend(plan[0])
            self.after.extend(plan[1])
            for index in plan[2]:
                self.fallback_calls.add(emitter.calls[index])
        for old, new in zip(call.outputs, results):
            remap[old] = remap.get(new, new)

    def _emit_produced(self, call: Call, opdef, rule: str, recipe, emitter: Emitter, remap,
                       out, source) -> None:
        """Emit the calls the decomposition of `call` produced. A replayed recipe's calls
        get the decisions of its first replay here (the same ops, attributes, input types
        and constant inputs); when all of them keep their call as it is, the replay's
        events are remembered, and the next replay is counted at once (its calls read
        only the call's inputs, constants and each other: nothing to rewire)."""
        produced = emitter.calls
        known = self._replayed.get(recipe) if recipe is not None else None
        decisions = []
        for index, made in enumerate(produced):
            if self.registry.get(made.op).level >= opdef.level:
                raise LegalizationError(f"rule {rule} produced {made.op}, which is not of "
                                        f"a lower level than {call.op}: rewrite loop")
            made = _rewire(made, remap)
            decision = self.decide(made) if known is None else known[index]
            decisions.append(decision)
            self.emit(made, remap, out, source, False, decision)
        if recipe is None:
            return
        if known is None:
            self._replayed[recipe] = decisions
        if all(self._is_plain(c.op, d) for c, d in zip(produced, decisions)):
            self._plans[(recipe, emitter.origin.op)] = (
                [_event(c, d, False) for c, d in zip(produced, decisions)],
                [c.op for c in produced],
                [i for i, d in enumerate(decisions) if d.action == "fallback"])

    def _lower(self, call: Call, decision: Decision, remap, out, source, from_input) -> bool:
        """Apply the backend's rule `rule(b, call)`; False when it returns None (declines)."""
        rule = f"lower:{call.op}"
        emitter = Emitter(self.registry, _child_origin(call, source, rule))
        try:
            results = self.backend.rule(call.op)(emitter, call)
        except Exception as err:
            if not _needs_sizes(call, err):
                raise _rule_failed(f"{rule} of {self.backend.name}", call, err) from err
            self.events.append(_event(call, decision, from_input))
            self._defer(call, out)
            return True
        if results is None:
            return False
        self.events.append(_event(call, decision, from_input))
        results = results if isinstance(results, tuple) else (results,)
        _check_types(call, results, rule)
        for produced in emitter.calls:
            self.emit(_rewire(produced, remap), remap, out, source, False)
        for old, new in zip(call.outputs, results):
            remap[old] = remap.get(new, new)
        return True

    def _defer(self, call: Call, out: list) -> None:
        """Keep `call` as it is: its rewrite needs the sizes, so it is legalized once the
        symbols are bound."""
        self.deferred.add(call)
        self.after.append(call.op)
        out.append(call)

    def _custom(self, call: Call, remap, source) -> Call:
        custom = encode_custom(call, self.backend.domain, self.registry)
        custom = Call(custom.op, custom.inputs, custom.attrs, custom.outputs,
                      _child_origin(call, source, "custom"))
        for old, new in zip(call.outputs, custom.outputs):
            remap[old] = new
        return custom


def _rewire(call: Call, remap: dict) -> Call:
    """The call with inputs replaced by what they were rewritten to (same call if none)."""
    # None (an absent input) is never a key; values compare by identity. Most calls read
    # nothing rewritten: looking each input up is cheaper than building the new inputs
    for v in call.inputs:
        if v in remap:
            break
    else:
        return call
    inputs = tuple([remap.get(v, v) for v in call.inputs])
    if inputs == call.inputs:
        return call
    return new_call(call.op, inputs, call.attrs, call.outputs, call.origin)


def _shared_decisions(registry, backend, fallback, config: BackendConfig) -> dict:
    """The decisions earlier legalizations made for `backend`, `fallback` and `config`,
    kept by the registry (which forgets them when a definition changes): a decision is a
    function of these, the registry's definitions and the key. At most SHARED_TABLES
    tables (partitioning makes a backend per build)."""
    tables = registry.derived("legalization decisions")
    key = (backend, fallback, config)
    try:
        table = tables.get(key)
    except TypeError:  # a config some plugin made with a list in it: not shared
        return {}
    if table is None:
        if len(tables) >= SHARED_TABLES:
            tables.clear()
        table = tables[key] = {}
    return table


def _event(call: Call, decision: Decision, source: bool) -> tuple:
    """The report's event of one call (Report.record)."""
    return event_key(call.op, decision, source, call.origin.op if call.origin else None)


def _rule_failed(rule: str, call: Call, err: Exception) -> LegalizationError:
    """A rule that raised: a LegatoError is the rule refusing the call; anything else is a
    bug in the rule, reported with its type so it can be told apart."""
    what = str(err) if isinstance(err, LegatoError) else \
        f"{type(err).__name__}: {err} (a bug in the rule)"
    return LegalizationError(f"rule {rule} failed on {call_text(call)}: {what}")


def call_text(call: Call) -> str:
    """A call as messages show it: op(input types) {attributes}."""
    types = ", ".join("None" if v is None else str(v.type) for v in call.inputs)
    return f"{call.op}({types}) {json.dumps(call.attrs.to_json())}"


def _child_origin(call: Call, source: str, rule: str) -> Origin:
    if call.origin is None:
        return Origin(call.op, call.attrs, source, (rule,))
    parent = call.origin
    return Origin(parent.op, parent.attrs, parent.source, parent.rules + (rule,))


def _check_types(call: Call, results, rule: str) -> None:
    # shapes and dtypes compare in C; TensorType's dataclass __eq__ runs in Python
    if [(r.type.shape, r.type.dtype) for r in results] != \
            [(o.type.shape, o.type.dtype) for o in call.outputs]:
        got, want = [r.type for r in results], [o.type for o in call.outputs]
        raise LegalizationError(
            f"rule {rule} changed the types of {call.op} {json.dumps(call.attrs.to_json())}: "
            f"it produced {[str(t) for t in got]} where the call has {[str(t) for t in want]}")


# --- entry point --------------------------------------------------------------------------

def legalize_module(module: Module, registry, backend=None, fallback=None,
                    config: BackendConfig = EMPTY_CONFIG, max_level: int | None = None,
                    mode: str = "full") -> LegalizeResult:
    if mode not in MODES:
        raise LegatoError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if backend is None and max_level is None and config.max_level is None:
        raise LegatoError("legalize needs a backend, a max_level, or both")
    worker = _Legalizer(registry, backend, fallback, config, max_level, mode)
    legalized, changed = LegalizePass(worker).run(module)
    if worker.kept_failures:
        raise LegalizationError(worker.kept_text().rstrip("\n"))
    worker.report.changed = changed
    if worker.deferred:
        ops = sorted({c.op for c in worker.deferred})
        worker.report.notes.append(f"{len(worker.deferred)} calls ({', '.join(ops)}) need "
                                   "their symbolic dims bound to be legalized")
    return LegalizeResult(module if mode == "analysis" else legalized, worker.report,
                          worker.fallback_calls, worker.deferred)


def _needs_sizes(call: Call, err: Exception) -> bool:
    """A rule failed on a call over symbolic dims for want of their values (a ShapeError,
    raised by the rule or by a plugin's rule, which wraps it)."""
    return _symbolic(call) and (isinstance(err, ShapeError) or
                                isinstance(err.__cause__, ShapeError))


def _symbolic(call: Call) -> bool:
    return any(v is not None and v.type.symbolic for v in (*call.inputs, *call.outputs))


class LegalizePass(FunctionPass):
    """Legalization as a function pass: enters fused (primitive) functions, never external."""

    name = "legalize"
    enters_primitive = True

    def __init__(self, worker: _Legalizer):
        self.worker = worker

    def run_function(self, name, fn, module):
        new = self.worker.function(name, fn)
        return new, new is not fn

