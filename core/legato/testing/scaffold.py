"""`legato init NAME`: a plugin distribution that installs, registers a backend and passes
its own conformance test unchanged.

    NAME/
      pyproject.toml           the `legato` entry point: NAME = "NAME.plugin"
      README.md
      src/NAME/__init__.py
      src/NAME/capability.yaml legal ops and the kernel table
      src/NAME/kernels.py      numpy kernels (replace them with calls into your runtime)
      src/NAME/plugin.py       the hookimpls
      tests/test_conformance.py
"""
from __future__ import annotations

import keyword
import re
from pathlib import Path

from ..ir.errors import LegatoError

NAME = re.compile(r"[a-z][a-z0-9_]*")


class ScaffoldError(LegatoError):
    """A plugin cannot be scaffolded here (bad name, directory in use)."""


PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "legato backend {name}"
requires-python = ">=3.10"
dependencies = ["legato", "numpy>=1.24"]

[project.optional-dependencies]
test = ["pytest>=7"]

# legato finds the plugin through this entry point (group "legato")
[project.entry-points.legato]
{name} = "{name}.plugin"

# a src layout: the project directory itself never shadows the package
[tool.setuptools.packages.find]
where = ["src"]

[tool.setuptools.package-data]
{name} = ["capability.yaml"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

CAPABILITY = '''\
# The ops {name} runs itself, and when (dtypes, ranks, attribute values); legato
# decomposes everything else into these or hands it to the fallback. Each legal op needs a
# kernel in the table `kernels:` names (docs/yaml.md).
backend: {name}
description: {name} (scaffolded by legato init)
executes: true
fallback: cpu_ref
legal:
  add: {{dtypes: [float32]}}
  multiply: {{dtypes: [float32]}}
  nn.relu: {{dtypes: [float32]}}
  exp: {{dtypes: [float32], ranks: [0, 1, 2, 3, 4]}}
kernels: {name}.kernels:KERNELS
'''

KERNELS = '''\
"""Kernels of {name}: kernel(*inputs, **attrs) -> a fresh numpy array of the op's dtype
and shape (a tuple of them for ops of several results). Inputs may be read-only: never
write them. `legato check-backend {name}` checks all of this against cpu_ref."""
import numpy as np


def add(a, b):
    return np.asarray(np.add(a, b))  # numpy answers a 0-d add with a scalar: make it an array


def multiply(a, b):
    return np.asarray(np.multiply(a, b))


def relu(data):
    return np.asarray(np.maximum(data, np.zeros((), data.dtype)))


def exp(a):
    return np.asarray(np.exp(a))


KERNELS = {{"add": add, "multiply": multiply, "nn.relu": relu, "exp": exp}}
'''

PLUGIN = '''\
"""The {name} plugin: legato calls these hooks when it discovers the entry point."""
from importlib.resources import files

import legato


@legato.hookimpl
def legato_register_backends(register):
    register(str(files("{name}") / "capability.yaml"))
'''

TEST = '''\
"""Every legal op and kernel of {name} on legato's samples, against cpu_ref."""
from legato.testing import backend_conformance

test_conformance = backend_conformance("{name}")
'''

README = '''\
# {name}

A legato backend plugin.

    pip install -e .              # registers the entry point
    legato backends               # {name} is listed
    legato check-backend {name}   # every legal op and kernel against cpu_ref
    pytest                        # the same, as a test

Edit `src/{name}/capability.yaml` (which ops are legal, and when) and `src/{name}/kernels.py`
(one function per op). A model compiled with `legato.compile(model, "{name}")` runs the
legal ops on these kernels and the rest on the fallback, cpu_ref.
'''

INIT = '''\
"""{name}: a legato backend plugin."""
'''


def files_for(name: str) -> dict[str, str]:
    """Relative path -> text of every file of the scaffold."""
    fields = {"name": name, "dist": name.replace("_", "-")}
    return {
        "pyproject.toml": PYPROJECT.format(**fields),
        "README.md": README.format(**fields),
        f"src/{name}/__init__.py": INIT.format(**fields),
        f"src/{name}/capability.yaml": CAPABILITY.format(**fields),
        f"src/{name}/kernels.py": KERNELS.format(**fields),
        f"src/{name}/plugin.py": PLUGIN.format(**fields),
        "tests/test_conformance.py": TEST.format(**fields),
    }


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(f"plugin name {name!r} is not valid: use lower-case letters, "
                            "digits and underscores, starting with a letter (it names the "
                            "Python package and the backend)")
    if name in ("legato", "cpu_ref", "test", "tests") or name.startswith("legato_"):
        raise ScaffoldError(f"plugin name {name!r} is taken: it would shadow a legato "
                            "package or backend")


def scaffold(name: str, where: str | Path = ".") -> Path:
    """Write the plugin distribution `name` into where/name; returns that directory.
    Refuses an invalid name and a directory that exists and is not empty."""
    check_name(name)
    root = Path(where) / name
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ScaffoldError(f"{root} already exists and is not an empty directory; "
                            "choose another name or remove it")
    for relative, text in files_for(name).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
