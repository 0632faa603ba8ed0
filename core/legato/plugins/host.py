"""The plugin host: finds plugins through the `legato` entry-point group, calls their
hooks with register callbacks, validates what they register and keeps the backends.

A plugin that fails to import, raises (or calls sys.exit) from a hook, or registers a bad
op, a bad capability file or a backend that fails the registration checks
(backend_checks.py) is recorded in `problems` under its name, and what that hook had
registered before failing is removed again; the other plugins load as usual. Fallbacks are
checked once every plugin has registered, and `legato_*` functions pluggy would ignore
(misspelt, undecorated) are recorded too.
"""
from __future__ import annotations

import importlib.metadata
import traceback
from typing import Any, Callable

import pluggy

from ..frontends.torch import registry as torch_registry
from ..ir.errors import LegatoError, PluginError, RegistrationError, clip, quote
from ..legalization.backend import Backend
from ..legalization.backend_checks import backend_problems, fallback_problems, hook_problems
from ..legalization.capability import parse_capability
from ..legalization.yamlsource import hint
from ..ops import REGISTRY
from ..ops.registry import OpDef, Registry
from . import hookspecs
from .validators import make_validator

GROUP = "legato"
# what a plugin's code may raise that the host records as that plugin's problem; a plugin
# module that calls sys.exit() while importing must not end the host process
PLUGIN_FAILURES = (Exception, SystemExit)


class PluginHost:
    """Plugins, their ops and their backends, for one registry."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.backends: dict[str, Backend] = {}
        self.validators: dict = {}  # name -> validators.Validator
        self.problems: list[tuple[str, str]] = []
        # plugin -> the traceback of its first failure (`legato backends --verbose`)
        self.tracebacks: dict[str, str] = {}
        self._ops_added: list[str] = []
        self._torch_ops_added: list[str] = []  # custom-op converters (torch_registry)

    # --- discovery ----------------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Import every `legato` entry point (like pluggy's load_setuptools_entrypoints,
        but one broken plugin does not stop the others)."""
        names = []
        for ep in _entry_points():
            if ep.name in names or self.pm.has_plugin(ep.name):
                continue
            names.append(ep.name)
            try:
                plugin = ep.load()
                self.pm.register(plugin, name=ep.name)
            except PLUGIN_FAILURES as err:  # a plugin's own bug must not break the host
                self.problems.append((ep.name, f"failed to load {quote(ep.value)}: "
                                               f"{type(err).__name__}: {clip(str(err))}"))
                self._keep_traceback(ep.name)
                names.remove(ep.name)
                continue
            self.problems.extend((ep.name, p) for p in hook_problems(plugin))
        self._run_hooks(names)

    def _keep_traceback(self, plugin: str) -> None:
        self.tracebacks.setdefault(plugin, clip(traceback.format_exc(), 20000))

    def add_plugin(self, plugin: Any, name: str) -> None:
        """Register a plugin object in-process (tests, notebooks) and run its hooks."""
        if self.pm.has_plugin(name):
            raise RegistrationError(f"plugin {name!r} is already registered")
        try:
            self.pm.register(plugin, name=name)
        except PLUGIN_FAILURES as err:  # e.g. a hook whose arguments are not the spec's
            raise PluginError(f"plugin {quote(name)}: {type(err).__name__}: "
                              f"{clip(str(err))}") from None
        self.problems.extend((name, p) for p in hook_problems(plugin))
        self._run_hooks([name])

    def _run_hooks(self, names: list[str]) -> None:
        # ops first: capability files of any plugin may name ops another plugin adds
        new_backends: list[str] = []
        for hook, make in ((self.pm.hook.legato_register_ops, self._op_registrar),
                           (self.pm.hook.legato_register_torch_ops, self._torch_registrar),
                           (self.pm.hook.legato_register_backends, self._backend_registrar),
                           (self.pm.hook.legato_register_validators, self._validator_registrar)):
            for impl in hook.get_hookimpls():
                if impl.plugin_name not in names:
                    continue
                added: list[tuple[str, str]] = []
                try:
                    impl.function(register=make(impl.plugin_name, added))
                except PLUGIN_FAILURES as err:
                    self._undo(added)  # nothing half-registered stays behind
                    self.problems.append((impl.plugin_name, _describe(hook.name, err)))
                    self._keep_traceback(impl.plugin_name)
                else:
                    new_backends.extend(name for kind, name in added if kind == "backend")
        # fallbacks are checked once every plugin of this round has registered its backends
        for name in new_backends:
            backend = self.backends[name]
            self.problems.extend((backend.source, p)
                                 for p in fallback_problems(backend, self.backends))

    def _undo(self, added: list[tuple[str, str]]) -> None:
        for kind, name in added:
            if kind == "op":
                self.registry.unregister(name)
                self._ops_added.remove(name)
            elif kind == "torch op":
                torch_registry.unregister(name)
                self._torch_ops_added.remove(name)
            elif kind == "validator":
                self.validators.pop(name, None)
            else:
                self.backends.pop(name, None)

    def _op_registrar(self, plugin: str, added: list) -> Callable:
        def register(opdef, *args, **kwargs):
            if not isinstance(opdef, OpDef) or args or kwargs:
                opdef = _positional_opdef(opdef, *args, **kwargs)
            opdef.plugin = plugin
            self.registry.register(opdef)
            self._ops_added.append(opdef.name)
            added.append(("op", opdef.name))
        return register

    def _torch_registrar(self, plugin: str, added: list) -> Callable:
        def register(op_name, converter):
            torch_registry.register(op_name, converter, f"plugin {plugin}")
            self._torch_ops_added.append(op_name)
            added.append(("torch op", op_name))
        return register

    def _backend_registrar(self, plugin: str, added: list) -> Callable:
        def register(capability, kernels=None, executor=None, emitter=None, passes=()):
            backend = self.add_backend(parse_capability(
                capability, self.registry, kernels=kernels, executor=executor,
                emitter=emitter, passes=passes, plugin=plugin), check_fallback=False)
            added.append(("backend", backend.name))
        return register

    def _validator_registrar(self, plugin: str, added: list) -> Callable:
        def register(name, validate, run=None, suffixes=(), backends=()):
            validator = make_validator(plugin, name, validate, run, suffixes, backends)
            if name in self.validators:
                raise RegistrationError(f"validator {name!r} is already registered by "
                                        f"{self.validators[name].plugin}")
            self.validators[name] = validator
            added.append(("validator", name))
        return register

    # --- backends -----------------------------------------------------------------------

    def add_backend(self, backend: Backend, replace: bool = False, *,
                    check_fallback: bool = True) -> Backend:
        """Register `backend` after the registration checks (backend_checks.py): a kernel
        or emitter entry for every legal op, kernels that take the op's inputs and
        attributes, and (unless a plugin is loading, when fallbacks are checked after
        every plugin has registered) a fallback with kernels for what it lacks."""
        if backend.name in self.backends and not replace:
            raise RegistrationError(f"backend {backend.name!r} is already registered by "
                                    f"{self.backends[backend.name].source}")
        problems = backend_problems(backend, self.registry)
        if check_fallback and not problems:
            problems = fallback_problems(backend, self.backends)
        if problems:
            raise RegistrationError("\n".join(problems))
        self.backends[backend.name] = backend
        return backend

    def backend(self, name: str) -> Backend:
        if isinstance(name, Backend):
            return name
        if not isinstance(name, str):
            raise PluginError(f"a backend is a name or a Backend, got {type(name).__name__} "
                              f"{quote(name)}")
        try:
            return self.backends[name]
        except KeyError:
            pass
        broken = [f"{p}: {m}" for p, m in self.problems if p == name]
        detail = f"; plugin problem: {broken[0]}" if broken else ""
        installed = ", ".join(sorted(self.backends)) or "none"
        raise PluginError(f"no backend named {quote(name)}{hint(name, self.backends)}"
                          f" (installed: {installed}){detail}")

    def fallback_of(self, backend: Backend) -> Backend | None:
        if not backend.fallback:
            return None
        if backend.fallback not in self.backends:
            raise PluginError(f"backend {backend.name} names fallback "
                              f"{quote(backend.fallback)}, which is not installed")
        fallback = self.backends[backend.fallback]
        if not fallback.executes:
            raise PluginError(f"backend {backend.name} names fallback {fallback.name}, "
                              "which does not execute (it emits code)")
        return fallback

    def close(self) -> None:
        """Forget the ops (and torch importer converters) this host's plugins added."""
        for name in self._ops_added:
            self.registry.unregister(name)
        for name in self._torch_ops_added:
            torch_registry.unregister(name)
        self._ops_added.clear()
        self._torch_ops_added.clear()


def _entry_points() -> list:
    """The `legato` entry points of every installed distribution; a distribution whose
    metadata cannot be read is skipped, not fatal."""
    found = []
    for dist in list(importlib.metadata.distributions()):
        try:
            found.extend(ep for ep in dist.entry_points if ep.group == GROUP)
        except Exception:  # broken metadata of some unrelated distribution
            continue
    return found


def _positional_opdef(name, inputs, infer, kind, level=0, decompose=None, examples=(),
                     attrs=None, **keywords) -> OpDef:
    """The older form register(name, inputs, infer, kind, ...) builds the same OpDef
    (its arguments in the order plugins written before OpDef was public use)."""
    return OpDef(name, inputs, attrs, infer, kind, level, decompose, examples, **keywords)


def _describe(hook: str, err: BaseException) -> str:
    if isinstance(err, LegatoError):
        return f"{hook}: {clip(str(err), 1000)}"
    return f"{hook} raised {type(err).__name__}: {clip(str(err))}"


_HOST: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide host, created (and entry points loaded) on first use."""
    global _HOST
    if _HOST is None:
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
