"""The plugin host: finds plugins through the `legato` entry-point group, calls their
hooks with register callbacks, validates what they register and keeps the backends.

A plugin that fails to import, raises from a hook, or registers a bad op or capability
file is recorded in `problems` under its name; the other plugins load as usual.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any, Callable

import pluggy

from . import hookspecs
from .backend import Backend, parse_capability
from .errors import LegatoError, PluginError, RegistrationError
from .registry import OpDef, Registry, suggest

GROUP = "legato"


class PluginHost:
    """Plugins, their ops and their backends, for one registry."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.backends: dict[str, Backend] = {}
        self.problems: list[tuple[str, str]] = []
        self._ops_added: list[str] = []

    # --- discovery ----------------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Import every `legato` entry point (like pluggy's load_setuptools_entrypoints,
        but one broken plugin does not stop the others)."""
        names = []
        for dist in list(importlib.metadata.distributions()):
            for ep in dist.entry_points:
                if ep.group != GROUP or ep.name in names or self.pm.has_plugin(ep.name):
                    continue
                names.append(ep.name)
                try:
                    plugin = ep.load()
                    self.pm.register(plugin, name=ep.name)
                except Exception as err:  # a plugin's own bug must not break the host
                    self.problems.append((ep.name, f"failed to load {ep.value!r}: "
                                                   f"{type(err).__name__}: {err}"))
                    names.remove(ep.name)
        self._run_hooks(names)

    def add_plugin(self, plugin: Any, name: str) -> None:
        """Register a plugin object in-process (tests, notebooks) and run its hooks."""
        if self.pm.has_plugin(name):
            raise RegistrationError(f"plugin {name!r} is already registered")
        self.pm.register(plugin, name=name)
        self._run_hooks([name])

    def _run_hooks(self, names: list[str]) -> None:
        # ops first: capability files of any plugin may name ops another plugin adds
        for hook, make in ((self.pm.hook.legato_register_ops, self._op_registrar),
                           (self.pm.hook.legato_register_backends, self._backend_registrar)):
            for impl in hook.get_hookimpls():
                if impl.plugin_name not in names:
                    continue
                try:
                    impl.function(register=make(impl.plugin_name))
                except Exception as err:
                    self.problems.append((impl.plugin_name, _describe(hook.name, err)))

    def _op_registrar(self, plugin: str) -> Callable:
        def register(name, inputs, infer, kind, level=0, decompose=None, examples=(),
                     attrs=None):
            self.registry.register(OpDef(name, inputs, attrs or {}, infer, kind, level,
                                         decompose, examples))
            self._ops_added.append(name)
        return register

    def _backend_registrar(self, plugin: str) -> Callable:
        def register(capability, kernels=None, executor=None, emitter=None):
            self.add_backend(parse_capability(capability, self.registry, kernels=kernels,
                                              executor=executor, emitter=emitter,
                                              plugin=plugin))
        return register

    # --- backends -----------------------------------------------------------------------

    def add_backend(self, backend: Backend, replace: bool = False) -> Backend:
        if backend.name in self.backends and not replace:
            raise RegistrationError(f"backend {backend.name!r} is already registered by "
                                    f"{self.backends[backend.name].source}")
        self.backends[backend.name] = backend
        return backend

    def backend(self, name: str) -> Backend:
        if isinstance(name, Backend):
            return name
        try:
            return self.backends[name]
        except KeyError:
            pass
        broken = [f"{p}: {m}" for p, m in self.problems if p == name]
        detail = f"; plugin problem: {broken[0]}" if broken else ""
        installed = ", ".join(sorted(self.backends)) or "none"
        raise PluginError(f"no backend named {name!r}{suggest(name, self.backends)}"
                          f" (installed: {installed}){detail}")

    def fallback_of(self, backend: Backend) -> Backend | None:
        if not backend.fallback:
            return None
        if backend.fallback not in self.backends:
            raise PluginError(f"backend {backend.name} names fallback {backend.fallback!r}, "
                              "which is not installed")
        return self.backends[backend.fallback]

    def close(self) -> None:
        """Forget the ops this host's plugins added to the registry."""
        for name in self._ops_added:
            self.registry.unregister(name)
        self._ops_added.clear()


def _describe(hook: str, err: Exception) -> str:
    if isinstance(err, LegatoError):
        return f"{hook}: {err}"
    return f"{hook} raised {type(err).__name__}: {err}"


_HOST: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide host, created (and entry points loaded) on first use."""
    global _HOST
    if _HOST is None:
        from .ops import REGISTRY
        host = PluginHost(REGISTRY)
        _HOST = host
        host.load_entry_points()
    return _HOST


def reload_plugins() -> PluginHost:
    """Drop the host (and plugin ops) and discover plugins again."""
    global _HOST
    if _HOST is not None:
        _HOST.close()
    _HOST = None
    return get_host()
