"""What registration can tell about a backend before anything runs on it: every legal op
has a kernel (executing backends; or says `kernel: fallback` and its fallback has one),
an emitter entry (emitting backends whose emitter says which ops it prints, as an `ops`
attribute), and every
kernel accepts the op's inputs and attributes the way the executor passes them.

A plugin module's `legato_*` functions that pluggy would silently ignore (a misspelt hook,
a missing @hookimpl) are found here too. Each problem is a sentence naming the plugin,
the backend and the op.
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable

from ..ir import CUSTOM_OP
from ..ir.errors import quote
from ..ops.registry import suggest
from ..plugins import hookspecs
from .backend import Backend

HOOKS = frozenset(name for name in vars(hookspecs) if name.startswith("legato_"))
MAX_LISTED = 8  # ops named in one message; the rest are counted


def backend_problems(backend: Backend, registry) -> list[str]:
    """Problems of `backend` visible at registration: kernel signatures, and legal ops it
    has no kernel for without saying `kernel: fallback` (see fallback_problems)."""
    problems = [p for op in backend.kernel_ops() if (p := signature_problem(
        backend, op, registry.get(op))) is not None]
    missing = uncovered_ops(backend)
    if missing and backend.executes and not backend.fallback:
        problems.append(f"{_whose(backend)}: legal {_ops(missing)} without a kernel and "
                        "no fallback backend")
    elif missing and backend.executes:
        # the fallback's kernel would run them while the report credits this backend
        where = f" in {backend.capability_file}" if backend.capability_file else ""
        problems.append(f"{_whose(backend)}: legal {_ops(missing)} without a kernel: add "
                        f"a kernel, or write `kernel: fallback` under legal.{sorted(missing)[0]}"
                        f"{where} to run it with fallback {backend.fallback}'s kernel")
    elif missing and not backend.executes:
        problems.append(f"{_whose(backend)}: its emitter's ops lack {_ops(missing)}, which "
                        "it would have to print")
    return problems


def fallback_problems(backend: Backend, backends: dict[str, Backend]) -> list[str]:
    """Problems of an executing backend's fallback, once every plugin has registered: it
    is installed, executes, and has a kernel for each op the backend runs with the
    fallback's kernel (`kernel: fallback`)."""
    if not (backend.executes and backend.fallback):
        return []
    fallback = backends.get(backend.fallback)
    if fallback is None:
        return [f"{_whose(backend)}: fallback {quote(backend.fallback)} is not installed"]
    if not fallback.executes:
        return [f"{_whose(backend)}: fallback {fallback.name} does not execute (it emits "
                "code)"]
    missing = [op for op in backend.borrowed if not fallback.has_kernel(op)]
    if missing:
        return [f"{_whose(backend)}: legal {_ops(missing)} without a kernel, here or on "
                f"fallback {fallback.name}"]
    return []


def uncovered_ops(backend: Backend) -> list[str]:
    """Legal ops the backend has no kernel for (executing) or its emitter does not print
    (emitting, when the emitter says which ops it prints; the custom op too when it tunnels
    calls). An executing backend with its
    own executor and no kernel table runs what it likes: nothing to check."""
    if backend.executes:
        if backend.executor is not None and not backend.kernel_ops():
            return []
        return [op for op in backend.legal if not backend.has_kernel(op) and
                op not in backend.borrowed]
    printed = getattr(backend.emitter, "ops", None)
    if printed is None:
        return []
    emitted = [*backend.legal, CUSTOM_OP] if backend.custom_ops else backend.legal
    return [op for op in emitted if op not in printed]


def signature_problem(backend: Backend, op: str, opdef) -> str | None:
    """Why `backend`'s kernel for `op` cannot be called as the executor calls it (inputs
    positionally, None for an absent optional one, every attribute by keyword), or None.
    A kernel 'module:function' is imported here; one without a signature passes."""
    kernel = backend.kernel(op)
    try:
        signature = inspect.signature(kernel)
    except (TypeError, ValueError):  # a builtin or extension function: nothing to read
        return None
    count = len(opdef.inputs)
    attrs = dict.fromkeys(opdef.attr_specs)
    for n in (count, count + 2) if opdef.variadic else (count,):
        try:
            signature.bind(*[None] * n, **attrs)
        except TypeError as err:
            return (f"{_whose(backend)}: kernel {_name(kernel)}{signature} for {op} cannot "
                    f"be called as {opdef.signature()} with {n} inputs and the attributes "
                    f"as keywords: {err}")
    return None


def hook_problems(plugin: Any) -> list[str]:
    """`legato_*` functions of a plugin that pluggy would ignore: not marked
    @legato.hookimpl, or marked but named after no hook (a typo)."""
    problems = []
    for attr in sorted(dir(plugin)):
        try:  # a plugin object's property may raise anything
            value = getattr(plugin, attr, None)
            marked = getattr(value, "legato_impl", None)
        except Exception:
            continue
        if not callable(value) or isinstance(value, type) or \
                (marked is None and not attr.startswith("legato_")):
            continue
        hook = (marked or {}).get("specname") or attr
        if hook not in HOOKS:
            problems.append(f"function {attr} is not a legato hook{_hook_hint(hook)}, so it "
                            "is never called")
        elif marked is None:
            problems.append(f"function {attr} is not marked @legato.hookimpl, so it is "
                            "never called")
    return problems


def _hook_hint(name: str) -> str:
    return suggest(name, HOOKS) or f" (hooks: {', '.join(sorted(HOOKS))})"


def _whose(backend: Backend) -> str:
    return f"plugin {backend.source or '?'}, backend {backend.name}"


def _ops(ops: Iterable[str]) -> str:
    ops = sorted(ops)
    shown = ", ".join(ops[:MAX_LISTED])
    more = f" and {len(ops) - MAX_LISTED} more" if len(ops) > MAX_LISTED else ""
    return f"op{'s' if len(ops) > 1 else ''} {shown}{more}"


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
