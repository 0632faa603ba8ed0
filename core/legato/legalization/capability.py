"""Capability files: every key validated into a Backend (docs/yaml.md).

Each malformed shape, whatever the key, is a ConfigError naming the file and the key;
values are quoted in bounded form.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ..ir import CUSTOM_OP, DTYPES, freeze_attr
from ..ir.errors import ConfigError, LegatoError, clip, quote
from ..ops.layout_rules import LAYOUTS
from .backend import Backend, Condition, resolve
from .yamlsource import (as_list, check_keys, check_op, dtype_hint, expect, hint, is_int,
                         load_yaml)

CAPABILITY_KEYS = {"backend", "description", "executes", "fallback", "custom_ops", "domain",
                   "legal", "legal_levels", "legal_from_kernels", "kernels", "layout", "rules"}
CONDITION_KEYS = {"dtypes", "ranks", "attrs", "check"}
REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")    # 'package.module:attribute'
DOMAIN = re.compile(r"[A-Za-z_][\w.\-]{0,63}")
NAME = re.compile(r"[A-Za-z_]\w{0,63}")                 # a backend's name


def parse_capability(source, registry, *, kernels=None, executor=None, emitter=None,
                     passes=(), plugin: str = "") -> Backend:
    """Validate a capability file (path or dict) and build the Backend."""
    data, label = load_yaml(source, "capability file")
    check_keys(data, CAPABILITY_KEYS, label, "")
    name = data.get("backend")
    if not _is_name(name):
        raise ConfigError(f"{label}: key 'backend' must name the backend (an identifier of "
                          f"at most 64 characters), got {quote(name)}")
    _check_settings(data, name, label)
    legal = _parse_legal(data.get("legal"), registry, label)
    table = _parse_kernels(data.get("kernels"), registry, label)
    table.update(_function_table(kernels, registry, label, "kernels argument"))
    # an executing backend's kernel table bounds its levels: ops another plugin adds at
    # those levels are not legal where there is no kernel to run them
    runs = table if data.get("executes", True) and table else None
    _add_levels(legal, data.get("legal_levels"), registry, label, runs)
    _add_kernel_ops(legal, table, data, registry, label)
    borrowed = _borrowed(data, label)
    rules = _function_table(data.get("rules"), registry, label, "rules")
    for key, fn in (("executor", executor), ("emitter", emitter)):
        expect(fn is None or callable(fn), fn, label, f"{key} argument", "a callable")
    expect(isinstance(passes, (list, tuple)) and all(callable(p) for p in passes), passes,
           label, "passes argument", "a list of pass factories (lowering -> pass)")
    custom_condition = _custom_condition(data.get("custom_ops"), label)
    backend = Backend(name, legal, executes=data.get("executes", True),
                      fallback=data.get("fallback"), custom_ops=bool(data.get("custom_ops")),
                      custom_condition=custom_condition,
                      domain=data.get("domain") or "legato", kernels=table,
                      layout=data.get("layout"), executor=executor, emitter=emitter,
                      source=plugin or label, description=data.get("description") or "",
                      rules=rules, borrowed=borrowed, passes=passes)
    backend.capability_file = label  # where registration problems point the author
    return backend


def _check_settings(data: Mapping, name: str, label: str) -> None:
    """The scalar keys: flags, names and the layout."""
    for key in ("executes", "custom_ops"):
        if key in data and not isinstance(data[key], bool) and not (
                key == "custom_ops" and isinstance(data[key], Mapping)):
            also = ", or the conditions of the calls it tunnels" if key == "custom_ops" else ""
            raise ConfigError(f"{label}: key {key!r} must be true or false{also}, "
                              f"got {quote(data[key])}")
    checks = {
        "description": (lambda v: isinstance(v, str), "a string"),
        "fallback": (lambda v: _is_name(v) and v != name, "the name of another backend"),
        "domain": (lambda v: isinstance(v, str) and DOMAIN.fullmatch(v) is not None,
                   "a domain name (letters, digits, '_', '.', '-'; at most 64)"),
        "layout": (lambda v: v in LAYOUTS, f"one of {', '.join(LAYOUTS)}"),
    }
    for key, (ok, wanted) in checks.items():
        value = data.get(key)
        expect(value is None or ok(value), value, label, f"key {key!r}", wanted)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def _parse_legal(legal, registry, label) -> dict[str, Condition]:
    if legal is None:
        return {}
    if not isinstance(legal, Mapping):
        raise ConfigError(f"{label}: key 'legal' must map op names to conditions")
    out = {}
    for op, cond in legal.items():
        check_op(op, registry, label, "legal")
        where = f"legal.{op}"
        if isinstance(cond, Mapping) and "kernel" in cond:  # checked by _borrowed
            cond = {k: v for k, v in cond.items() if k != "kernel"}
        cond = _condition_keys(cond, label, where)
        out[op] = _condition(cond, _attr_conditions(cond.get("attrs"), registry.get(op), label,
                                                    f"{where}.attrs"), label, where)
    return out


def _borrowed(data: Mapping, label: str) -> frozenset:
    """The legal ops an executing backend runs with its fallback's kernel: those it says
    so for (`kernel: fallback`). Registration refuses any other legal op without a kernel
    (backend_checks), as the fallback's kernel would run it unannounced."""
    entries = data.get("legal") if isinstance(data.get("legal"), Mapping) else {}
    borrowed = set()
    for op, cond in entries.items():
        if isinstance(cond, Mapping) and "kernel" in cond:
            expect(cond["kernel"] == "fallback", cond["kernel"], label, f"legal.{op}.kernel",
                   "'fallback' (run it with the fallback's kernel)")
            if not data.get("fallback"):
                raise ConfigError(f"{label}: legal.{op}.kernel: fallback, but the backend "
                                  "names no fallback; add key 'fallback'")
            borrowed.add(op)
    return frozenset(borrowed)


def _condition_keys(cond, label: str, where: str) -> Mapping:
    """A condition mapping with known keys only; null is the empty condition."""
    cond = {} if cond is None else cond
    expect(isinstance(cond, Mapping), cond, label, where,
           "a mapping of conditions (dtypes, ranks, attrs, check)")
    check_keys(cond, CONDITION_KEYS, label, f"{where}.")
    return cond


def _condition(cond: Mapping, attrs: dict, label: str, where: str) -> Condition:
    return Condition(_dtypes(cond, label, where), _ranks(cond, label, where), attrs,
                     _callable_ref(cond.get("check"), label, f"{where}.check"))


def _custom_condition(custom, label: str) -> Condition | None:
    """custom_ops given as conditions: which calls the backend tunnels (dtypes, ranks and
    a check, applied to the call being tunnelled; attributes differ per op, so no attrs)."""
    if not isinstance(custom, Mapping):
        return None
    cond = _condition_keys(custom, label, "custom_ops")
    if "attrs" in cond:
        raise ConfigError(f"{label}: custom_ops.attrs: attributes differ from op to op; say "
                          "what the custom op form cannot carry with a check")
    return _condition(cond, {}, label, "custom_ops")


def _add_kernel_ops(legal: dict, table: Mapping, data: Mapping, registry, label) -> None:
    """legal_from_kernels: every op of the kernel table is legal under one shared
    condition, unless `legal` (or `legal_levels`) already says when it is."""
    if "legal_from_kernels" not in data:
        return
    where = "legal_from_kernels"
    cond = _condition_keys(data[where], label, where)
    ops = [op for op in table if op not in legal]
    attrs = cond.get("attrs")
    if attrs is not None:
        expect(isinstance(attrs, Mapping), attrs, label, f"{where}.attrs",
               "a mapping of attribute values")
        known = {key for op in table for key in registry.get(op).attr_specs}
        for key in attrs:
            if key not in known:  # would constrain no kernel's op: a typo
                raise ConfigError(f"{label}: {where}.attrs: no op of the kernel table has an "
                                  f"attribute {quote(key)}{hint(key, known)}")
    shared = _condition(cond, {}, label, where)
    for op in ops:
        opdef = registry.get(op)
        mine = {k: v for k, v in (attrs or {}).items() if k in opdef.attr_specs}
        legal[op] = Condition(shared.dtypes, shared.ranks, _attr_conditions(
            mine, opdef, label, f"{where}.attrs"), shared.check) if mine else shared


def _dtypes(cond, label, where):
    if "dtypes" not in cond:
        return None
    dtypes = cond["dtypes"]
    expect(isinstance(dtypes, list), dtypes, label, f"{where}.dtypes", "a list of dtypes")
    for dtype in dtypes:
        if not isinstance(dtype, str) or dtype not in DTYPES:
            said = dtype_hint(dtype, DTYPES) or f"; one of {', '.join(DTYPES)}"
            raise ConfigError(f"{label}: {where}.dtypes: unknown dtype {quote(dtype)}{said}")
    return frozenset(dtypes)


def _ranks(cond, label, where):
    if "ranks" not in cond:
        return None
    ranks = cond["ranks"]
    expect(isinstance(ranks, list) and all(is_int(r) for r in ranks), ranks, label,
           f"{where}.ranks", "a list of ranks (ints >= 0)")
    return frozenset(ranks)


def _attr_conditions(attrs, opdef, label, where) -> dict[str, tuple]:
    """attr: value (equality) or attr: [v1, v2] (one of); for list attributes, a list of
    lists is 'one of' and a flat list is equality. Each value is checked against the
    attribute's type, so a condition that no call could meet is an error."""
    if attrs is None:
        return {}
    expect(isinstance(attrs, Mapping), attrs, label, where, "a mapping of attribute values")
    out = {}
    for key, allowed in attrs.items():
        if key not in opdef.attr_specs:
            raise ConfigError(f"{label}: {where}: {opdef.name} has no attribute "
                              f"{quote(key)}{hint(key, opdef.attr_specs)}")
        spec = opdef.attr_specs[key]
        list_attr = spec.type.rstrip("?") in ("ints", "floats")
        if not isinstance(allowed, list) or (list_attr and not any(
                isinstance(a, list) for a in allowed)):
            allowed = [allowed]
        try:
            out[key] = tuple(spec.check(freeze_attr(a, key), opdef.name) for a in allowed)
        except LegatoError as err:
            raise ConfigError(f"{label}: {where}.{key}: {clip(str(err), 300)}") from None
    return out


def _add_levels(legal: dict, levels, registry, label, table: Mapping | None) -> None:
    """Every op of the listed composite levels is legal, with no conditions (only those
    of `table` when one is given)."""
    levels = as_list(levels, label, "legal_levels", "a list of levels (ints >= 0)")
    for level in levels:
        if not is_int(level):
            raise ConfigError(f"{label}: legal_levels: {quote(level)} is not a level "
                              "(int >= 0)")
        for op in registry.names():
            if registry.get(op).level == level and op != CUSTOM_OP and \
                    (table is None or op in table):
                legal.setdefault(op, Condition())


def _parse_kernels(kernels, registry, label) -> dict:
    """'module:TABLE' (imported now) or a mapping op -> kernel."""
    if isinstance(kernels, str):
        _check_ref(kernels, label, "kernels", "'module:TABLE' or a mapping")
        table = resolve(kernels, f"{label}: kernels")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{label}: kernels: {quote(kernels)} is not a mapping of op "
                              "to kernel")
        kernels = table
    return _function_table(kernels, registry, label, "kernels")


def _function_table(table, registry, label: str, key: str) -> dict:
    """A mapping op -> callable or 'module:function' (kernels, rules), or None."""
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{label}: {key} must map op names to functions or "
                          f"'module:function', got {quote(table)}")
    for op, ref in table.items():
        check_op(op, registry, label, key)
        expect(ref is not None, ref, label, f"{key}.{op}", "a function or 'module:function'")
        _callable_ref(ref, label, f"{key}.{op}")
    return dict(table)


def _callable_ref(ref, label: str, key: str):
    """A callable or a 'module:function' string (imported on first use), or None."""
    if ref is None or callable(ref):
        return ref
    _check_ref(ref, label, key, "'module:function'")
    return ref


def _check_ref(ref: Any, label: str, key: str, wanted: str) -> None:
    expect(isinstance(ref, str) and REF.fullmatch(ref) is not None, ref, label, key, wanted)
