"""Fixtures of every test of the repository (tests/ and plugins/*/tests): plugins found
through entry points written for one test, and a third-party plugin
(tests/third_party_plugin) present for the whole session."""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

import legato
from legato.plugins import host as plugins
from legato.testing.plugins import write_distributions

# make test runs the same examples every time; HYPOTHESIS_PROFILE=explore draws new ones
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

THIRD_PARTY = Path(__file__).parent / "tests" / "third_party_plugin"


@pytest.fixture(scope="session", autouse=True)
def third_party_plugin(tmp_path_factory):
    """The acme3p plugin (extra ops and a backend) installed for the whole session: its
    package on sys.path and its distribution metadata (the `legato` entry point) in a
    folder on sys.path, as pip would. LEGATO_TEST_NO_THIRD_PARTY=1 leaves it out."""
    if os.environ.get("LEGATO_TEST_NO_THIRD_PARTY"):
        yield None
        return
    folder = str(tmp_path_factory.mktemp("site"))
    write_distributions(folder, {"acme3p": "legato_acme3p.plugin"})
    sys.path[:0] = [str(THIRD_PARTY), folder]
    host = plugins.reload_plugins()
    assert "acme3p_npu" in host.backends, host.problems
    yield host
    for entry in (str(THIRD_PARTY), folder):
        sys.path.remove(entry)
    importlib.invalidate_caches()
    plugins.reload_plugins()


@pytest.fixture
def install_plugins(monkeypatch, tmp_path):
    """install_plugins({"name": module_or_None_for_import_error}) -> a fresh PluginHost.

    Each fake plugin is an entry point in group 'legato' next to the installed ones.
    """
    def install(fakes: dict):
        for name, module in fakes.items():
            if module is not None:  # undone by monkeypatch (write_distributions sets it)
                monkeypatch.setitem(sys.modules, f"fake_legato_plugin_{name}", module)
        folder = tmp_path / f"site{len(list(tmp_path.glob('site*')))}"
        write_distributions(folder, fakes)
        monkeypatch.syspath_prepend(str(folder))
        return plugins.reload_plugins()

    yield install
    monkeypatch.undo()
    importlib.invalidate_caches()
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
