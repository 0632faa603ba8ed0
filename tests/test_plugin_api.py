"""legato.plugin_api is the one core module a plugin package imports (besides `legato`):
its names exist, and no plugin package's source reaches past it into legato's internals."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import legato
import legato.plugin_api
from legato.testing.plugins import plugin_module

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
ALLOWED = {"legato", "legato.plugin_api"}


def _legato_imports(path: Path):
    """(line, module) of every import of a legato module in one source file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names
                        if a.name.split(".")[0] == "legato")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "legato":
            if node.module == "legato":  # `from legato import shapes` reaches a submodule too
                yield from ((node.lineno, f"legato.{a.name}") for a in node.names
                            if not hasattr(legato, a.name) or a.name not in legato.__all__)
            yield node.lineno, node.module


def _sources():
    return sorted(p for pkg in PLUGINS.glob("*/legato_*")
                  if pkg.is_dir() and pkg.suffix != ".egg-info" for p in pkg.rglob("*.py"))


def test_the_plugin_packages_are_found():
    found = {p.parts[len(PLUGINS.parts)] for p in _sources()}
    assert found >= {"cpu_ref", "c_kernels", "tosa_custom"}


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PLUGINS)))
def test_plugins_import_only_the_plugin_api(path):
    bad = [f"line {line}: {module}" for line, module in _legato_imports(path)
           if module not in ALLOWED]
    assert not bad, (f"{path.relative_to(PLUGINS)} imports legato internals "
                     f"(use legato.plugin_api): {bad}")


def test_every_name_of_the_plugin_api_exists():
    missing = [name for name in legato.plugin_api.__all__ if not hasattr(legato.plugin_api, name)]
    assert not missing
    assert len(set(legato.plugin_api.__all__)) == len(legato.plugin_api.__all__)


def test_the_check_catches_an_internal_import(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("import legato\nfrom legato import shapes\n"
                      "def f():\n    from legato.ir import Const\n")
    found = [m for _, m in _legato_imports(source) if m not in ALLOWED]
    assert found == ["legato.shapes", "legato.ir"]


# --- register(OpDef(...)): the one way a plugin adds an op, checked by OpDef alone

def _infer(types, attrs):
    return types[0]


def _swiglu(b, gate, up):
    return b.multiply(b.multiply(gate, b.sigmoid(gate)), up)


def _swiglu_as_divide(b, gate, up):  # another way an exporter writes it: gate / (1 + e^-gate)
    one = b.const(np.ones((), np.float32))
    return b.multiply(b.divide(gate, b.add(one, b.exp(b.negative(gate)))), up)


def _swiglu_opdef(**keywords):
    t = legato.plugin_api.TensorType((2, 8), "float32")
    return legato.plugin_api.OpDef("acme.swiglu", "gate, up", {}, _infer, "elemwise", 1, _swiglu,
                                   [([t, t], {})], **keywords)


def test_a_plugin_registers_an_opdef_with_patterns(install_plugins):
    host = install_plugins({"acme": plugin_module(legato_register_ops=lambda register: register(
        _swiglu_opdef(patterns=[_swiglu_as_divide], doc="SwiGLU.")))})
    opdef = host.registry.get("acme.swiglu")
    assert opdef.plugin == "acme" and opdef.patterns == (_swiglu_as_divide,) and not host.problems
    b = legato.GraphBuilder(host.registry)
    gate, up = b.input("gate", (2, 8), "float32"), b.input("up", (2, 8), "float32")
    back, _ = legato.recompose(b.build(_swiglu_as_divide(b, gate, up)), registry=host.registry)
    assert [c.op for c in back.main.calls] == ["acme.swiglu"]


@pytest.mark.parametrize("keywords, message", [
    ({"patterns": [1]}, "patterns must be functions"),
    ({"const_check": "no"}, "op acme.swiglu: const_check must be a function or None"),
    ({"doc": 3}, "op acme.swiglu: doc must be a string"),
])
def test_opdef_checks_its_arguments_for_the_core_and_plugins_alike(install_plugins, keywords,
                                                                  message):
    with pytest.raises(legato.RegistrationError, match=message):
        _swiglu_opdef(**keywords)

    def ops(register):
        register(_swiglu_opdef(**keywords))
    host = install_plugins({"bad": plugin_module(legato_register_ops=ops)})
    (problem,) = [m for p, m in host.problems if p == "bad"]
    assert message.split(": ")[-1] in problem and "acme.swiglu" not in host.registry


def test_the_positional_form_builds_the_same_opdef(install_plugins):
    t = legato.plugin_api.TensorType((2, 8), "float32")
    host = install_plugins({"acme": plugin_module(legato_register_ops=lambda register: register(
        "acme.swiglu", "gate, up", _infer, "elemwise", 1, _swiglu, [([t, t], {})],
        patterns=[_swiglu_as_divide]))})
    assert host.registry.get("acme.swiglu").patterns == (_swiglu_as_divide,)


def test_tosa_custom_brings_its_own_op_generators():
    """The core test kit holds no generator for a plugin's ops: tosa_custom's ops draw their
    samples from their own definitions (OpDef.generator / samples)."""
    from legato.testing import samples
    from legato.testing.generators import GENERATORS
    assert not [op for op in GENERATORS if op.startswith("tosa.")]
    registry = legato.context().registry
    tosa_ops = [op for op in legato.list_ops() if op.startswith("tosa.")]
    assert {"tosa.pow", "tosa.cast", "tosa.gather", "tosa.reciprocal"} <= set(tosa_ops)
    for op in tosa_ops:
        opdef = registry.get(op)
        assert opdef.plugin == "tosa_custom" and (opdef.generator or opdef.samples), op
        assert samples(op, count=2), op
