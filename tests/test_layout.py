"""The core's layout: its top level holds only packages and the public entry points; the
importers legato.frontends.onnx and legato.frontends.torch never import each other (what
both need is in legato.frontends.common), each lists every converter module in its
`converters` module, and no module is named for being "more" of something."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import legato
from tests.test_context import import_graph

FRONTENDS = Path(legato.__file__).parent / "frontends"
IMPORTERS = ("onnx", "torch")
# functions whose call at a module's top level (as a decorator or not) registers a converter
REGISTRARS = {"converter", "contrib", "aten", "complex_op", "register"}


# the public entry points: the package, the Python API, the plugin API (the command line is
# the package legato.cli)
TOP_LEVEL_MODULES = {"__init__.py", "api.py", "plugin_api.py"}


def test_the_core_top_level_holds_packages_and_entry_points():
    root = Path(legato.__file__).parent
    assert {p.name for p in root.glob("*.py")} == TOP_LEVEL_MODULES
    packages = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    assert {"ir", "ops", "legalization", "passes", "runtime", "plugins", "frontends", "testing",
            "cli", "show"} <= packages


@pytest.mark.parametrize("name", ["legato.shapes", "legato.frontends.torch_conformance",
                                  "legato.frontends.onnx_conformance", "legato.cli.__main__"])
def test_published_module_names_still_import(name):
    if name.endswith("__main__"):
        assert (Path(legato.__file__).parent / "cli" / "__main__.py").exists()
        return
    module = importlib.import_module(name)
    assert module.__name__ == name or name == "legato.shapes"
    assert hasattr(module, "main") or hasattr(module, "broadcast_shapes")


def test_no_module_is_named_more():
    root = Path(legato.__file__).parent
    assert not sorted(p.relative_to(root).as_posix() for p in root.rglob("*_more.py"))


@pytest.mark.parametrize("importer", IMPORTERS)
def test_an_importer_package_does_not_import_the_other(importer):
    other = next(name for name in IMPORTERS if name != importer)
    graph = import_graph()
    mine, theirs = f"legato.frontends.{importer}", f"legato.frontends.{other}"
    modules = [name for name in graph if name == mine or name.startswith(mine + ".")]
    assert len(modules) > 5, modules
    wrong = sorted(f"{name} -> {target}" for name in modules for target in graph[name]
                   if target == theirs or target.startswith(theirs + "."))
    assert not wrong


def test_common_imports_neither_importer():
    graph = import_graph()
    wrong = sorted(f"{name} -> {target}" for name in graph
                   if name.startswith("legato.frontends.common") for target in graph[name]
                   if target.startswith(("legato.frontends.onnx", "legato.frontends.torch")))
    assert not wrong


def _registers(path: Path) -> bool:
    """Whether the module registers converters when imported: a top-level call (decorator,
    statement or loop) of one of REGISTRARS, or `ATEN.setdefault` as a decorator."""
    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        nodes = stmt.decorator_list if isinstance(
            stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else [stmt]
        for node in (n for top in nodes for n in ast.walk(top)):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in REGISTRARS:
                    return True
                if isinstance(func, ast.Attribute) and func.attr == "setdefault" and \
                        isinstance(func.value, ast.Name) and func.value.id == "ATEN":
                    return True
    return False


@pytest.mark.parametrize("importer", IMPORTERS)
def test_every_converter_module_is_in_the_importers_list(importer):
    listed = {m.__name__.rpartition(".")[2] for m in
              importlib.import_module(f"legato.frontends.{importer}.converters").MODULES}
    registering = {p.stem for p in (FRONTENDS / importer).glob("*.py") if _registers(p)}
    assert registering, "no converter module found: has the registration changed?"
    assert registering - listed == set(), "add these to converters.MODULES"
    assert listed - registering == set(), "these register nothing"


def test_the_layout_check_sees_every_kind_of_registration(tmp_path):
    kinds = ['@converter("Add")\ndef add(node): ...',
             'aten("aten.x.default")(fn)',
             'for n in NAMES:\n    complex_op(n)(fn)',
             'register("ns::op", fn)',
             '@lambda f: ATEN.setdefault("aten.sym_size.int", f)\ndef f(): ...']
    for k, text in enumerate(kinds):
        (tmp_path / f"m{k}.py").write_text(text)
        assert _registers(tmp_path / f"m{k}.py"), text
    (tmp_path / "plain.py").write_text("def converter_of(x):\n    return register(x)\n")
    assert not _registers(tmp_path / "plain.py")
