"""Backends: what a capability file declares, validated, and the legality check.

A capability file (YAML) says which ops a backend runs natively and under which
conditions (dtypes of the tensor inputs, ranks, attribute values); a backend's kernel
table is the rest of its legal-op declaration. See docs/yaml.md.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from .errors import ConfigError, ExecutionError
from .ir import DTYPES, Call, freeze_attr
from .registry import suggest

CAPABILITY_KEYS = {"backend", "description", "executes", "fallback", "custom_ops", "domain",
                   "legal", "legal_levels", "kernels", "layout", "rules"}
CONDITION_KEYS = {"dtypes", "ranks", "attrs", "check"}


@dataclass(frozen=True)
class Condition:
    """When an op is legal: allowed input dtypes, input ranks, attribute values, and an
    optional `check(call) -> reason | None` for what the declarative keys cannot say
    (a callable, or 'module:function' imported on first use)."""

    dtypes: frozenset | None = None
    ranks: frozenset | None = None
    attrs: Mapping[str, tuple] = field(default_factory=dict)
    check: Any = None

    def why_not(self, call: Call) -> str | None:
        tensors = [v for v in call.inputs if v is not None]
        if self.dtypes is not None:
            bad = sorted({v.dtype for v in tensors} - self.dtypes)
            if bad:
                return f"dtype {', '.join(bad)} not in {sorted(self.dtypes)}"
        if self.ranks is not None:
            bad = sorted({v.rank for v in tensors} - self.ranks)
            if bad:
                return f"rank {', '.join(map(str, bad))} not in {sorted(self.ranks)}"
        for key, allowed in self.attrs.items():
            if call.attrs.get(key) not in allowed:
                return f"{key}={call.attrs.get(key)!r} not in {[list(a) if isinstance(a, tuple) else a for a in allowed]}"
        if self.check is not None:
            if isinstance(self.check, str):  # frozen dataclass: cache the imported function
                object.__setattr__(self, "check", resolve(self.check, f"check for {call.op}"))
            return self.check(call)
        return None


class Backend:
    """A backend: legal ops with conditions, kernels, and how it runs or emits a module."""

    def __init__(self, name: str, legal: Mapping[str, Condition], *, executes: bool = True,
                 fallback: str | None = None, custom_ops: bool = False,
                 domain: str = "legato", kernels: Mapping[str, Any] | None = None,
                 layout: str | None = None, executor: Callable | None = None,
                 emitter: Callable | None = None, source: str = "", description: str = "",
                 rules: Mapping[str, Any] | None = None):
        self.name, self.executes, self.fallback = name, executes, fallback
        self.custom_ops, self.domain, self.layout = custom_ops, domain, layout
        self.legal = dict(legal)
        self._kernels = dict(kernels or {})
        self._rules = dict(rules or {})
        self.executor, self.emitter = executor, emitter
        self.source, self.description = source, description
        self._cache: dict = {}

    def __repr__(self):
        return f"Backend({self.name}, {len(self.legal)} legal ops, from {self.source or '?'})"

    def why_not(self, call: Call) -> str | None:
        """None when the backend runs this call natively; otherwise the reason it does not."""
        cond = self.legal.get(call.op)
        # a check may look at whole shapes; the declarative keys only at dtypes and ranks
        key = (call.op, call.attrs, tuple(None if v is None else v.type if cond is not None
                                          and cond.check is not None else (v.dtype, v.rank)
                                          for v in call.inputs))
        try:
            return self._cache[key]
        except KeyError:
            pass
        reason = f"{self.name} does not list {call.op} as legal" if cond is None \
            else cond.why_not(call)
        if reason is not None and cond is not None:
            reason = f"{self.name} lists {call.op} as legal but not for {reason}"
        self._cache[key] = reason
        return reason

    def supports(self, call: Call) -> bool:
        return self.why_not(call) is None

    def rule(self, op: str) -> Callable | None:
        """The backend's lowering rule for `op` (docs/plugins.md), imported on first use."""
        rule = self._rules.get(op)
        if isinstance(rule, str):
            rule = self._rules[op] = resolve(rule, f"{self.name} rule for {op}")
        return rule

    def has_kernel(self, op: str) -> bool:
        return op in self._kernels

    def kernel(self, op: str) -> Callable:
        """The kernel for `op`, imported on first use when declared as 'module:function'."""
        try:
            kernel = self._kernels[op]
        except KeyError:
            raise ExecutionError(f"backend {self.name} has no kernel for {op}") from None
        if isinstance(kernel, str):
            kernel = self._kernels[op] = resolve(kernel, f"{self.name} kernel for {op}")
        return kernel


def resolve(ref: str, what: str) -> Any:
    """Import 'package.module:attribute'."""
    module_name, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{what}: cannot import {ref!r}: {err}") from err
    return obj


# --- capability files ---------------------------------------------------------------------

def load_yaml(source, what: str) -> tuple[dict, str]:
    """(data, label) from a path, YAML text or a dict; safe loader only."""
    if isinstance(source, Mapping):
        return dict(source), f"<{what} dict>"
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{what} {path}: cannot read: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} malformed YAML: "
                          f"{getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, "
                          f"got {type(data).__name__}")
    return data, str(path)


def check_keys(data: Mapping, allowed: set, label: str, where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{label}: unknown key {where}{key!r}{suggest(str(key), allowed)}; "
                              f"allowed: {', '.join(sorted(allowed))}")


def check_op(name: Any, registry, label: str, key: str) -> None:
    if not isinstance(name, str) or name not in registry:
        raise ConfigError(f"{label}: {key}: unknown op {name!r}"
                          f"{suggest(str(name), registry.names())}")


def parse_capability(source, registry, *, kernels=None, executor=None, emitter=None,
                     plugin: str = "") -> Backend:
    """Validate a capability file (path or dict) and build the Backend."""
    data, label = load_yaml(source, "capability file")
    check_keys(data, CAPABILITY_KEYS, label, "")
    name = data.get("backend")
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"{label}: key 'backend' must name the backend (an identifier), "
                          f"got {name!r}")
    for key, kind in (("executes", bool), ("custom_ops", bool)):
        if key in data and not isinstance(data[key], kind):
            raise ConfigError(f"{label}: key {key!r} must be true or false, got {data[key]!r}")
    for key in ("fallback", "domain", "layout", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{label}: key {key!r} must be a string, got {data[key]!r}")
    legal = _parse_legal(data.get("legal") or {}, registry, label)
    for level in data.get("legal_levels") or []:
        if not isinstance(level, int) or level < 0:
            raise ConfigError(f"{label}: legal_levels: {level!r} is not a level (int >= 0)")
        for op in registry.names():
            if registry.get(op).level == level and op != "custom":
                legal.setdefault(op, Condition())
    table = _parse_kernels(data.get("kernels"), registry, label)
    table.update(kernels or {})
    rules = _parse_table(data.get("rules"), registry, label, "rules")
    return Backend(name, legal, executes=data.get("executes", True),
                   fallback=data.get("fallback"), custom_ops=data.get("custom_ops", False),
                   domain=data.get("domain") or "legato", kernels=table,
                   layout=data.get("layout"), executor=executor, emitter=emitter,
                   source=plugin or label, description=data.get("description", ""),
                   rules=rules)


def _parse_legal(legal, registry, label) -> dict[str, Condition]:
    if not isinstance(legal, Mapping):
        raise ConfigError(f"{label}: key 'legal' must map op names to conditions")
    out = {}
    for op, cond in legal.items():
        check_op(op, registry, label, "legal")
        cond = cond or {}
        if not isinstance(cond, Mapping):
            raise ConfigError(f"{label}: legal.{op}: expected a mapping of conditions "
                              f"(dtypes, ranks, attrs), got {cond!r}")
        check_keys(cond, CONDITION_KEYS, label, f"legal.{op}.")
        out[op] = Condition(_dtypes(cond, label, op), _ranks(cond, label, op),
                            _attr_conditions(cond.get("attrs") or {}, registry.get(op), label),
                            _callable_ref(cond.get("check"), label, f"legal.{op}.check"))
    return out


def _dtypes(cond, label, op):
    if "dtypes" not in cond:
        return None
    bad = [d for d in cond["dtypes"] or [] if d not in DTYPES]
    if bad or not isinstance(cond["dtypes"], list):
        raise ConfigError(f"{label}: legal.{op}.dtypes: unknown dtype {bad[0] if bad else cond['dtypes']!r}"
                          f"{suggest(str(bad[0]), DTYPES) if bad else ''}")
    return frozenset(cond["dtypes"])


def _ranks(cond, label, op):
    if "ranks" not in cond:
        return None
    ranks = cond["ranks"]
    if not isinstance(ranks, list) or not all(isinstance(r, int) and r >= 0 for r in ranks):
        raise ConfigError(f"{label}: legal.{op}.ranks: expected a list of ranks, got {ranks!r}")
    return frozenset(ranks)


def _attr_conditions(attrs, opdef, label) -> dict[str, tuple]:
    """attr: value (equality) or attr: [v1, v2] (one of); for list attributes, a list of
    lists is 'one of' and a flat list is equality."""
    if not isinstance(attrs, Mapping):
        raise ConfigError(f"{label}: legal.{opdef.name}.attrs must be a mapping")
    out = {}
    for key, allowed in attrs.items():
        if key not in opdef.attr_specs:
            raise ConfigError(f"{label}: legal.{opdef.name}.attrs: {opdef.name} has no "
                              f"attribute {key!r}{suggest(str(key), opdef.attr_specs)}")
        list_attr = opdef.attr_specs[key].type.rstrip("?") in ("ints", "floats")
        if not isinstance(allowed, list) or (list_attr and not any(
                isinstance(a, list) for a in allowed)):
            allowed = [allowed]
        out[key] = tuple(freeze_attr(a) for a in allowed)
    return out


def _parse_kernels(kernels, registry, label) -> dict:
    if kernels is None:
        return {}
    if isinstance(kernels, str):
        table = resolve(kernels, f"{label}: kernels")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{label}: kernels: {kernels!r} is not a mapping of op to kernel")
        kernels = table
    if not isinstance(kernels, Mapping):
        raise ConfigError(f"{label}: key 'kernels' must be 'module:TABLE' or a mapping")
    for op in kernels:
        check_op(op, registry, label, "kernels")
    return dict(kernels)


def _callable_ref(ref, label: str, key: str):
    """A callable or a 'module:function' string (imported on first use), or None."""
    if ref is None or callable(ref):
        return ref
    if not isinstance(ref, str) or ":" not in ref:
        raise ConfigError(f"{label}: {key}: expected 'module:function', got {ref!r}")
    return ref


def _parse_table(table, registry, label: str, key: str) -> dict:
    """A mapping op -> callable or 'module:function' (the `rules` key)."""
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{label}: key {key!r} must map op names to 'module:function'")
    for op, ref in table.items():
        check_op(op, registry, label, key)
        _callable_ref(ref, label, f"{key}.{op}")
    return dict(table)
