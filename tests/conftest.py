"""Shared fixtures: fake plugins found through monkeypatched entry points."""
from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

import legato
from legato import plugins


class FakeDistribution:
    """Just enough of importlib.metadata.Distribution for plugin discovery."""

    def __init__(self, name: str, entry_points):
        self.metadata = {"Name": name}
        self.entry_points = entry_points


@pytest.fixture
def install_plugins(monkeypatch):
    """install_plugins({"name": module_or_None_for_import_error}) -> a fresh PluginHost.

    Each fake plugin is an entry point in group 'legato' next to the real installed ones.
    """
    real = list(importlib.metadata.distributions())

    def install(fakes: dict):
        dists = []
        for name, module in fakes.items():
            module_name = f"fake_legato_plugin_{name}"
            if module is not None:
                monkeypatch.setitem(sys.modules, module_name, module)
            ep = importlib.metadata.EntryPoint(name, module_name, "legato")
            dists.append(FakeDistribution(f"fake-{name}", [ep]))
        monkeypatch.setattr(importlib.metadata, "distributions", lambda: real + dists)
        return plugins.reload_plugins()

    yield install
    monkeypatch.undo()
    plugins.reload_plugins()


def plugin_module(**hooks) -> types.ModuleType:
    """A module object whose functions are legato hook implementations."""
    module = types.ModuleType("fake_plugin")
    for name, fn in hooks.items():
        setattr(module, name, legato.hookimpl(fn))
    return module


@pytest.fixture
def backend_factory():
    """Register in-process backends for one test; unregistered afterwards."""
    names = []

    def register(capability: dict, **kwargs):
        backend = legato.register_backend(capability, **kwargs)
        names.append(backend.name)
        return backend

    yield register
    for name in names:
        legato.unregister_backend(name)
