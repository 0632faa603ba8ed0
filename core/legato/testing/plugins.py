"""Plugins in tests without installing them: modules found through faked entry points.

    with installed_plugins({"my_npu": "my_npu.plugin"}):   # module or module name
        check_backend("my_npu")

The fake distributions are listed next to the really installed ones, and the plugin host
is reloaded on entry and on exit (so plugins added during the block are gone after it).
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import sys
import types
from typing import Callable, Mapping

from ..hookspecs import hookimpl
from ..plugins import GROUP, reload_plugins


class FakeDistribution:
    """Just enough of importlib.metadata.Distribution for plugin discovery."""

    def __init__(self, name: str, entry_points):
        self.metadata = {"Name": name}
        self.entry_points = entry_points


def fake_distributions(plugins: Mapping[str, object]) -> list[FakeDistribution]:
    """One distribution per plugin name, its entry point naming a module: a module object
    (put in sys.modules as fake_legato_plugin_<name>), a module name, or None (a module
    that cannot be imported)."""
    dists = []
    for name, module in plugins.items():
        if isinstance(module, str):
            module_name = module
        else:
            module_name = f"fake_legato_plugin_{name}"
            if module is not None:
                sys.modules[module_name] = module
        ep = importlib.metadata.EntryPoint(name, module_name, GROUP)
        dists.append(FakeDistribution(f"fake-{name}", [ep]))
    return dists


def listing_also(dists: list) -> Callable:
    """A replacement for importlib.metadata.distributions listing `dists` too."""
    real = importlib.metadata.distributions

    def distributions(**kwargs):
        return list(real(**kwargs)) + list(dists)
    distributions.real = getattr(real, "real", real)
    return distributions


@contextlib.contextmanager
def installed_plugins(plugins: Mapping[str, object]):
    """Within the block the plugins are discovered as if installed; yields the host."""
    saved = importlib.metadata.distributions
    added = fake_distributions(plugins)
    importlib.metadata.distributions = listing_also(added)
    try:
        yield reload_plugins()
    finally:
        importlib.metadata.distributions = saved
        for dist in added:
            module = dist.entry_points[0].value
            if module.startswith("fake_legato_plugin_"):
                sys.modules.pop(module, None)
        reload_plugins()


def plugin_module(**hooks) -> types.ModuleType:
    """A module object whose functions are legato hook implementations."""
    module = types.ModuleType("fake_plugin")
    for name, fn in hooks.items():
        setattr(module, name, hookimpl(fn))
    return module
