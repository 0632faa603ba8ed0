"""Plugins in tests without installing them: real distribution metadata (a `.dist-info`
directory with the `legato` entry point) written to a folder on sys.path, so every reader
of importlib.metadata sees an ordinary installed distribution.

    with installed_plugins({"my_npu": "my_npu.plugin"}):   # module or module name
        check_backend("my_npu")

The plugin host is reloaded on entry and on exit (plugins added in the block are gone
after it).
"""
from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Mapping

from ..plugins.hookspecs import hookimpl
from ..plugins.host import GROUP, reload_plugins


def write_distributions(folder: str | Path, plugins: Mapping[str, object]) -> list[str]:
    """One distribution `fake-<name>` per plugin in `folder`, its entry point naming a
    module: a module object (put in sys.modules as fake_legato_plugin_<name>), a module
    name, or None (a module that cannot be imported). Returns the module names."""
    modules = []
    for name, module in plugins.items():
        if isinstance(module, str):
            module_name = module
        else:
            module_name = f"fake_legato_plugin_{name}"
            if module is not None:
                sys.modules[module_name] = module
        info = Path(folder) / f"fake_{name}-0.0.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-{name}\n"
                                       "Version: 0.0.0\n")
        (info / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {module_name}\n")
        modules.append(module_name)
    importlib.invalidate_caches()
    return modules


@contextlib.contextmanager
def installed_plugins(plugins: Mapping[str, object]):
    """Within the block the plugins are discovered as installed; yields the host."""
    folder = tempfile.mkdtemp(prefix="legato_plugins_")
    modules = write_distributions(folder, plugins)
    sys.path.insert(0, folder)
    try:
        yield reload_plugins()
    finally:
        sys.path.remove(folder)
        shutil.rmtree(folder, ignore_errors=True)
        for module in modules:
            if module.startswith("fake_legato_plugin_"):
                sys.modules.pop(module, None)
        importlib.invalidate_caches()
        reload_plugins()


def plugin_module(**hooks) -> types.ModuleType:
    """A module object whose functions are legato hook implementations."""
    module = types.ModuleType("fake_plugin")
    for name, fn in hooks.items():
        setattr(module, name, hookimpl(fn))
    return module
