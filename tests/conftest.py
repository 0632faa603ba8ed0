"""Shared fixtures: fake plugins found through monkeypatched entry points, and a
third-party plugin (tests/third_party_plugin) present for the whole session."""
from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

import legato
from legato import plugins
from legato.testing.plugins import fake_distributions, listing_also

THIRD_PARTY = Path(__file__).parent / "third_party_plugin"


@pytest.fixture(scope="session", autouse=True)
def third_party_plugin():
    """The acme3p plugin (extra ops and a backend) discovered like an installed one for
    the whole session: every test runs with it present. LEGATO_TEST_NO_THIRD_PARTY=1
    leaves it out."""
    if os.environ.get("LEGATO_TEST_NO_THIRD_PARTY"):
        yield None
        return
    sys.path.insert(0, str(THIRD_PARTY))
    saved = importlib.metadata.distributions
    importlib.metadata.distributions = listing_also(fake_distributions(
        {"acme3p": "legato_acme3p.plugin"}))
    host = plugins.reload_plugins()
    assert "acme3p_npu" in host.backends, host.problems
    yield host
    importlib.metadata.distributions = saved
    sys.path.remove(str(THIRD_PARTY))
    plugins.reload_plugins()


@pytest.fixture
def install_plugins(monkeypatch):
    """install_plugins({"name": module_or_None_for_import_error}) -> a fresh PluginHost.

    Each fake plugin is an entry point in group 'legato' next to the installed ones.
    """
    def install(fakes: dict):
        for name, module in fakes.items():
            if module is not None:  # undone by monkeypatch, as fake_distributions adds it
                monkeypatch.setitem(sys.modules, f"fake_legato_plugin_{name}", module)
        dists = fake_distributions(fakes)
        monkeypatch.setattr(importlib.metadata, "distributions", listing_also(dists))
        return plugins.reload_plugins()

    yield install
    monkeypatch.undo()
    plugins.reload_plugins()


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
