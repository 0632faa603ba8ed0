"""Backends: the legality check of a capability file's declarations, the one decision of
who takes a call (`Backend.decide`, used by legalization and partitioning alike), and the
lazily imported kernels, rules and checks it names.

A capability file (YAML) says which ops a backend runs natively and under which
conditions (dtypes of the tensor inputs, ranks, attribute values); a backend's kernel
table is the rest of its legal-op declaration. capability.py validates it; see
docs/yaml.md.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping

from ..ir import CUSTOM_OP, Call, Const, thaw_attr
from ..ir.errors import ConfigError, ExecutionError, LegalizationError, clip, quote
from .config import EMPTY_CONFIG, BackendConfig
from .report import Decision

MAX_REASON = 500  # characters of a check's reason kept in reports and errors
TAKEN = frozenset({"legal", "kept", "custom"})  # the actions by which a backend takes a call
BACKEND_RULE = "backend-rule"  # Decision.rule: rewritten by the backend's lowering rule
DECLINED = "declined"  # Decision.rule: not taken; decomposition or a fallback may still be
KEPT = "kept"          # Decision.rule of a failure: kept by the config, yet not taken


@dataclass(frozen=True)
class Condition:
    """When an op is legal: allowed input dtypes, input ranks, attribute values, and an
    optional `check(call) -> reason | None` for what the declarative keys cannot say
    (a callable, or 'module:function' imported on first use)."""

    dtypes: frozenset | None = None
    ranks: frozenset | None = None
    attrs: Mapping[str, tuple] = field(default_factory=dict)
    check: Any = None

    def why_not(self, call: Call, backend: str = "?") -> str | None:
        tensors = [v for v in call.inputs if v is not None]
        if self.dtypes is not None:
            bad = sorted({v.dtype for v in tensors} - self.dtypes)
            if bad:
                return f"dtype {', '.join(bad)} not in {sorted(self.dtypes)}"
        if self.ranks is not None:
            bad = sorted({v.rank for v in tensors} - self.ranks)
            if bad:
                return f"rank {', '.join(map(str, bad))} not in {sorted(self.ranks)}"
        miss = self.attr_miss(call)
        if miss is not None:
            key, value = miss
            return (f"{key}={quote(thaw_attr(value))} not in "
                    f"{quote([thaw_attr(a) for a in self.attrs[key]], 200)}")
        if self.check is not None:
            return self._run_check(call, backend)
        return None

    def attr_miss(self, call: Call) -> tuple[str, Any] | None:
        """The first attribute condition `call` fails, as (key, the call's value); None when
        it meets them all. Axis attributes compare in normalised form (axis_value)."""
        for key, allowed in self.attrs.items():
            value = call.attrs.get(key)
            if value in allowed:
                continue
            norm = axis_value(call, key, value)
            if norm is None or norm not in {axis_value(call, key, a) for a in allowed}:
                return key, value
        return None

    def _run_check(self, call: Call, backend: str) -> str | None:
        """The check's verdict; a check that raises or answers neither None nor a string is
        a bug in the backend, reported as such rather than guessed around."""
        if isinstance(self.check, str):  # frozen dataclass: cache the imported function
            object.__setattr__(self, "check", resolve(
                self.check, f"backend {backend}: check for {call.op}", need_callable=True))
        where = f"backend {backend}: check {_name(self.check)} for {call.op}"
        reason = call_plugin(self.check, where, call)
        if reason is not None and not isinstance(reason, str):
            raise LegalizationError(f"{where} returned {quote(reason)}; expected None (legal) "
                                    "or a string (the reason it is not)")
        return None if reason is None else clip(reason, MAX_REASON)


class Backend:
    """A backend: legal ops with conditions, kernels, and how it runs or emits a module."""

    def __init__(self, name: str, legal: Mapping[str, Condition], *, executes: bool = True,
                 fallback: str | None = None, custom_ops: bool = False,
                 domain: str = "legato", kernels: Mapping[str, Any] | None = None,
                 layout: str | None = None, executor: Callable | None = None,
                 emitter: Callable | None = None, source: str = "", description: str = "",
                 rules: Mapping[str, Any] | None = None,
                 custom_condition: Condition | None = None, borrowed=frozenset(),
                 passes=()):
        self.name, self.executes, self.fallback = name, executes, fallback
        self.custom_ops, self.domain, self.layout = custom_ops, domain, layout
        self.custom_condition = custom_condition  # which calls it tunnels (None: any)
        self.legal = dict(legal)
        self.borrowed = frozenset(borrowed)  # legal ops run by the fallback's kernel
        self.capability_file = ""  # the capability file's label, for registration problems
        # whether a decision may depend on more than op, attributes and input types
        self.reads_values = custom_condition is not None and custom_condition.check \
            is not None or any(c.check is not None for c in self.legal.values())
        self._kernels = dict(kernels or {})
        self._rules = dict(rules or {})
        self._ready_rules: dict[str, Callable | None] = {}
        self.executor, self.emitter = executor, emitter
        # the backend's own passes (its fusions), run on the legal module by compile: each
        # a factory taking the compile's shared state (legato.passes.pipeline.Lowering)
        self.passes = tuple(passes)
        self.source, self.description = source, description
        self._cache: dict = {}

    def __repr__(self):
        return f"Backend({self.name}, {len(self.legal)} legal ops, from {self.source or '?'})"

    def why_not(self, call: Call) -> str | None:
        """None when the backend runs this call natively; otherwise the reason it does not."""
        cond = self.legal.get(call.op)
        # a check may look at whole shapes and constants; the declarative keys only at
        # dtypes and ranks
        key = value_key(call) if cond is not None and cond.check is not None else \
            (call.op, call.attrs, tuple(None if v is None else (v.dtype, v.rank)
                                        for v in call.inputs))
        try:
            return self._cache[key]
        except KeyError:
            pass
        reason = f"{self.name} does not list {call.op} as legal" if cond is None \
            else cond.why_not(call, self.name)
        if reason is not None and cond is not None:
            reason = f"{self.name} lists {call.op} as legal but not for {reason}"
        self._cache[key] = reason
        return reason

    def supports(self, call: Call) -> bool:
        return self.why_not(call) is None

    def why_not_custom(self, call: Call) -> str | None:
        """None when the backend can tunnel `call` (the op being tunnelled, or a custom
        call itself) as a custom op; otherwise why not."""
        if not self.custom_ops:
            return f"{self.name} does not take custom ops"
        cond = self.custom_condition
        if cond is None:
            return None
        key = ("custom op", value_key(call))
        try:
            return self._cache[key]
        except KeyError:
            pass
        reason = cond.why_not(call, self.name)
        if reason is not None:
            reason = f"{self.name} takes custom ops but not for {reason}"
        self._cache[key] = reason
        return reason

    def decide(self, call: Call, config: BackendConfig = EMPTY_CONFIG, level: int = 0,
               use_rules: bool = True) -> Decision:
        """Whether this backend, under the user's `config`, takes `call` (of an op of
        composite `level`): the one answer legalization and partitioning both use.

        Taken (action in TAKEN): "legal" (runs natively), "kept" (kept by the config and
        runs natively), "custom" (tunnelled as a custom op). Not taken: "decomposed" when
        the config's max_level or decompose list, or the backend's lowering rule (rule
        BACKEND_RULE; not with `use_rules=False`), wants it rewritten; "failed" with rule
        KEPT for a kept call it can neither run nor tunnel; "failed" with rule DECLINED
        otherwise (the reason says why; decomposition or a fallback may still take it).
        """
        op = call.op
        if op in config.keep:
            return self._keep(call)
        if config.max_level is not None and level > config.max_level:
            return Decision("decomposed", f"level {level} is above max_level "
                                          f"{config.max_level}", "max_level")
        if op == CUSTOM_OP and self.custom_ops:
            why = self.why_not_custom(call)
            return Decision("custom", f"{self.name} takes custom ops") if why is None \
                else Decision("failed", why, DECLINED)
        why = self.why_not(call)
        if why is None:
            if op not in config.decompose:
                return Decision("legal", f"{self.name} supports it" + (
                    f", run by its fallback {self.fallback}'s kernel (kernel: fallback)"
                    if op in self.borrowed else ""))
            return Decision("decomposed", f"decompose requested by config "
                                          f"{config.source or ''}".rstrip(), "unsupported")
        if use_rules and self.rule(op) is not None:
            return Decision("decomposed", f"{why}; rewritten by {self.name}'s lowering rule",
                            BACKEND_RULE)
        return Decision("failed", why, DECLINED)

    def _keep(self, call: Call) -> Decision:
        why = self.why_not(call)
        if why is None or (self.executes and self.has_kernel(call.op)):
            return Decision("kept", f"kept by config; {self.name} runs it natively")
        custom_why = self.why_not_custom(call)
        if custom_why is None:
            return Decision("custom", f"kept by config; {self.name} has no lowering ({why}), "
                                      "tunnelled as a custom op", "custom")
        # the routes tried, one per line as legalization's error lists them
        return Decision("failed", f"native: {why}\n  - custom op: {custom_why}", KEPT)

    def rule(self, op: str) -> Callable | None:
        """The backend's lowering rule for `op` (docs/plugins.md), imported on first use;
        an exception of its own becomes a LegalizationError naming the backend and rule."""
        try:
            return self._ready_rules[op]
        except KeyError:
            pass
        rule = self._rules.get(op)
        if isinstance(rule, str):
            rule = resolve(rule, f"{self.name} rule for {op}", need_callable=True)
        if rule is not None:
            rule = partial(call_plugin, rule, f"backend {self.name}: rule {_name(rule)} "
                                              f"for {op}")
        self._ready_rules[op] = rule
        return rule

    def has_kernel(self, op: str) -> bool:
        return op in self._kernels

    def kernel_ops(self) -> list[str]:
        """The ops of the kernel table."""
        return list(self._kernels)

    def kernel(self, op: str) -> Callable:
        """The kernel for `op`, imported on first use when declared as 'module:function'."""
        try:
            kernel = self._kernels[op]
        except KeyError:
            raise ExecutionError(f"backend {self.name} has no kernel for {op}") from None
        if isinstance(kernel, str):
            kernel = self._kernels[op] = resolve(kernel, f"{self.name} kernel for {op}",
                                                     need_callable=True)
        return kernel


# Attributes that name axes of an input: a condition `axes: [-1]` and a call's `axes: [2]`
# on a rank-3 input are the same condition. The rank they count against is the first
# input's, except where an op's axes index its result (expand_dims inserts them);
# permute_dims' axes are a permutation, so their order is part of the value.
AXIS_ATTRS = frozenset({"axis", "axes"})
RESULT_AXES = frozenset({"expand_dims"})
ORDERED_AXES = frozenset({"permute_dims"})


def axis_value(call: Call, key: str, value: Any) -> Any:
    """An axis attribute's value with negative axes counted from the end (sorted, unless
    order matters); None when `key` is no axis attribute or the rank is unknown."""
    if key not in AXIS_ATTRS or value is None or not call.inputs or call.inputs[0] is None:
        return None
    rank = call.outputs[0].rank if call.op in RESULT_AXES and call.outputs \
        else call.inputs[0].rank
    if isinstance(value, int) and not isinstance(value, bool):
        return value + rank if -rank <= value < 0 else value
    if not isinstance(value, tuple):
        return None
    axes = tuple(a + rank if isinstance(a, int) and -rank <= a < 0 else a for a in value)
    return axes if call.op in ORDERED_AXES else tuple(sorted(axes))


def value_key(call: Call) -> tuple:
    """What a decision about `call` may depend on when a plugin's check sees it: op,
    attributes, input types, and which inputs are constants (a check may refuse a constant
    where it takes a run-time value of the same type). Not the constants' data: answers
    are cached for the backend's lifetime, which must not keep every model's data alive."""
    return (call.op, call.attrs, tuple(None if v is None else (v.type, isinstance(v, Const))
                                       for v in call.inputs))


def call_plugin(fn: Callable, what: str, *args) -> Any:
    """fn(*args) for a function a plugin supplied (a check, a rule): an exception of its
    own is a bug in the plugin and becomes a LegalizationError saying whose."""
    try:
        return fn(*args)
    except LegalizationError:
        raise
    except Exception as err:
        raise LegalizationError(f"{what} raised {type(err).__name__}: "
                                f"{clip(str(err), MAX_REASON)}") from err


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or quote(fn)


def resolve(ref: str, what: str, need_callable: bool = False) -> Any:
    """Import 'package.module:attribute'. Importing runs a plugin's code, so whatever it
    raises becomes a ConfigError naming the reference."""
    module_name, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
    except (Exception, SystemExit) as err:
        raise ConfigError(f"{what}: cannot import {quote(ref)}: {type(err).__name__}: "
                          f"{clip(str(err), 300)}") from err
    if need_callable and not callable(obj):
        raise ConfigError(f"{what}: {quote(ref)} is a {type(obj).__name__}, not a function")
    return obj
