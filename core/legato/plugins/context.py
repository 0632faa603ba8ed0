"""The context: the op registry and the plugin host with its backends, in one object.

Library functions take it (or just its registry) as a parameter; what a caller does not
pass comes from `context()`, the process-wide one, created on first use with the plugins
of the `legato` entry-point group loaded. Nothing else in legato reaches for globals.

    ctx = legato.context()
    ctx.registry.get("nn.gelu"); ctx.backend("cpu_ref"); ctx.backends; ctx.problems
"""
from __future__ import annotations

from ..ir import CALL_OP
from .host import PluginHost, get_host, reload_plugins

# the plugin host is the context: a registry, the backends, and what failed to load
Context = PluginHost


def context() -> Context:
    """The process-wide context (plugins are loaded on first use)."""
    return get_host()


def reload() -> Context:
    """Forget the process-wide context's plugins and discover them again."""
    return reload_plugins()


def unknown_op_note(op: str, registry) -> str:
    """For an op `registry` does not know: the plugins that failed to load, as the op may
    be theirs (else a did-you-mean hint to a core op would mislead)."""
    if op in registry or op == CALL_OP:
        return ""
    failed = sorted({plugin for plugin, _ in context().problems})
    return (f"; plugins that failed to load: {', '.join(failed)} (`legato backends` shows "
            "why)") if failed else ""
